"""The README's recipe for a new caption stage, followed in a copy of the project: exactly the files it names change,
the manifest's checks hold the new stage to `dvc.yaml`, the DAG and the CLI place it, and its command runs."""

from __future__ import annotations

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

from tasks.core import schemas

SCHEMA, REJECTS_SCHEMA = schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES)


def load_models(params):
    return None


def run(frame, params, models):
    words = pl.col("candidate").str.to_lowercase().str.extract(rf"\\b({'|'.join(params.words)})\\b")
    found = frame.with_columns(_word=words)
    rejects = found.filter(pl.col("_word").is_not_null()).with_columns(
        stage=pl.lit("colours"), reason=pl.lit("colour: ") + pl.col("_word")).drop("_word")
    return found.filter(pl.col("_word").is_null()).drop("_word"), rejects
'''
DECLARATION = '''
"""Declaration of `colours`: candidates -> those naming no colour (its logic: `tasks.text.colours`)."""

from tasks.core import schemas
from tasks.stages import Stage

STAGE = Stage("colours", "colours", schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES), "tasks.text.colours",
              schemas.CANDIDATES, "relations")
'''
SECTION = '''

class ColoursParams(Section):
    """The colour words a counterfactual must not name (`tasks.text.colours`)."""

    words: tuple[str, ...] = ("red", "green", "blue")
'''
DVC_STAGE = '''
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

  similarity:'''
RECIPE = {  # file -> (text there, its replacement); None: a new file
    "tasks/text/colours.py": (None, LOGIC),
    "tasks/stages/colours.py": (None, DECLARATION),
    "tasks/stages/similarity.py": ('schemas.CANDIDATES, "relations")', 'schemas.CANDIDATES, "colours")'),
    "tasks/text/params.py": ("\n\nclass SimilarityParams(", SECTION + "\n\nclass SimilarityParams("),
    "params.yaml": ("\nsimilarity:\n", "\ncolours:\n  words: [red, green, blue]\n\nsimilarity:\n"),
    "tasks/core/params.py": ("    relations: Path\n", "    relations: Path\n    colours: Path\n"),
    "tasks/stages/__init__.py": ('"relations", "similarity"', '"relations", "colours", "similarity"'),
    "dvc.yaml": ("\n  similarity:", DVC_STAGE),
}


def follow_recipe(project: Path) -> None:
    for name in ("tasks", "flows", "tests", "tools"):
        shutil.copytree(ROOT / name, project / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("params.yaml", "dvc.yaml", "pyproject.toml"):
        shutil.copy(ROOT / name, project)
    for name, (old, new) in RECIPE.items():
        path = project / name
        if old is None:
            path.write_text(textwrap.dedent(new).lstrip())
            continue
        assert path.read_text().count(old) == 1, name
        path.write_text(path.read_text().replace(old, new))
    params = project / "params.yaml"  # the paths entry and the manifest's section line, beside their neighbours
    params.write_text(params.read_text().replace("  similarity: data/interim/similarity.parquet",
                                                 "  colours: data/interim/colours.parquet\n"
                                                 "  similarity: data/interim/similarity.parquet"))
    manifest = project / "tasks/stages/__init__.py"
    manifest.write_text(manifest.read_text().replace("    similarity: tasks.text.params.SimilarityParams",
                                                     "    colours: tasks.text.params.ColoursParams\n"
                                                     "    similarity: tasks.text.params.SimilarityParams"))
    dvc = project / "dvc.yaml"  # the next stage reads the new one's output
    text = dvc.read_text().split("\n  similarity:", 1)
    dvc.write_text(text[0] + "\n  similarity:" + text[1].replace("${paths.relations}", "${paths.colours}", 2))


def test_a_new_caption_stage_is_the_eight_files_the_readme_names(tmp_path):
    project = tmp_path / "project"
    follow_recipe(project)
    changed = sorted(name for name in RECIPE if not (ROOT / name).exists()
                     or (ROOT / name).read_text() != (project / name).read_text())
    assert changed == sorted(RECIPE) and len(changed) == 8
    env = {**os.environ, "PYTHONPATH": str(project), "NLTK_DATA": str(NLTK_DATA), "CFGEN_SHARED": str(SHARED),
           "PREFECT_HOME": str(tmp_path / "prefect-home"), "HF_HUB_OFFLINE": "1"}
    env.pop("PREFECT_API_URL", None)
    checks = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/core/test_stages.py", "-k",
         "checked_against_the_manifest or runs_what_its_declaration_says or a_cli_command or names_each"],
        cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert checks.stdout.splitlines()[-1].startswith("4 passed, "), checks.stdout[-3000:]
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
