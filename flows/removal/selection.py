"""The removal_selection stage: the CLIP check of every edit and the kept pairs' split."""

from __future__ import annotations

from prefect import flow

from flows.engine.sharding import LocalTaskRunner
from flows.removal import finish
from tasks.core.io import read_frame
from tasks.core.loading import set_torch_threads
from tasks.core.schemas import INPAINTED, REMOVAL_SPLITS
from tasks.removal import selection
from tasks.stages import Params


@flow(name="removal-selection", task_runner=LocalTaskRunner())  # type: ignore[arg-type]  # prefect#16938
def removal_selection_flow(params: Params) -> dict:
    """The CLIP check of every edit and the kept pairs' split."""
    paths, section = params.paths, params.removal_selection
    set_torch_threads(params.engine.torch_threads)  # the CLIP check runs in this thread
    edits = read_frame(paths.inpainted, INPAINTED, "inpaint")
    kept, rejects = selection.run(edits, paths.inpainted_images, section, selection.load_models(section))
    splits = {s: int((kept["split"] == s).sum()) for s in REMOVAL_SPLITS}
    return finish("removal_selection", edits.height, kept, rejects, paths.removal_pairs, params, pairs=kept.height,
                   splits=splits)
