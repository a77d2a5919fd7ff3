"""`cfgen` as a user runs it (a subprocess): a mistake is ONE `error:` line on stderr, exit code 2, no traceback,
reported before any Prefect server starts and before anything is written."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import DEMO_CAPTIONS, ROOT, SHARED


def files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder` with its size and modification time, but DVC's own scratch state (`.dvc/tmp`, which
    opening a project writes): what a command wrote shows as a difference."""
    return {str(path.relative_to(folder)): (stat.st_size, stat.st_mtime_ns)
            for path in folder.rglob("*") if not path.is_dir() and path.relative_to(folder).parts[:2] != (".dvc", "tmp")
            for stat in [path.lstat()]}


def cfgen(tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None, wrapper: tuple[str, ...] = ()
          ) -> tuple[int, str, str, list[str]]:
    """Run the real CLI in `tmp_path` (holding a copy of params.yaml, PREFECT_HOME under it), under `wrapper` (e.g.
    strace and its options) when given; (exit code, stdout, stderr, the files under `tmp_path` it made, changed or
    removed: a temporary Prefect server's database among them)."""
    if not (tmp_path / "params.yaml").exists():
        shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    # No COLUMNS: like a DVC stage or CI log, stderr is not a terminal (the error must not be wrapped at 80).
    env = {k: v for k, v in os.environ.items() if k not in {"PREFECT_API_URL", "COLUMNS"}}
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"), HF_HUB_OFFLINE="1")
    if (SHARED / "nltk_data").is_dir():
        env.setdefault("NLTK_DATA", str(SHARED / "nltk_data"))
    env.update(env_extra or {})
    before = files(tmp_path)
    done = subprocess.run([*wrapper, sys.executable, "-m", "flows.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    after = files(tmp_path)
    touched = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    print(f"cfgen {' '.join(args)}: exit {done.returncode}, touched {touched}\nstderr: {done.stderr}")
    return done.returncode, done.stdout, done.stderr, touched


def assert_one_error(result: tuple[int, str, str, list[str]], *needles: str) -> str:
    """Exit code 2, no traceback, exactly one non-empty stderr line: `error: ...` holding every needle, and nothing
    written: no output, no Prefect server started (its database would be under PREFECT_HOME)."""
    code, out, err, touched = result
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:"), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert code == 2
    assert not touched, f"wrote {touched} before refusing: the checks must run before any server or work"
    return lines[0]


def cfgen_in_process(*args: str) -> tuple[int, list[str]]:
    """`cfgen *args` in this process (so a monkeypatch reaches the writer; the caller's folder); (exit code, stderr
    lines)."""
    from typer.testing import CliRunner

    from flows.cli import app

    previous = signal.getsignal(signal.SIGTERM)  # the CLI installs its own SIGTERM handler
    try:
        result = CliRunner().invoke(app, list(args))
    finally:
        signal.signal(signal.SIGTERM, previous)
    return result.exit_code, [line for line in result.stderr.splitlines() if line.strip()]


def one_row_parquet(path: Path, schema: dict[str, pl.DataType], **values) -> Path:
    """One row holding `values` (a default for every other column, within `schemas.checks`) with exactly `schema`'s
    columns."""
    defaults = {pl.String: "x", pl.Int64: 0, pl.Float64: 0.0, pl.Boolean: False}
    values = {"edit_type": "noun", **values}
    row = {c: [values.get(c, defaults[t])] for c, t in schema.items()}
    pl.DataFrame(row, schema=schema).write_parquet(path)
    return path


@pytest.mark.parametrize("name", ["missing.parquet", "missing[demo].parquet", "x[/y].parquet"])
def test_missing_input_names_it_and_the_command_that_makes_it(tmp_path, name):
    """Named verbatim: a path is not rich markup (`[demo]` must not vanish, `[/y]` must not crash)."""
    assert_one_error(cfgen(tmp_path, "sites", name, "out.parquet"), f"input {name} does not exist", "cfgen ingest")
    assert not (tmp_path / "out.parquet").exists()


def test_input_without_the_stage_columns(tmp_path):
    pl.DataFrame({"x": [1]}).write_parquet(tmp_path / "odd.parquet")
    line = assert_one_error(cfgen(tmp_path, "sites", "odd.parquet", "out.parquet"), "odd.parquet", "lacks columns")
    assert all(c in line for c in ("caption_id", "image_id", "caption"))
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("args, needles, one_of", [
    pytest.param([], ["unknown key 'similarty'", "did you mean 'similarity'"], [""], id="misspelt-section-in-file"),
    pytest.param(["-p", "simlarity.upper=0.9"], ["unknown key 'simlarity'", "did you mean 'similarity'"], [""],
                 id="misspelt-override"),
    pytest.param(["-p", "similarity.lower=0.95"], [], ["similarity.upper", "similarity.lower"], id="lower-above-upper"),
])
def test_bad_params_fail_before_any_step(tmp_path, args, needles, one_of):
    if not args:
        text = (ROOT / "params.yaml").read_text()
        assert "\nsimilarity:" in text
        (tmp_path / "params.yaml").write_text(text.replace("\nsimilarity:", "\nsimilarty:"))
    line = assert_one_error(cfgen(tmp_path, "captions", str(DEMO_CAPTIONS), "out.parquet", *args), *needles)
    assert any(key in line for key in one_of), line
    assert not (tmp_path / "out.parquet").exists()
    assert not (tmp_path / "out_steps").exists()


def test_missing_model_folder_is_named(tmp_path):
    from tasks.core.schemas import SITES

    one_row_parquet(tmp_path / "sites.parquet", SITES, caption="a dog on a mat", edit_type="noun", original_word="dog",
                    start=2, end=5, position=1, tag="NN", n_tokens=1)
    result = cfgen(tmp_path, "candidates", "sites.parquet", "out.parquet",
                   "-p", "candidates.model.id=models/nowhere/mlm")
    assert_one_error(result, "models/nowhere/mlm", "does not exist")
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_whole_run_checks_its_models_first(tmp_path, command):
    """`cfgen run` and `cfgen serve` take the stage commands' pre-flight: the paper profile's hub models, absent here,
    are one line naming what fetches them, before any server or flow starts."""
    result = cfgen(tmp_path, command, "--profile", "paper", "--source", str(DEMO_CAPTIONS),
                   env_extra={"HF_HOME": str(tmp_path / "hf")})
    assert_one_error(result, "these models are not on this machine", "stable-diffusion-v1-5", "hf download")


@pytest.mark.parametrize("command", [("captions", str(DEMO_CAPTIONS), "out.parquet"),
                                     ("generate", "pairs.parquet", "out.parquet"),
                                     ("judge", "-p", "judge.enabled=true")],
                         ids=lambda c: c[0])
def test_the_paper_profile_offline_names_each_missing_model_before_loading_any(tmp_path, command):
    """No weights in the hub cache: one line naming every model the command runs and the line that fetches it."""
    from tasks.core.schemas import PAIR

    one_row_parquet(tmp_path / "pairs.parquet", PAIR)
    (tmp_path / "hf-cache").mkdir()
    result = cfgen(tmp_path, *command, "-p", "profile=paper", env_extra={"HF_HUB_CACHE": str(tmp_path / "hf-cache")})
    needles = {"captions": ("not on this machine", "hf download FacebookAI/roberta-base --revision",
                            "hf download openai-community/gpt2-large"),
               "generate": ("not on this machine", "hf download stable-diffusion-v1-5/stable-diffusion-v1-5",
                            "hf download stabilityai/sd-vae"),
               "judge": ("Qwen/Qwen2.5-VL-7B-Instruct has no pinned revision",)}[command[0]]  # pin, then download
    assert_one_error(result, *needles)


@pytest.mark.parametrize("hub", [{"HF_HUB_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}],
                         ids=["offline", "unreachable"])
def test_publish_without_the_hub_is_one_line(tmp_path, hub):
    result = cfgen(tmp_path, "publish", "-p", "export.repo_id=someone/pairs",
                   env_extra={"HF_TOKEN": "hf_not_a_real_token", **hub})
    line = assert_one_error(result, "could not push", "someone/pairs")
    assert "hf_not_a_real_token" not in line + result[1]


@pytest.mark.parametrize("source, output", [("a.tsv", "a.tsv"), ("./a.tsv", "a.tsv"), ("a.tsv", "./a.tsv")])
def test_ingest_refuses_to_overwrite_its_input(tmp_path, source, output):
    shutil.copy(DEMO_CAPTIONS, tmp_path / "a.tsv")
    before = (tmp_path / "a.tsv").read_bytes()
    assert_one_error(cfgen(tmp_path, "ingest", source, output), "a.tsv", "refusing to overwrite")
    assert (tmp_path / "a.tsv").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tsv", "params.yaml"]  # not even Prefect's home


@pytest.mark.parametrize("args", [("captions", "a.tsv", "params.yaml"), ("sites", "in.parquet", "./params.yaml"),
                                  ("selection", "in.parquet", "out.parquet", "--metrics", "params.yaml"),
                                  ("plan", "a.tsv", "--output", "params.yaml")], ids=lambda args: args[0])
def test_a_command_refuses_to_write_over_the_params_file_it_reads(tmp_path, args):
    """The params file is an input too: a step's output, its metrics, a plan written over it were taken."""
    from tasks.core.schemas import CAPTIONS, SAMPLES

    shutil.copy(DEMO_CAPTIONS, tmp_path / "a.tsv")
    one_row_parquet(tmp_path / "in.parquet", {**CAPTIONS, **SAMPLES})
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    assert_one_error(cfgen(tmp_path, *args), "params.yaml: is the input file params.yaml; refusing to overwrite it")
    assert (tmp_path / "params.yaml").read_bytes() == (ROOT / "params.yaml").read_bytes()


def test_run_accepts_overrides_and_rejects_unknown_keys(tmp_path):
    assert_one_error(cfgen(tmp_path, "run", "-p", "simlarity.upper=0.9"), "unknown key 'simlarity'",
                     "did you mean 'similarity'")


def test_unreachable_prefect_api_is_one_line(tmp_path):
    from tasks.text.ingest import SCHEMA

    one_row_parquet(tmp_path / "captions.parquet", SCHEMA, caption="a dog on a mat")
    result = cfgen(tmp_path, "sites", "captions.parquet", "out.parquet",
                   env_extra={"PREFECT_API_URL": "http://127.0.0.1:9/api"})
    assert_one_error(result, "Prefect API", "http://127.0.0.1:9/api", "not reachable")
    assert not (tmp_path / "out.parquet").exists()


def test_verbose_shows_the_traceback(tmp_path):
    code, out, err, _ = cfgen(tmp_path, "--verbose", "sites", "missing.parquet", "out.parquet")
    assert code != 0
    assert "Traceback" in out + err
    assert "missing.parquet" in out + err
    assert not (tmp_path / "out.parquet").exists()


def test_a_diff_of_an_unknown_revision_or_one_without_outputs_is_one_line(tmp_path):
    """An unknown or empty revision, a revision whose dvc.lock does not name the outputs, and one whose dvc.lock names
    them while this DVC cache lacks their content: four different lines."""
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    assert_one_error(cfgen(tmp_path, "diff", "nosuchrev", "HEAD"), "'nosuchrev' is neither a git revision nor a DVC "
                     "experiment")  # an empty repository: no HEAD either
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "empty"], cwd=tmp_path, check=True)
    assert_one_error(cfgen(tmp_path, "diff", "nosuchrev", "HEAD"), "'nosuchrev'")
    assert_one_error(cfgen(tmp_path, "diff", "", "HEAD"), "'': name a git revision or a DVC experiment")
    assert_one_error(cfgen(tmp_path, "diff", "HEAD", " "), "' ': name a git revision")  # git read both as HEAD
    assert_one_error(cfgen(tmp_path, "diff", "HEAD", "HEAD"), "reports/metrics.json is not in revision HEAD")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text("stages:\n  report:\n    cmd: cfgen report\n    outs:\n"
                                       "      - reports/metrics.json\n")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  report:\n    cmd: cfgen report\n    outs:\n"
                                       "    - path: reports/metrics.json\n      hash: md5\n"
                                       f"      md5: {'0123456789abcdef' * 2}\n      size: 2\n")
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "locked"], cwd=tmp_path, check=True)
    assert_one_error(cfgen(tmp_path, "diff", "HEAD", "HEAD"), "reports/metrics.json of revision HEAD is not in this "
                     "DVC cache (its dvc.lock names it)", "dvc pull")


