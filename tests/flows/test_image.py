"""Image flows: per-pair and per-sample caching, crash resume, canonical selection (cached, falling through), and
the whole DAG on a Dask cluster == local."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from filelock import FileLock
from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

from flows.image.generate import generate_flow
from flows.image.selection import selection_flow
from tasks.core.errors import UserError
from tasks.core.schemas import PAIR, SCORE_COLUMNS, SUBJECT_COLUMNS
from tasks.core.writing import write_frame
from tasks.image import render
from tasks.image.sampling import Sample
from tests.conftest import project_params
from tests.image.fixtures import PAIRS, read_png

pytest_plugins = ["tests.image.fixtures"]
MORE = pl.DataFrame({"caption_id": ["p2"], "image_id": ["i2"], "caption": ["a horse in a field"],
                     "counterfactual": ["a cow in a field"], "edit_type": ["noun"], "original_word": ["horse"],
                     "substitute": ["cow"]})
LOOSE = [f"selection.{name}=-1.0"
         for name in ("min_text_image_o", "min_text_image_c", "min_image_image", "min_clip_dir")] + [
    f"selection.min_subject_margin_{side}=null" for side in "oc"]


def image_overrides(specs, *overrides: str) -> list[str]:
    """params.yaml overrides for the tiny image models at 32 px, 2 steps, 3 samples, loose thresholds."""
    diffusion, clip = specs
    return [f"generate.diffusion.id={diffusion.id}", "generate.vae=null", f"generate.clip.id={clip.id}",
            f"generate.clip.pretrained={clip.pretrained}", f"generate.clip.config={clip.config}", "generate.size=32",
            "generate.steps=2", "generate.n_samples=3", "generate.batch_samples=3", "engine.torch_threads=1", *LOOSE,
            *overrides]


def image_params(specs, *overrides: str):
    return project_params(*image_overrides(specs, *overrides))


@pytest.fixture
def params(tiny_specs):
    return image_params(tiny_specs)


def pairs_file(tmp_path, frame: pl.DataFrame, name: str = "pairs.parquet"):
    write_frame(frame, tmp_path / name)
    return tmp_path / name


def test_rerun_and_appended_pairs_generate_only_new_pairs(tmp_path, result_store, params):
    first = generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "a.parquet", params)
    again = generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "b.parquet", params)
    grown = generate_flow(pairs_file(tmp_path, pl.concat([PAIRS, MORE]), "more.parquet"), tmp_path / "c.parquet",
                          params)
    assert (first["pairs_generated"], again["pairs_generated"], grown["pairs_generated"]) == (2, 0, 1)
    assert (first["samples_rendered"], again["samples_rendered"], grown["samples_rendered"]) == (6, 0, 3)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert pl.read_parquet(tmp_path / "c.parquet").head(6).equals(pl.read_parquet(tmp_path / "a.parquet"))


def test_n_samples_up_and_down_through_the_flow(tmp_path, result_store, tiny_specs):
    source = pairs_file(tmp_path, PAIRS)
    counts = [generate_flow(source, tmp_path / f"{n}.parquet", image_params(tiny_specs, f"generate.n_samples={n}"))
              for n in (3, 5, 3)]
    assert [(m["pairs_generated"], m["samples_rendered"]) for m in counts] == [(2, 6), (2, 4), (0, 0)]
    assert pl.read_parquet(tmp_path / "5.parquet").filter(pl.col("sample") < 3).equals(
        pl.read_parquet(tmp_path / "3.parquet"))
    # raised in a store that held 3 samples: the same bytes as 5 rendered fresh, in other batches (issue 65)
    with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: tmp_path / "fresh"}):
        generate_flow(source, tmp_path / "fresh.parquet", image_params(
            tiny_specs, "generate.n_samples=5", "generate.batch_samples=2", "generate.clip_batch_size=3"))
    assert (tmp_path / "5.parquet").read_bytes() == (tmp_path / "fresh.parquet").read_bytes()


def test_a_crash_mid_pair_loses_only_the_batch_in_flight_and_resumes_to_the_same_rows(tmp_path, result_store,
                                                                                     tiny_specs, monkeypatch):

    params = image_params(tiny_specs, "generate.batch_samples=1")
    source = pairs_file(tmp_path, pl.concat([PAIRS, MORE]))
    original, calls = render.measure, []

    def crash_on_fifth_batch(*args, **kwargs):  # 3 samples of the first pair, then the second pair's first
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("simulated crash")
        return original(*args, **kwargs)
    with monkeypatch.context() as patched:
        patched.setattr(render, "measure", crash_on_fifth_batch)
        with pytest.raises(RuntimeError, match="simulated crash"):
            generate_flow(source, tmp_path / "out.parquet", params)
    assert not (tmp_path / "out.parquet").exists()
    resumed = generate_flow(source, tmp_path / "out.parquet", params)
    assert (resumed["pairs_generated"], resumed["samples_rendered"], resumed["samples"]) == (2, 9 - 4, 9)
    with temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: tmp_path / "fresh"}):
        whole = generate_flow(source, tmp_path / "whole.parquet", params)
    assert whole["samples_rendered"] == 9
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()


def test_selection_renders_each_winner_once_and_exports_its_canonical_scores(tmp_path, result_store, params):
    generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "scores.parquet", params)
    first = selection_flow(tmp_path / "scores.parquet", tmp_path / "sel.parquet", tmp_path / "img", params)
    again = selection_flow(tmp_path / "scores.parquet", tmp_path / "sel2.parquet", tmp_path / "img2", params)
    assert (first["accepted"], first["renders"], again["renders"], again["renders_cached"]) == (2, 2, 0, 2)
    assert (tmp_path / "sel.parquet").read_bytes() == (tmp_path / "sel2.parquet").read_bytes()
    threads = torch.get_num_threads()
    torch.set_num_threads(params.engine.torch_threads)  # CPU float results depend on the thread count
    for row in pl.read_parquet(tmp_path / "sel.parquet").iter_rows(named=True):
        pair = {k: row[k] for k in PAIR}
        canonical = render.canonical(pair, Sample(row["seed"], row["p2p_fraction"], row["guidance_scale"]),
                                     params.generate, render.load_models(params.generate))  # the flow's
        # exported scores = exported pixels
        assert all(row[name] == canonical[name] for name in (*SCORE_COLUMNS, *SUBJECT_COLUMNS))
        for image, column in zip(canonical["images"], ("image_o", "image_c")):
            assert (read_png(tmp_path / "img" / row[column]) == image).all()
    torch.set_num_threads(threads)


def test_a_threshold_change_renders_only_new_winners_and_its_reversal_renders_nothing(tmp_path, result_store, params):
    generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "scores.parquet", params)
    scores = pl.read_parquet(tmp_path / "scores.parquet")
    base = selection_flow(tmp_path / "scores.parquet", tmp_path / "a.parquet", tmp_path / "img", params)
    winners = pl.read_parquet(tmp_path / "a.parquet")
    # raise min_clip_dir just above p0's winner: p0 needs its next sample, p1 keeps its winner (if it still passes)
    p0 = winners.filter(pl.col("caption_id") == "p0")["clip_dir"][0]
    stricter = params.model_copy(update={"selection": params.selection.model_copy(update={"min_clip_dir": p0 + 1e-9})})
    changed = selection_flow(tmp_path / "scores.parquet", tmp_path / "b.parquet", tmp_path / "img_b", stricter)
    still_passing = scores.filter(pl.col("clip_dir") > p0)["caption_id"].unique().to_list()
    assert changed["accepted"] == len(still_passing)
    new_winners = pl.read_parquet(tmp_path / "b.parquet").join(winners, on=["caption_id", "sample"], how="anti")
    assert changed["renders"] == new_winners.height
    back = selection_flow(tmp_path / "scores.parquet", tmp_path / "c.parquet", tmp_path / "img_c", params)
    assert (base["renders"], back["renders"]) == (2, 0)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "c.parquet").read_bytes()


def test_an_images_folder_takes_one_run_at_a_time_and_one_table(tmp_path, result_store, params):
    """A second table into the folder another names, or a second run while one holds it: one line each, and every
    PNG the first table names stays; a table since deleted gives its folder up."""
    generate_flow(pairs_file(tmp_path, PAIRS), tmp_path / "scores.parquet", params)
    scores, images = tmp_path / "scores.parquet", tmp_path / "img"
    selection_flow(scores, tmp_path / "a.parquet", images, params)
    named = [images / p for column in ("image_o", "image_c") for p in pl.read_parquet(tmp_path / "a.parquet")[column]]
    with pytest.raises(UserError, match=r"img holds the files of .*a\.parquet, not of .*b\.parquet: give this run"):
        selection_flow(scores, tmp_path / "b.parquet", images, params)
    with FileLock(tmp_path / ".img.lock"), pytest.raises(UserError, match="another run is writing .*img: wait"):
        selection_flow(scores, tmp_path / "a.parquet", images, params)
    assert named and all(p.is_file() for p in named) and not (tmp_path / "b.parquet").exists()
    (tmp_path / "a.parquet").unlink()
    assert selection_flow(scores, tmp_path / "b.parquet", images, params)["accepted"] == 2


def test_a_failing_canonical_render_falls_through_to_the_next_sample(tmp_path, result_store, params, monkeypatch):
    generate_flow(pairs_file(tmp_path, PAIRS.head(1)), tmp_path / "scores.parquet", params)
    original, calls = render.canonical, []

    def first_is_nan(*args, **kwargs):
        calls.append(1)
        result = original(*args, **kwargs)
        return {**result, "nan": True} if len(calls) == 1 else result
    monkeypatch.setattr(render, "canonical", first_is_nan)
    metrics = selection_flow(tmp_path / "scores.parquet", tmp_path / "sel.parquet", tmp_path / "img", params)
    ranked = pl.read_parquet(tmp_path / "scores.parquet").sort("clip_dir", "sample", descending=[True, False])
    selected, rejects = pl.read_parquet(tmp_path / "sel.parquet"), pl.read_parquet(tmp_path / "sel.rejects.parquet")
    assert (metrics["accepted"], metrics["fallthrough"], metrics["renders"]) == (1, 1, 2)
    assert selected.select("sample", "tried").row(0) == (ranked["sample"][1], 2)
    assert rejects.select("sample", "reason").rows() == [(ranked["sample"][0], "canonical_nan_image")]


def test_any_cut_into_tasks_takes_every_sample_from_the_cache_and_keeps_the_input_order(tmp_path, result_store,
                                                                                         tiny_specs, monkeypatch):
    """The cache is per pair, so a run cut into other tasks (`generate.pairs_per_task`; here also handed out in
    reverse) renders nothing and writes the same bytes: pairs in input order, whatever order the tasks ran in."""
    from tasks.image import chunks

    source = pairs_file(tmp_path, pl.concat([PAIRS, MORE]))
    whole = generate_flow(source, tmp_path / "whole.parquet", image_params(tiny_specs))
    cut = chunks.sample_cut
    monkeypatch.setattr(chunks, "sample_cut", lambda samples, per_task: cut(samples, per_task)[::-1])
    apart = generate_flow(source, tmp_path / "apart.parquet", image_params(tiny_specs, "generate.pairs_per_task=1"))
    assert (whole["samples_rendered"], apart["samples_rendered"]) == (9, 0)
    assert (tmp_path / "whole.parquet").read_bytes() == (tmp_path / "apart.parquet").read_bytes()
    written = pl.read_parquet(tmp_path / "apart.parquet")["caption_id"].unique(maintain_order=True).to_list()
    assert written == [*PAIRS["caption_id"], "p2"]
