"""The evaluate flow caches per model: a rerun evaluates nothing, an added model only itself, a changed k all, a
changed re-rank setting or re-ranking bi-encoder the cross-encoder, an ODmAP setting ODmAP alone; it writes the Δ
parquet, metrics.json and the figure."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from flows.evaluation import evaluate_flow, model_content, model_unit, pairs_content
from tasks.core.keys import digest
from tasks.core.schemas import EVALUATION
from tasks.core.writing import write_frame
from tasks.evaluation import evaluate as stage
from tasks.evaluation.params import EvaluateParams
from tests.conftest import project_params
from tests.evaluation.fixtures import selected_pairs

pytest_plugins = ["tests.evaluation.fixtures"]


def pairs_on_disk(root: Path) -> pl.DataFrame:
    """`selected_pairs` written to root/selected.parquet (its images under root/img, real ones under root/coco)."""
    selected, _, _ = selected_pairs(root)
    write_frame(selected, root / "selected.parquet")
    return selected


def evaluation_paths(base, root: Path):
    """`base.paths` reading `pairs_on_disk(root)` and writing under root (no object-removal pairs)."""
    return base.paths.model_copy(update={
        "selected": root / "selected.parquet", "selected_images": root / "img", "source_images": root / "coco",
        "evaluation": root / "evaluation.parquet", "evaluation_reports": root / "reports",
        "removal_pairs": root / "no_removal_pairs.parquet"})

def test_models_are_evaluated_once_each_and_only_when_their_inputs_change(tmp_path, eval_specs, result_store,
                                                                             monkeypatch):
    base, selected = project_params(), pairs_on_disk(tmp_path)
    paths = evaluation_paths(base, tmp_path)
    evaluated = []
    original = stage.evaluate
    monkeypatch.setattr(stage, "evaluate", lambda name, *args: evaluated.append(name) or original(name, *args))

    def run(models: dict, **settings) -> dict:
        evaluated.clear()
        section = EvaluateParams(models=models, batch_size=4, **settings)
        return evaluate_flow(base.model_copy(update={"paths": paths, "evaluate": section}))

    two = {"hf_clip": eval_specs["hf_clip"], "vilt": eval_specs["vilt"]}
    first = run(two)
    assert sorted(evaluated) == ["hf_clip", "vilt"]
    assert first["real_images"] == 2 and set(first["models"]["vilt"]) >= {"all", "real", "relative", "itm"}
    deltas = pl.read_parquet(tmp_path / "evaluation.parquet")
    assert dict(deltas.schema) == EVALUATION and deltas.height == 2 * selected.height
    assert json.loads((tmp_path / "reports/metrics.json").read_text())["pairs"] == selected.height
    assert (tmp_path / "reports/itm_deltas.png").read_bytes().startswith(b"\x89PNG")
    assert run(two) == first and evaluated == []
    run({**two, "clip": eval_specs["clip"]})
    assert evaluated == ["clip"]
    run(two, ks=(1, 2))
    assert sorted(evaluated) == ["hf_clip", "vilt"]
    run(two, ks=(1, 2), rerank_k=5)
    assert sorted(evaluated) == ["hf_clip", "vilt"]  # an evaluate setting: every key
    run({"clip": eval_specs["clip"], **two}, ks=(1, 2), rerank_k=5)
    assert sorted(evaluated) == ["clip", "vilt"]  # clip is new; vilt now re-ranks clip's top 5, not hf_clip's


def test_a_cross_encoders_keys_follow_the_bi_encoder_it_reranks(tmp_path, eval_specs):
    selected, _, _ = selected_pairs(tmp_path)
    queries = pl.DataFrame({"image_1": ["a.png"], "removed": [["dog"]], "remaining": [["cat"]]})
    gallery = pl.DataFrame({"caption": ["a cat"], "classes": [["cat"]]})
    base = project_params()

    def keys(models: dict, **settings) -> dict[str, tuple[str, str]]:
        params = base.model_copy(update={"evaluate": EvaluateParams(models=models, **settings)})
        pairs = model_content(pairs_content(selected, [None] * 3, None), False)
        removal = digest(queries.write_ndjson(), gallery.write_ndjson())
        return {name: (model_unit(f"evaluate-{name}", "evaluate", spec, params).key(pairs),
                       model_unit(f"odmap-{name}", "od_map", spec, params).key(removal))
                for name, spec in models.items()}

    hf_clip, vilt, clip = eval_specs["hf_clip"], eval_specs["vilt"], eval_specs["clip"]
    first = keys({"hf_clip": hf_clip, "clip": clip, "vilt": vilt})
    assert keys({"clip": clip, "hf_clip": hf_clip, "vilt": vilt}) != first  # the first bi-encoder listed re-ranks
    assert keys({"hf_clip": hf_clip, "clip": clip, "vilt": vilt}, rerank_with="hf_clip") != first  # a setting
    other_hf_clip = hf_clip.model_copy(update={"dtype": "bfloat16"})  # runs otherwise than `auto` on a CPU
    moved = keys({"hf_clip": other_hf_clip, "clip": clip, "vilt": vilt})
    assert moved["clip"] == first["clip"] and moved["vilt"] != first["vilt"]
    exact = keys({"hf_clip": hf_clip, "vilt": vilt}, rerank_k=None)
    assert exact["vilt"] == keys({"hf_clip": other_hf_clip, "vilt": vilt}, rerank_k=None)["vilt"]  # no re-ranking


def test_odmap_settings_key_the_odmap_units_alone(eval_specs):
    base, spec = project_params(), eval_specs["clip"]

    def keys(**settings) -> tuple[str, str]:
        params = base.model_copy(update={"evaluate": EvaluateParams(models={"clip": spec}, **settings)})
        return (model_unit("evaluate-clip", "evaluate", spec, params).key("pairs"),
                model_unit("odmap-clip", "od_map", spec, params).key("removal"))

    evaluate_key, odmap_key = keys()
    assert keys(odmap_normalisation="relevant") == (evaluate_key, odmap_key)  # the default
    for setting in ({"odmap_normalisation": "k"}, {"odmap_variant": "all"}):
        assert keys(**setting)[0] == evaluate_key and keys(**setting)[1] != odmap_key
    assert keys(ks=(1, 2))[0] != evaluate_key and keys(ks=(1, 2))[1] != odmap_key  # read by both


def test_cfgen_runs_evaluate_on_a_runner_that_releases_its_models(tmp_path, eval_specs, result_store):
    """Evaluate declares a `LocalTaskRunner`: once its flow run ends, no model it loaded is held (on Prefect's own
    runner both would stay loaded for the rest of the run, `cfgen run`'s later stages included)."""
    from prefect.task_runners import ThreadPoolTaskRunner

    from tasks.core.loading import release_models

    pairs_on_disk(tmp_path)
    base = project_params()
    params = base.model_copy(update={"paths": evaluation_paths(base, tmp_path), "evaluate": EvaluateParams(
        models={"hf_clip": eval_specs["hf_clip"], "vilt": eval_specs["vilt"]})})
    release_models()
    evaluate_flow.with_options(task_runner=ThreadPoolTaskRunner())(params)
    assert release_models() == 2  # Prefect's default runner: both still held
    evaluate_flow(params.model_copy(
        update={"evaluate": params.evaluate.model_copy(update={"ks": (1, 2)})}))  # a new key: both load again
    assert release_models() == 0