def test_serve_refuses_a_missing_source_and_a_server_that_dies_with_it(tmp_path):
    assert_one_error(cfgen(tmp_path, "serve", "--source", "missing.tsv"), "caption file missing.tsv does not exist")
    (tmp_path / "captions.tsv").write_text("a_0\tA dog on a couch.\n")
    assert_one_error(cfgen(tmp_path, "serve", "--cron", "0 3 * * *", "--source", "captions.tsv"), "serve needs a "
                     "Prefect server that outlives it", "PREFECT_API_URL")  # a temporary one would drop the schedule


def test_every_table_command_in_a_project_without_its_inputs_is_one_line(tmp_path, prefect_server):
    """In a folder holding only params.yaml, each table stage's command (their inputs, models and COCO files all
    absent) exits 2 with one `error:` line naming what is missing, no traceback (removal-masks, removal-captions and
    datasheet were tracebacks), and a stage's name in it as its command (`cfgen removal-selection`)."""
    from prefect.settings import PREFECT_API_URL

    from tasks.stages import FIRST, TableStage, stages

    server = {"PREFECT_API_URL": str(PREFECT_API_URL.value())}  # the session's: no server started per command
    for declared in (s for s in stages().values() if isinstance(s, TableStage) and s.name != FIRST):
        code, out, err, _ = cfgen(tmp_path, declared.command, env_extra=server)
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and "Traceback" not in out + err and len(errors) == 1, (declared.command, err[-3000:])
        assert re.search(r"does not exist|holds no|run `cfgen [a-z-]+` first", errors[0]), errors[0]
        assert "_" not in "".join(re.findall(r"`cfgen [^`]+`", errors[0])), errors[0]


