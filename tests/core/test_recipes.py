"""The README's recipes for a new caption stage and a new table stage, each followed in a copy of the project: exactly
the files it names change, the manifest's checks hold the new stage to `dvc.yaml`, the DAG and the CLI place it, and
its command runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl

from tasks.core import schemas
from tests.conftest import NLTK_DATA, ROOT, SHARED

LOGIC = '''
"""Colours: a counterfactual caption naming a colour word is rejected, with the word as its reason."""

import polars as pl

from tasks.core.params import Section


class ColoursParams(Section):
    """The colour words a counterfactual must not name."""

    words: tuple[str, ...] = ("red", "green", "blue")


def load_models(params: ColoursParams) -> None:
    return None


def run(frame: pl.DataFrame, params: ColoursParams, models: None
        ) -> tuple[pl.DataFrame, pl.DataFrame]:
    words = pl.col("candidate").str.to_lowercase().str.extract(rf"\\b({'|'.join(params.words)})\\b")
    found = frame.with_columns(_word=words)
    rejects = found.filter(pl.col("_word").is_not_null()).with_columns(
        stage=pl.lit("colours"), reason=pl.lit("colour: ") + pl.col("_word")).drop("_word")
    return found.filter(pl.col("_word").is_null()).drop("_word"), rejects
'''
DECLARATION = """    Stage("colours", data="colours", output=schemas.CANDIDATES,
          rejects=schemas.rejects(schemas.CANDIDATES), module="tasks.text.colours", input=schemas.CANDIDATES,
          after="relations"),
    Stage("similarity","""
DVC_STAGE = """
  colours:
    cmd: cfgen colours ${paths.relations} ${paths.colours} --metrics ${paths.metrics}/colours.json
    deps: ["${paths.params_checked}", "${paths.relations}", tasks/text/colours.py]
    params:
      - engine
      - colours
    outs:
      - ${paths.colours}
      - data/interim/colours.rejects.parquet
    metrics:
      - ${paths.metrics}/colours.json:
          cache: false

  similarity:"""
CAPTION_STAGE = {  # file -> [(text there, its replacement)]; (None, text): a new file
    "tasks/text/colours.py": [(None, LOGIC)],
    "tasks/stages/__init__.py": [  # its declaration, the next stage's `after`, its section's line
        ('    Stage("similarity",', DECLARATION),
        ('module="tasks.text.similarity", input=schemas.CANDIDATES, after="relations"',
         'module="tasks.text.similarity", input=schemas.CANDIDATES, after="colours"'),
        ("    similarity: tasks.text.params.SimilarityParams",
         "    colours: tasks.text.colours.ColoursParams\n    similarity: tasks.text.params.SimilarityParams"),
        ("    import tasks.text.params\n", "    import tasks.text.colours\n    import tasks.text.params\n")],
    "params.yaml": [("\nsimilarity:\n", "\ncolours:\n  words: [red, green, blue]\n\nsimilarity:\n"),
                    ("  similarity: data/interim/similarity.parquet",
                     "  colours: data/interim/colours.parquet\n  similarity: data/interim/similarity.parquet")],
    "dvc.yaml": [("\n  similarity:", DVC_STAGE)],
}


def follow(recipe: dict[str, list[tuple[str | None, str]]], project: Path) -> list[str]:
    """`recipe` applied to a copy of the project at `project`; the files that differ from the project's."""
    for name in ("tasks", "flows", "tests", "tools"):
        shutil.copytree(ROOT / name, project / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("params.yaml", "dvc.yaml", "pyproject.toml"):
        shutil.copy(ROOT / name, project)
    for name, edits in recipe.items():
        path = project / name
        for old, new in edits:
            if old is None:
                path.write_text(textwrap.dedent(new).lstrip())
                continue
            assert path.read_text().count(old) == 1, (name, old)
            path.write_text(path.read_text().replace(old, new))
    return sorted(name for name in recipe if not (ROOT / name).exists()
                  or (ROOT / name).read_text() != (project / name).read_text())


def environment(tmp_path: Path, project: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(project), "NLTK_DATA": str(NLTK_DATA), "CFGEN_SHARED": str(SHARED),
           "PREFECT_HOME": str(tmp_path / "prefect-home"), "HF_HUB_OFFLINE": "1"}
    env.pop("PREFECT_API_URL", None)
    return env


def manifest_checks(project: Path, env: dict[str, str]) -> str:
    """The last line of the copy's own `dvc.yaml`-against-manifest tests."""
    checks = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/core/test_stages.py", "-k",
         "checked_against_the_manifest or runs_what_its_declaration_says or a_cli_command or names_each "
         "or has_hooks"],
        cwd=project, env=env, capture_output=True, text=True, timeout=600)
    return checks.stdout.splitlines()[-1] if checks.stdout else checks.stderr[-3000:]


def follow_caption_stage(project: Path) -> list[str]:
    changed = follow(CAPTION_STAGE, project)
    dvc = project / "dvc.yaml"  # the next stage reads the new one's output; report its metrics, gallery its rejects
    text = dvc.read_text().split("\n  similarity:", 1)
    text = text[0] + "\n  similarity:" + text[1].replace("${paths.relations}", "${paths.colours}", 2)
    for made in ('"${paths.metrics}/relations.json", ', '"data/interim/relations.rejects.parquet", '):
        text = text.replace(made, made + made.replace("relations", "colours"))
    dvc.write_text(text)
    return changed


