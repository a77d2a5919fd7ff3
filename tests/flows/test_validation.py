"""The validation flows end to end on files: tasks out, a Label Studio-shaped export of some of them back in, the
validated subset and the results written; no export yet is zero coverage, not an error."""

from __future__ import annotations

import json

import polars as pl

from flows.validation import validation_flow, validation_tasks_flow
from tasks.core.writing import write_frame
from tests.conftest import project_params
from tests.evaluation.fixtures import selected_pairs


def test_tasks_out_export_in(tmp_path, prefect_server):
    selected, images, _ = selected_pairs(tmp_path)
    write_frame(selected, tmp_path / "selected.parquet")
    base = project_params()
    paths = base.paths.model_copy(update={
        "selected": tmp_path / "selected.parquet", "selected_images": images, "metrics": tmp_path / "metrics",
        "labelstudio_tasks": tmp_path / "ls/tasks.json", "labelstudio_export": tmp_path / "ls/export.json",
        "validated": tmp_path / "validated.parquet"})
    params = base.model_copy(update={"paths": paths})
    assert validation_tasks_flow(params) == 2 * selected.height
    tasks = json.loads(paths.labelstudio_tasks.read_text())
    assert paths.labelstudio_tasks.with_suffix(".xml").read_text().startswith("<View>")
    assert validation_flow(params)["coverage"] == {"images": 6, "rated": 0, "share": 0.0}  # nothing exported yet

    def annotated(task: dict, correct: bool) -> dict:
        own = task["data"]["own"]
        label = f"caption {own if correct else ('B' if own == 'A' else 'A')}"
        return {**task, "annotations": [{"completed_by": 7, "result": [
            {"from_name": "match", "to_name": "image", "type": "choices", "value": {"choices": [label]}}]}]}

    # pair 0: both images matched to their own caption; pair 1: I_c matched to C_o; pair 2: not annotated
    by_key = {(t["data"]["caption_id"], t["data"]["side"]): t for t in tasks}
    export = [annotated(by_key["0_0", "o"], True), annotated(by_key["0_0", "c"], True),
              annotated(by_key["1_0", "o"], True), annotated(by_key["1_0", "c"], False), by_key["2_0", "o"]]
    paths.labelstudio_export.write_text(json.dumps(export))
    result = validation_flow(params)
    assert result["coverage"] == {"images": 6, "rated": 4, "share": 4 / 6} and result["validated_pairs"] == 1
    assert pl.read_parquet(paths.validated)["caption_id"].to_list() == ["0_0"]
    assert json.loads((paths.metrics / "validation.json").read_text())["validated_pairs"] == 1
    rows = {(r["images"], r["label"]): r["count"] for r in result["table1"]}
    assert (rows["I_o", "correct"], rows["I_c", "correct"], rows["I_c", "incorrect"]) == (2, 1, 1)
