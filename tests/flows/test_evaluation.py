"""The evaluate flow caches per model: a rerun evaluates nothing, an added model only itself, a changed k all;
it writes the Δ parquet, metrics.json and the figure."""

from __future__ import annotations

import json

import polars as pl

from flows.evaluation import evaluate_flow
from tasks.core.io import write_frame
from tasks.core.params import EvaluateParams
from tasks.core.schemas import EVALUATION
from tasks.evaluation import evaluate as stage
from tests.conftest import project_params
from tests.evaluation.fixtures import selected_pairs

pytest_plugins = ["tests.evaluation.fixtures"]


def test_models_are_evaluated_once_each_and_only_when_their_inputs_change(tmp_path, eval_specs, result_store,
                                                                             monkeypatch):
    selected, images, real = selected_pairs(tmp_path)
    write_frame(selected, tmp_path / "selected.parquet")
    base = project_params()
    paths = base.paths.model_copy(update={"selected": tmp_path / "selected.parquet", "selected_images": images,
                                          "evaluation": tmp_path / "evaluation.parquet",
                                          "evaluation_reports": tmp_path / "reports", "source_images": real,
                                          "removal_pairs": tmp_path / "no_removal_pairs.parquet"})
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