def test_a_new_caption_stage_is_the_four_files_the_readme_names(tmp_path):
    project = tmp_path / "project"
    assert follow_caption_stage(project) == sorted(CAPTION_STAGE) and len(CAPTION_STAGE) == 4
    env = environment(tmp_path, project)
    assert manifest_checks(project, env).startswith("5 passed, ")
    probe = "from tasks.stages import caption_steps\nprint(caption_steps())"
    placed = subprocess.run([sys.executable, "-c", probe], cwd=project, env=env, capture_output=True, text=True)
    assert placed.stdout.split("\n")[0] == ("('sites', 'saliency', 'candidates', 'relations', 'colours', 'similarity',"
                                            " 'perplexity')"), placed.stderr[-2000:]
    rows = [("1", "9", "A dog on a couch.", "noun", "NN", 1, 2, 5, "dog", "cat", -1.0, "A cat on a couch."),
            ("2", "9", "A dog on a couch.", "noun", "NN", 4, 11, 16, "couch", "red", -2.0, "A dog on a Red.")]
    source = tmp_path / "relations.parquet"
    pl.DataFrame(rows, schema=schemas.CANDIDATES, orient="row").write_parquet(source)
    done = subprocess.run([sys.executable, "-m", "flows.cli", "colours", str(source), str(tmp_path / "colours.parquet"),
                           "-p", "colours.words=[red, gold]"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert pl.read_parquet(tmp_path / "colours.parquet")["caption_id"].to_list() == ["1"]
    rejected = pl.read_parquet(tmp_path / "colours.rejects.parquet")
    assert rejected.select("caption_id", "stage", "reason").rows() == [("2", "colours", "colour: red")]
    misspelt = subprocess.run([sys.executable, "-m", "flows.cli", "colours", str(source), str(tmp_path / "x.parquet"),
                               "-p", "paths.colour=data/x.parquet"], cwd=project, env=env, capture_output=True,
                              text=True, timeout=300)  # its output path is a field the manifest adds to `paths`
    assert misspelt.returncode == 2 and "unknown key 'paths.colour' (did you mean 'paths.colours'?)" in " ".join(
        (misspelt.stdout + misspelt.stderr).split()), misspelt.stderr[-2000:]


TABLE_FLOW = '''
"""`cfgen lengths`: how many words C_o and C_c have, over every counterfactual caption (paths.metrics/lengths.json)."""

from __future__ import annotations

from tasks.core import schemas
from tasks.core.io import read_frame
from tasks.core.writing import write_json
from tasks.stages import Params


def lengths(params: Params) -> dict[str, int]:
    frame = read_frame(params.paths.counterfactual_captions, schemas.COUNTERFACTUALS, "perplexity")
    counts = {f"words_{side}": int(frame[column].str.split(" ").list.len().sum())
              for side, column in (("o", "caption"), ("c", "counterfactual"))}
    write_json({"pairs": frame.height, **counts}, params.paths.metrics / "lengths.json")
    return counts
'''
TABLE_DECLARATION = """    TableStage("lengths", after=("perplexity",), reads=(),
               help="How many words C_o and C_c have (paths.metrics/lengths.json)."),
    # the table stages"""
TABLE_HOOKS = '''def _lengths() -> Hooks:
    from flows import lengths

    return Hooks(lengths.lengths)


HOOKS: dict'''
TABLE_DVC_STAGE = '''
  lengths:
    cmd: cfgen lengths
    deps: ["${paths.params_checked}", "${paths.counterfactual_captions}", flows/lengths.py]
    metrics:
      - ${paths.metrics}/lengths.json:
          cache: false

  generate:'''
TABLE_STAGE = {
    "flows/lengths.py": [(None, TABLE_FLOW)],
    "tasks/stages/__init__.py": [("    # the table stages", TABLE_DECLARATION)],
    "flows/hooks.py": [("HOOKS: dict", TABLE_HOOKS), ('"removal_export": _removal_export}',
                                                       '"removal_export": _removal_export, "lengths": _lengths}')],
    "dvc.yaml": [("\n  generate:", TABLE_DVC_STAGE)],
}


def test_a_new_table_stage_is_its_flow_its_declaration_its_hooks_and_its_dvc_stage(tmp_path):
    project = tmp_path / "project"
    assert follow(TABLE_STAGE, project) == sorted(TABLE_STAGE) and len(TABLE_STAGE) == 4
    env = environment(tmp_path, project)
    assert manifest_checks(project, env).startswith("5 passed, ")
    rows = [("1", "9", "A dog on a couch.", "A cat on a couch.", "noun", 1, 2, 5, "dog", "cat", -1.0, 0.8, 12.0)]
    source = tmp_path / "counterfactual_captions.parquet"
    pl.DataFrame(rows, schema=schemas.COUNTERFACTUALS, orient="row").write_parquet(source)
    done = subprocess.run([sys.executable, "-m", "flows.cli", "lengths", "-p",
                           f"paths.counterfactual_captions={source}", "-p", f"paths.metrics={tmp_path / 'metrics'}"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "metrics/lengths.json").read_text()) == {"pairs": 1, "words_o": 5, "words_c": 5}
    listed = subprocess.run([sys.executable, "-m", "flows.cli", "--help"], cwd=project, env={**env, "COLUMNS": "200"},
                            capture_output=True, text=True, timeout=120).stdout
    assert "lengths " in listed and "How many words C_o and C_c have" in listed
