"""The object-removal flows on the synthetic COCO set with the tiny inpainting model and tiny CLIP: the funnel adds
up, a rerun fills nothing, a run killed mid-inpaint resumes to the same result, the export loads as three splits,
and the evaluate flow adds each model's ODmAP@k."""

from __future__ import annotations

import shutil
from pathlib import Path

import datasets
import polars as pl
import pytest
from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

from flows.evaluation import removal_metrics
from flows.removal.captions import removal_captions_flow
from flows.removal.export import removal_export_flow
from flows.removal.inpaint import fill_unit, inpaint_flow
from flows.removal.masks import removal_masks_flow
from flows.removal.selection import removal_selection_flow
from tasks.core.io import rejects_path
from tasks.core.loading import release_models
from tasks.core.specs import ClipSpec, ModelSpec
from tasks.removal import inpaint
from tests.conftest import project_params, requires_nltk

pytestmark = requires_nltk
STEPS = (removal_masks_flow, removal_captions_flow, inpaint_flow, removal_selection_flow)


def removal_paths(removal_inputs: dict[str, Path], out: Path) -> dict[str, Path]:
    """The `paths` of the object-removal stages: the synthetic COCO set in, every output under `out`."""
    coco = removal_inputs["coco"]
    return {"removal_instances": coco / "instances.json", "removal_captions_source": coco / "captions.json",
            "removal_images": coco / "images", "removal_masks": out / "masks.parquet",
            "removal_captions": out / "captions.parquet", "removal_gallery": out / "gallery.parquet",
            "inpainted": out / "inpainted.parquet", "inpainted_images": out / "images", "metrics": out / "metrics",
            "removal_pairs": out / "pairs.parquet", "removal_export": out / "export"}


@pytest.fixture
def params(removal_inputs, tmp_path):
    clip = ClipSpec(id="cfgen-tiny-clip", pretrained=str(removal_inputs["clip_pretrained"]),
                    config=str(removal_inputs["clip_config"]))
    base = project_params()
    paths = base.paths.model_copy(update=removal_paths(removal_inputs, tmp_path))
    inpainter = ModelSpec(id=str(removal_inputs["inpaint"]))
    return base.model_copy(update={
        "paths": paths, "inpaint": base.inpaint.model_copy(update={"model": inpainter}),
        "removal_selection": base.removal_selection.model_copy(update={"clip": clip}),
        "evaluate": base.evaluate.model_copy(update={"models": {"clip": clip}})})


def run_all(params) -> dict[str, dict]:
    return {flow.name: flow(params) for flow in STEPS}


def test_funnel_rerun_and_export(params, result_store):
    """The funnel adds up, a rerun fills nothing and the export loads; the flows that load models (inpaint, removal
    selection) release them when their flow runs end, as one `cfgen run` process needs: nothing is left to release."""
    release_models()
    first = run_all(params)
    assert release_models() == 0
    masks, captions, filled, pairs = first.values()
    assert masks["images"] == 24 and 0 < masks["eligible"] < masks["images"]
    assert masks["removals"] == masks["rows_out"] <= masks["classes_tried"]
    assert sum(masks["rejects"].values()) == masks["classes_tried"] - masks["removals"] + (
        masks["images"] - masks["eligible"])
    assert captions["rows_in"] == masks["removals"] and 0 < captions["rows_out"] < captions["rows_in"]
    assert filled["edits_filled"] == filled["rows_out"] == captions["rows_out"]
    assert pairs["rows_out"] == sum(pairs["splits"].values()) > 0
    assert run_all(params)["inpaint"]["edits_cached"] == filled["rows_out"]  # a rerun fills nothing

    splits = removal_export_flow(params)
    loaded = datasets.load_dataset(str(params.paths.removal_export))
    assert {s: loaded[s].num_rows for s in loaded} == {s: n for s, n in splits.items() if n}
    row = loaded["train"][0]
    assert row["image_0"].size == row["image_1"].size and row["caption_0"] != row["caption_1"]
    card = (params.paths.removal_export / "README.md").read_text()
    assert f"| images | {masks['images']} |" in card and f"| pairs | {pairs['rows_out']} |" in card

    odmap = removal_metrics(params)
    assert set(odmap["clip"]["odmap"]) == {"odmap@1", "odmap@5", "odmap@10"}
    assert set(odmap["clip"]["odmap_by_normalisation"]) == {"relevant", "k"}
    assert all(0 <= v <= 100 for v in odmap["clip"]["odmap"].values())


