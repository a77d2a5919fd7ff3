"""Atomic publication through the real `cfgen`: SIGKILL of selection, inpaint and the gallery once each has started
changing its image folder (its staging folder exists or holds a PNG; the site holds a new image) -> every PNG the
table in place names (selected.parquet, inpainted.parquet, the gallery's data.js) still exists and decodes; after a
rerun, too, and the folder holds exactly the new table's PNGs, with no staging folder left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

from flows.image.generate import generate_flow
from flows.image.selection import selection_flow
from flows.removal.captions import removal_captions_flow
from flows.removal.inpaint import inpaint_flow
from flows.removal.masks import removal_masks_flow
from tasks.core.images import read_rgb
from tasks.image import store
from tasks.release.gallery import build
from tests.conftest import ROOT, SHARED, project_params, requires_nltk
from tests.flows.test_image import MORE, image_overrides, image_params, pairs_file
from tests.flows.test_removal import removal_paths
from tests.image.fixtures import PAIRS
from tests.release.test_gallery import site_data, write_run

pytest_plugins = ["tests.image.fixtures"]


def on_server(store_path: Path) -> dict[str, str]:
    """The environment of a `cfgen` on the test's Prefect server with `store_path` as its result store."""
    from prefect.settings import PREFECT_API_URL

    return {"PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(store_path)}


def start(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The real `cfgen *args` in `folder` (holding a copy of params.yaml), in its own session, its output logged."""
    shutil.copy(ROOT / "params.yaml", folder / "params.yaml")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "NLTK_DATA": str(SHARED / "nltk_data"),
           **(env or {})}
    with (folder / "cfgen.log").open("a") as log:
        return subprocess.Popen([sys.executable, "-m", "flows.cli", *args], cwd=folder, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def run(folder: Path, *args: str, env: dict[str, str] | None = None) -> None:
    process = start(folder, *args, env=env)
    assert process.wait(timeout=600) == 0, (folder / "cfgen.log").read_text()[-4000:]


def options(overrides: list[str]) -> list[str]:
    return [arg for option in overrides for arg in ("-p", option)]


def kill_once(process: subprocess.Popen, changing: Callable[[], bool], folder: Path) -> None:
    """SIGKILL `process` (its whole session) as soon as `changing()`; it must not have finished before."""
    deadline = time.monotonic() + 600
    while not changing():
        assert process.poll() is None, f"finished before it was killed:\n{(folder / 'cfgen.log').read_text()[-3000:]}"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL


def pngs(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def assert_intact(folder: Path, names: list[str]) -> None:
    """Each content-addressed PNG in `names` is in `folder` and decodes to the pixels its name hashes."""
    for name in names:
        assert store.image_path(read_rgb(folder / name)) == name, name


def assert_published(table: Path, folder: Path, columns: tuple[str, ...]) -> set[str]:
    """The folder holds exactly the PNGs `table` names, intact, and no staging folder is left beside it."""
    named = {n for column in columns for n in pl.read_parquet(table)[column]}
    assert_intact(folder, sorted(named))
    assert pngs(folder) == named and not folder.with_name(f".{folder.name}.staging").exists()
    return named


def test_sigkill_of_selection_mid_run_leaves_every_png_selected_names(tmp_path, result_store, tiny_specs):
    """A first selection of three pairs, then `cfgen selection` of a single pair in a fresh result store (so it
    renders): SIGKILLed once its staging folder exists, every PNG the existing selected.parquet names still exists;
    after a rerun, too, and the folder holds the one pair's PNGs."""
    params = image_params(tiny_specs)
    generate_flow(pairs_file(tmp_path, pl.concat([PAIRS, MORE])), tmp_path / "scores.parquet", params)
    pl.read_parquet(tmp_path / "scores.parquet").filter(pl.col("caption_id") == "p1").write_parquet(
        tmp_path / "one.parquet")
    table, images, columns = tmp_path / "selected.parquet", tmp_path / "images", ("image_o", "image_c")

    selection_flow(tmp_path / "scores.parquet", table, images, params)
    command = ("selection", "one.parquet", table.name, "--selected-images", images.name,
               *options(image_overrides(tiny_specs)))
    before, first = table.read_bytes(), assert_published(table, images, columns)
    assert len(first) == 6

    fresh = on_server(tmp_path / "fresh-store")
    kill_once(start(tmp_path, *command, env=fresh), (tmp_path / ".images.staging").is_dir, tmp_path)
    assert table.read_bytes() == before  # killed mid-run: the table in place is the first one
    assert_intact(images, sorted(first))

    run(tmp_path, *command, env=fresh)
    assert len(assert_published(table, images, columns)) == 2


@requires_nltk
def test_sigkill_of_inpaint_mid_run_leaves_every_png_inpainted_names(tmp_path, result_store, removal_inputs):
    """A first inpaint, then `cfgen inpaint` with another seed (every edit filled again): SIGKILLed once its staging
    folder holds a PNG, every PNG the existing inpainted.parquet names still exists; after a rerun, too."""
    paths = removal_paths(removal_inputs, tmp_path)
    overrides = [*(f"paths.{k}={v}" for k, v in paths.items()), f"inpaint.model.id={removal_inputs['inpaint']}"]
    params = project_params(*overrides)
    removal_masks_flow(params)
    removal_captions_flow(params)
    inpaint_flow(params)
    command, env = ("inpaint", *options([*overrides, "inpaint.seed=1"])), on_server(result_store)
    before, columns = paths["inpainted"].read_bytes(), ("image_0", "image_1")
    first = assert_published(paths["inpainted"], paths["inpainted_images"], columns)

    staging = tmp_path / ".images.staging"
    kill_once(start(tmp_path, *command, env=env), lambda: any(staging.rglob("*.png")), tmp_path)
    assert paths["inpainted"].read_bytes() == before
    assert_intact(paths["inpainted_images"], sorted(first))

    run(tmp_path, *command, env=env)
    again = assert_published(paths["inpainted"], paths["inpainted_images"], columns)
    assert again != first and json.loads((paths["metrics"] / "inpaint.json").read_text())["rows_out"] > 0


def site_images(site: Path) -> list[str]:
    """The site paths of every image and thumbnail the gallery's data.js shows; asserts each is there and decodes,
    each full image to the pixels its name hashes."""
    shown = [image for card in site_data(site)["pairs"] for image in (card["image_o"], card["image_c"])]
    assert_intact(site / "images", [image["full"].removeprefix("images/") for image in shown])
    for image in shown:
        read_rgb(site / image["thumb"])
    return sorted(path for image in shown for path in image.values())


def test_sigkill_of_the_gallery_mid_build_leaves_every_image_its_data_js_shows(tmp_path):
    """A gallery of one selection, then of another (40 new pairs): SIGKILLed once the site holds a new image, every
    image and thumbnail the data.js in place shows is there and decodes; after a rerun, too, and only those."""
    site = tmp_path / "site"
    old, new = ([f"{k}={v}" for k, v in {**write_run(tmp_path / name, 40, seed=seed), "paths.gallery": site}.items()]
                for name, seed in (("a", 0), ("b", 1)))
    build(project_params(*old))
    before, shown = (site / "data.js").read_bytes(), site_images(site)
    first = pngs(site / "images")

    kill_once(start(tmp_path, "gallery", *options(new)), lambda: pngs(site / "images") - first, tmp_path)
    assert (site / "data.js").read_bytes() == before
    assert site_images(site) == shown

    run(tmp_path, "gallery", *options(new))
    assert site_images(site) == sorted([*(f"images/{p}" for p in pngs(site / "images")),
                                        *(f"thumbs/{p}" for p in pngs(site / "thumbs"))])
