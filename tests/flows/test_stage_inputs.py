"""The table stages read their input tables through the stage I/O (`io.read_frame`): an input, required or optional,
that is not what its stage wrote is one `SchemaError` line, naming the command that makes it, raised through the real
flow (and `cfgen`) before the stage writes anything."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import polars as pl
import pytest

from tasks.core import schemas
from tasks.core.io import SchemaError
from tasks.core.writing import write_frame
from tests.conftest import project_params
from tests.evaluation.fixtures import selected_pairs

FLOWS = {"evaluate": "flows.evaluation:evaluate_flow", "mixtures": "flows.release.mixtures:mixtures_flow",
         "report": "flows.release.report:report_flow", "datasheet": "flows.release.datasheet:datasheet_flow",
         "export": "flows.release.export:export_flow", "validation-tasks": "flows.validation:validation_tasks_flow",
         "validation": "flows.validation:validation_flow", "plan": "flows.plan:pass_rates"}  # imported when run
CAPTION_TABLES = {"captions": schemas.CAPTIONS, "sites": schemas.SITES, "candidates": schemas.CANDIDATES,
                  "similarity": schemas.SIMILARITY, "counterfactual_captions": schemas.COUNTERFACTUALS}
CASES = {  # name: (the stage (`FLOWS`), the paths entry it finds wrong, the other tables it reads first (empty),
    # (the column it lacks or None: no parquet, the command that makes it))
    "evaluate: selected lacks image_o": ("evaluate", "selected", {}, ("image_o", "selection")),
    "evaluate: optional validated is no parquet": ("evaluate", "validated", {}, (None, "validation")),
    "evaluate: optional removal_pairs lacks split": ("evaluate", "removal_pairs", {}, ("split", "removal-selection")),
    "evaluate: removal_gallery lacks classes": ("evaluate", "removal_gallery", {"removal_pairs": schemas.REMOVAL_PAIRS},
                                                ("classes", "removal-captions")),
    "mixtures: selected lacks image_c": ("mixtures", "selected", {}, ("image_c", "selection")),
    "report: captions lack caption": ("report", "captions", {}, ("caption", "ingest")),
    "report: samples lack unet_evals": ("report", "samples", CAPTION_TABLES, ("unet_evals", "generate")),
    "datasheet: counterfactuals lack perplexity": ("datasheet", "counterfactual_captions", {},
                                                   ("perplexity", "perplexity")),
    "export: optional judged lacks judge_pass": ("export", "judged", {}, ("judge_pass", "judge")),
    "export: optional validated lacks caption_id": ("export", "validated", {}, ("caption_id", "validation")),
    "validation-tasks: selected is no parquet": ("validation-tasks", "selected", {}, (None, "selection")),
    "validation: selected lacks caption_id": ("validation", "selected", {}, ("caption_id", "selection")),
    "plan: samples lack unet_evals": ("plan", "samples", {}, ("unet_evals", "generate")),
}
SCHEMAS = {"selected": schemas.SELECTED, "removal_pairs": schemas.REMOVAL_PAIRS, "samples": schemas.SAMPLES,
           "removal_gallery": schemas.REMOVAL_GALLERY, "judged": schemas.JUDGED, "validated": schemas.VALIDATED,
           **CAPTION_TABLES}


def project(root: Path):
    """Params reading and writing under `root`: the three selected pairs of `selected_pairs` with their images, an
    exported shard and run metrics (what the datasheet reads first); every other table absent."""
    selected, images, real = selected_pairs(root)
    write_frame(selected, root / "selected.parquet")
    write_frame(pl.DataFrame({"id": ["0_0"]}), root / "export/data/train-0.parquet")
    (root / "metrics.json").write_text("{}")
    tables = {key: root / f"{key}.parquet" for key in SCHEMAS if key != "selected"}
    paths = {**tables, "selected": root / "selected.parquet", "selected_images": images, "source_images": real,
             "run_metrics": root / "metrics.json", "export": root / "export",
             **{key: root / "out" / key for key in ("metrics", "evaluation", "evaluation_reports", "labelstudio_tasks",
                                                    "labelstudio_export", "inpainted_images", "plots", "figures")}}
    return project_params(*(f"paths.{key}={value}" for key, value in paths.items()))


def break_input(path: Path, key: str, lacks: tuple[str | None, str]) -> None:
    """`path` as its stage's table without column `lacks[0]` (with a stray column: never a table of no column), or,
    when it names none, a CSV file."""
    if lacks[0] is None:
        path.write_text("caption_id\n0_0\n")
        return
    frame = pl.read_parquet(path) if key == "selected" else pl.DataFrame(schema=SCHEMAS[key])
    frame.drop(lacks[0]).with_columns(stray=pl.lit("x")).write_parquet(path)


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrong_input_is_one_line_naming_the_stage_that_makes_it(tmp_path, case, prefect_server):
    stage, key, first, lacks = CASES[case]
    params = project(tmp_path)
    for table, schema in first.items():
        write_frame(pl.DataFrame(schema=schema), getattr(params.paths, table))
    path = getattr(params.paths, key)
    break_input(path, key, lacks)
    with pytest.raises(SchemaError) as raised:
        pkgutil.resolve_name(FLOWS[stage])(params, *([None] if stage == "plan" else []))  # plan: no --pass-rate
    says = str(raised.value)
    expected = f"input {path} lacks columns ['{lacks[0]}']" if lacks[0] else f"input {path} is not a parquet file ("
    assert "\n" not in says and says.startswith(expected), says
    assert says.endswith(f"expected the output of `cfgen {lacks[1]}`"), says
    assert not (tmp_path / "out").exists() and sorted(p.name for p in (tmp_path / "export").iterdir()) == ["data"]


def test_cfgen_says_it_in_one_line(tmp_path):
    """`cfgen mixtures` as a user runs it: exit 2, no traceback of ours (the temporary Prefect server may log its own:
    a busy SQLite), its last line the error, nothing written."""
    from tests.flows.test_cli import cfgen

    project(tmp_path)
    break_input(tmp_path / "selected.parquet", "selected", ("image_c", "selection"))
    code, out, err, _ = cfgen(tmp_path, "mixtures", "-p", f"paths.selected={tmp_path / 'selected.parquet'}", "-p",
                              f"paths.export={tmp_path / 'out/export'}", "-p", f"paths.metrics={tmp_path / 'out'}")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    ours = re.findall(r'File "[^"]*/(?:tasks|flows)/', out + err)
    assert code == 2 and not ours and errors == [err.strip().splitlines()[-1]], err
    assert errors[0] == (f"error: input {tmp_path / 'selected.parquet'} lacks columns ['image_c']: expected the "
                         "output of `cfgen selection`")
    assert not (tmp_path / "out").exists()