def test_a_run_killed_mid_inpaint_resumes_to_the_same_result(params, result_store, monkeypatch, tmp_path):
    for flow in STEPS[:2]:
        flow(params)
    original, calls = inpaint.fill, []

    def crash_on_fifth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("simulated crash")
        return original(*args, **kwargs)

    monkeypatch.setattr(inpaint, "fill", crash_on_fifth)
    with pytest.raises(RuntimeError, match="simulated crash"):
        inpaint_flow(params)
    monkeypatch.setattr(inpaint, "fill", original)
    resumed = inpaint_flow(params)
    # the four edits before the crash (and any the runner finished before the flow stopped) come from the cache
    assert 4 <= resumed["edits_cached"] < resumed["rows_out"]
    assert resumed["edits_filled"] == resumed["rows_out"] - resumed["edits_cached"]
    kept = pl.read_parquet(params.paths.inpainted)
    with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: tmp_path / "fresh-store"}):
        uninterrupted = inpaint_flow(params)  # an empty cache: every edit filled in one go
    assert uninterrupted["edits_filled"] == resumed["rows_out"]
    assert pl.read_parquet(params.paths.inpainted).equals(kept)  # the same rows, pixel-addressed image paths


def test_an_inpaint_key_holds_only_what_its_fill_reads():
    """`zero` reads no model and no prompt: another model or step count fills nothing again; `blur` reads its radius;
    every fill reads the mask's dilation."""
    zero = project_params().inpaint.model_copy(update={"fill": "zero"})
    elsewhere = zero.model_copy(update={"steps": 3, "blur_radius": 2.0, "model": ModelSpec(id="/nowhere/inpainter")})
    assert fill_unit(elsewhere).shared == fill_unit(zero).shared  # (the absent model is never fingerprinted)
    assert fill_unit(zero.model_copy(update={"dilate": 2})).shared != fill_unit(zero).shared
    blur = zero.model_copy(update={"fill": "blur"})
    assert fill_unit(blur).shared not in {fill_unit(zero).shared, fill_unit(blur.model_copy(
        update={"blur_radius": 2.0})).shared}


def test_inpaint_rejects_each_image_it_cannot_use_and_fills_every_other_edit(params, result_store, tmp_path):
    """A truncated image, an empty one and a file name climbing out of `removal_images` (to a real image): their
    edits are rejects with the reason, none is read, and every other edit is filled."""
    images = tmp_path / "coco_images"
    shutil.copytree(params.paths.removal_images, images)
    params = params.model_copy(update={"paths": params.paths.model_copy(update={"removal_images": images})})
    removal_masks_flow(params)
    removal_captions_flow(params)
    edits = pl.read_parquet(params.paths.removal_captions)
    truncated, empty, outside = edits["file_name"].unique(maintain_order=True).to_list()[:3]
    (images / truncated).write_bytes((images / truncated).read_bytes()[:60])  # IHDR and a piece of IDAT
    (images / empty).write_bytes(b"")
    shutil.move(images / outside, tmp_path / outside)  # a real image, reachable only by `..`
    climbing = pl.when(pl.col("file_name") == outside).then(pl.lit(f"../{outside}")).otherwise("file_name")
    edits.with_columns(file_name=climbing).write_parquet(params.paths.removal_captions)

    inpaint_flow(params)
    kept, rejects = pl.read_parquet(params.paths.inpainted), pl.read_parquet(rejects_path(params.paths.inpainted))
    expected = {truncated: "image_unreadable", empty: "image_unreadable", f"../{outside}": "image_missing"}
    assert dict(rejects.select("file_name", "reason").unique().rows()) == expected
    assert kept.height + rejects.height == edits.height and not set(kept["file_name"]) & set(expected)