def test_a_first_import_of_matplotlib_adds_no_line_to_an_error(tmp_path):
    """With matplotlib's font list not yet built (a fresh clone), a command whose flow imports matplotlib and then
    stops on a missing input still prints one line: matplotlib's "generated new fontManager" is not shown."""
    fonts = tmp_path / "matplotlib"
    code, out, err, _ = cfgen(tmp_path, "judge", env_extra={"MPLCONFIGDIR": str(fonts)})
    assert any(fonts.glob("fontlist-*.json")), "the font list was already built: nothing was checked"
    assert code == 2 and err.strip().splitlines() == [
        "error: input data/processed/selected.parquet does not exist: run `cfgen selection` first"], out + err


@pytest.mark.parametrize("args, says", [
    (("ingest", "", "out.parquet"), "`cfgen ingest '' out.parquet`: SOURCE is empty; give a path"),
    (("ingest", "a.tsv", ""), "`cfgen ingest a.tsv ''`: OUTPUT is empty; give a path"),
    (("sites", "c.parquet", "out.parquet", "--metrics", ""),
     "`cfgen sites c.parquet out.parquet --metrics ''`: --metrics is empty; give a path"),
    (("toy-world", "captions", ""), "`cfgen toy-world captions ''`: OUTPUT is empty; give a path"),
    (("plan", "a.tsv", "--output", ""), "`cfgen plan a.tsv --output ''`: --output is empty; give a path"),
    (("-v", "tiny-models", "a.tsv", ""), "`cfgen -v tiny-models a.tsv ''`: OUTPUT is empty; give a path"),
    (("sites", "c.parquet", "o.parquet", "--params-file", ""),
     "`cfgen sites c.parquet o.parquet --params-file ''`: --params-file is empty; give a path"),
    (("run", "--source", ""), "paths: captions_source is empty; give a path"),  # a string: the deployment's parameter
    (("sites", "c.parquet", "o.parquet", "-p", 'paths.sites=""'), "paths: sites is empty; give a path")])
