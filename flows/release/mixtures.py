"""The mixtures flow: the paper's base / medium / all training mixtures (App. B.4.1)."""

from __future__ import annotations

from prefect import flow

from flows.engine.console import show_json
from tasks.core.images import source_image_paths, stored_files
from tasks.core.io import read_frame
from tasks.core.schemas import PAIR_IMAGES
from tasks.core.writing import write_json
from tasks.release import mixtures
from tasks.stages import Params


@flow(name="mixtures")
def mixtures_flow(params: Params) -> dict:
    """The base / medium / all training mixtures as `datasets` configs under the export folder; returns their
    sizes (also written to `paths.metrics/mixtures.json`)."""
    paths = params.paths
    selected = read_frame(paths.selected, PAIR_IMAGES, "selection")
    stored_files(paths.selected_images, [*selected["image_o"], *selected["image_c"]])  # names, before any is read
    real = {cid: str(path.absolute()) for cid, path in zip(selected["caption_id"], source_image_paths(
        selected["image_id"], paths.source_images, paths.source_image_name)) if path}  # not under selected_images
    built = mixtures.mixture_rows(selected, real, params.mixtures.seed)
    mixtures.write_mixtures(built, paths.selected_images, paths.export / "mixtures")
    result = {"pairs": selected.height, "real_images": len(real), "sizes": mixtures.sizes(built)}
    write_json(result, paths.metrics / "mixtures.json")
    return result


def show(result: dict) -> None:
    show_json(result["sizes"])