def test_an_empty_path_is_one_line_before_anything_runs(tmp_path, monkeypatch, args, says):
    """'' was read as the path `.`: "caption file . is a directory", or a traceback for an output. An empty value of
    another type keeps its own line (`--cron ''` is no cron schedule: test_bad_inputs)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.tsv").write_text("a_0\tA dog on a couch.\n")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    before = files(tmp_path)
    code, lines = cfgen_in_process(*args)
    assert code == 2 and lines == [f"error: {says}"]
    assert files(tmp_path) == before


@pytest.mark.parametrize("args, needle", [
    (("ingest", "a.tsv", "."), "cannot write .: it is a directory"),
    (("ingest", "a.tsv", "/"), "cannot write /: it is a directory"),
    (("sites", "c.parquet", "."), "cannot write .: it is a directory"),
    (("sites", "/", "out.parquet"), "input / is a directory"),
    (("sites", ".", "out.parquet"), "input . is a directory"),
    (("toy-world", "captions", "/"), "cannot write /: it is a directory"),
    (("plan", "a.tsv", "--output", "."), "cannot write .: it is a directory"),
    (("tiny-models", "a.tsv", "/"), "/ holds at least 100 file(s) cfgen does not write there"),
    (("tiny-models", "a.tsv", "."), ". holds 3 file(s) cfgen does not write there (first: 'a.tsv')"),
    (("synthetic-coco", "/"), "/ holds at least 100 file(s) cfgen does not write there"),
    (("synthetic-coco", "."), ". holds 3 file(s) cfgen does not write there (first: 'a.tsv')")])
def test_a_path_with_no_name_is_one_line_and_nothing_is_written_there(tmp_path, monkeypatch, args, needle):
    """`.` or `/` as an output or input: a ValueError traceback from a rejects or temporary name, and
    `cfgen tiny-models a.tsv /` filled the root folder with models."""
    from tasks.text import ingest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.tsv").write_text("a_0\tA dog on a couch.\n")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    one_row_parquet(tmp_path / "c.parquet", ingest.SCHEMA, caption="a dog on a couch")
    before, root = files(tmp_path), sorted(os.listdir("/"))
    code, lines = cfgen_in_process(*args)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines
    assert files(tmp_path) == before and sorted(os.listdir("/")) == root
