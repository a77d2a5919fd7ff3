"""Faults a user meets, through the real `cfgen`: an empty or header-only caption file, an output that cannot be
written (checked before any work or server), a disk that fills while writing, a bad Label Studio export, a user error
inside a flow, repeated annotations. Each is one `error:` line and exit code 2, or a visible count; no traceback."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import DEMO_CAPTIONS
from tests.flows.test_cli import assert_one_error, cfgen, cfgen_in_process, one_row_parquet
from tests.validation.test_labelstudio import annotation, export_task, selected

ROOT_USER = os.geteuid() == 0
NO_TELEMETRY = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false"}  # as the project's prefect.toml: offline, no heartbeat


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder no file can be created in: read-only for a user; for root, who ignores modes, sysfs."""
    if ROOT_USER:
        return Path("/sys")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- ingest: empty files and the TSV header -----------------------------------------------------------------------


@pytest.mark.parametrize("name, body", [("c.json", b""), ("c.tsv", b""), ("c.tsv", b"caption_id\tcaption\n")])
def test_empty_caption_file_is_one_line(tmp_path, name, body):
    (tmp_path / name).write_bytes(body)
    assert_one_error(cfgen(tmp_path, "ingest", name, "out.parquet"), name, "no captions")
    assert not (tmp_path / "out.parquet").exists()


def test_tsv_header_is_not_a_caption(tmp_path):
    (tmp_path / "c.tsv").write_text("caption_id\tcaption\na_0\tA dog on a mat.\n")
    code, _, err, _ = cfgen(tmp_path, "ingest", "c.tsv", "out.parquet")
    assert code == 0, err
    assert pl.read_parquet(tmp_path / "out.parquet")["caption_id"].to_list() == ["a_0"]
    assert pl.read_parquet(tmp_path / "out.rejects.parquet").is_empty()


# --- outputs that cannot be written: checked before any work ------------------------------------------------------


def _caption_input(tmp_path: Path, stage: str) -> str:
    if stage == "ingest":
        shutil.copy(DEMO_CAPTIONS, tmp_path / "in.tsv")
        return "in.tsv"
    from tasks.text.ingest import SCHEMA

    one_row_parquet(tmp_path / "captions.parquet", SCHEMA, caption="a dog on a mat")
    return "captions.parquet"


@pytest.mark.parametrize("stage", ["ingest", "sites"])  # sites: a Prefect stage, refused before its server starts
def test_unwritable_output_folder_is_one_line_before_any_work(tmp_path, stage):
    source, folder = _caption_input(tmp_path, stage), unwritable_folder(tmp_path)
    output = folder / "out.parquet"
    line = assert_one_error(cfgen(tmp_path, stage, source, str(output)), f"cannot write {output}", "not writable")
    assert "Permission denied" in line or "Read-only file system" in line, line
    assert not output.exists() and not (tmp_path / "prefect-home").exists()  # no server was started


@pytest.mark.skipif(not ROOT_USER, reason="root only: /proc is unwritable for everyone")
def test_output_under_proc_is_one_line(tmp_path):
    source = _caption_input(tmp_path, "ingest")
    output = "/proc/cfgen/out.parquet"
    assert_one_error(cfgen(tmp_path, "ingest", source, output), f"cannot write {output}", "/proc is not writable")


@pytest.mark.parametrize("stage", ["ingest", "sites"])
def test_output_under_a_file_is_one_line_before_any_work(tmp_path, stage):
    source = _caption_input(tmp_path, stage)
    (tmp_path / "afile").write_text("x")
    assert_one_error(cfgen(tmp_path, stage, source, "afile/sub/out.parquet"), "cannot write afile/sub/out.parquet",
                     "afile is not a directory")
    assert (tmp_path / "afile").read_text() == "x"


def test_unwritable_metrics_or_rejects_are_refused_before_any_work(tmp_path):
    source = _caption_input(tmp_path, "sites")
    metrics = unwritable_folder(tmp_path) / "sites.json"
    assert_one_error(cfgen(tmp_path, "sites", source, "out.parquet", "--metrics", str(metrics)),
                     f"cannot write {metrics}")
    (tmp_path / "out.rejects.parquet").mkdir()
    assert_one_error(cfgen(tmp_path, "sites", source, "out.parquet"), "cannot write out.rejects.parquet",
                     "is a directory")
    assert not (tmp_path / "out.parquet").exists()


# --- disk full while writing: the output and its rejects stay in step ---------------------------------------------


@pytest.mark.parametrize("existing", [False, True], ids=["new-outputs", "replacing-outputs"])
def test_disk_full_on_the_rejects_leaves_output_and_rejects_as_they_were(tmp_path, monkeypatch, existing):
    """The second file (the rejects) fails with ENOSPC through the real writer: the output must not be replaced
    without its rejects, and no temporary is left."""
    shutil.copy(DEMO_CAPTIONS, tmp_path / "in.tsv")
    if existing:
        (tmp_path / "out.parquet").write_bytes(b"old output")
        (tmp_path / "out.rejects.parquet").write_bytes(b"old rejects")
    before = tree(tmp_path)
    real_write, calls = pl.DataFrame.write_parquet, []

    def write_parquet(frame, file, *args, **kwargs):
        calls.append(Path(file))
        if len(calls) == 2:
            Path(file).write_bytes(b"partial")  # the disk fills part-way through the file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
        return real_write(frame, file, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", write_parquet)
    code, lines = cfgen_in_process("ingest", str(tmp_path / "in.tsv"), str(tmp_path / "out.parquet"))
    assert (code, lines) == (2, [f"error: cannot write {tmp_path / 'out.rejects.parquet'}: No space left on device"])
    assert len(calls) == 2
    assert tree(tmp_path) == before


# --- errors inside a flow, and inputs checked before the server ----------------------------------------------------


def _validation_inputs(tmp_path: Path, export: list | bytes) -> Path:
    """params.yaml's relative paths under tmp_path: two selected pairs and a Label Studio export."""
    (tmp_path / "data/processed").mkdir(parents=True)
    (tmp_path / "data/validation").mkdir(parents=True)
    selected(2).write_parquet(tmp_path / "data/processed/selected.parquet")
    path = tmp_path / "data/validation/labelstudio_export.json"
    path.write_bytes(export if isinstance(export, bytes) else json.dumps(export).encode())
    return path


@pytest.mark.parametrize("export, needles", [
    pytest.param(b'[{"data": {', ["labelstudio_export.json", "not a readable JSON file"], id="truncated"),
    pytest.param([export_task("00000", "o", "A", annotation("a dog", 1))], ["choice 'a dog' is not in"],
                 id="choice-not-in-config"),
    pytest.param([export_task("99999", "o", "A", annotation("both", 1))], ["not in the selection", "99999"],
                 id="another-runs-export"),
])
def test_bad_label_studio_export_is_one_line_before_the_server(tmp_path, export, needles):
    _validation_inputs(tmp_path, export)
    assert_one_error(cfgen(tmp_path, "validation"), *needles)
    assert not (tmp_path / "data/processed/validated.parquet").exists()


def test_user_error_inside_a_flow_shows_no_traceback_unless_verbose(tmp_path):
    """`validation-tasks` finds a missing image only inside its flow: Prefect logs the exception with its traceback,
    which must not reach the terminal; the one `error:` line closes stderr. `-v` shows the traceback."""
    (tmp_path / "data/processed").mkdir(parents=True)
    selected(1).write_parquet(tmp_path / "data/processed/selected.parquet")  # its images were never written
    code, out, err, _ = cfgen(tmp_path, "validation-tasks", env_extra=NO_TELEMETRY)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in out + err, err
    assert lines[-1].startswith("error: image ") and "does not exist" in lines[-1]
    assert sum(line.startswith("error:") for line in lines) == 1
    code, out, err, _ = cfgen(tmp_path, "-v", "validation-tasks", env_extra=NO_TELEMETRY)
    assert code != 0 and "Traceback" in out + err and "does not exist" in out + err


# --- repeated annotations: deterministic and counted --------------------------------------------------------------


def test_repeated_annotations_are_counted_in_the_validation_metrics(tmp_path):
    """Annotator 1 labelled 00000's I_c twice: first wrongly, then correctly (updated later, but exported first, so
    "the last in the export" would pick the wrong one). The latest counts, and validation.json counts the repeat."""
    fixed = annotation("caption A", 1, id=2, updated_at="2024-05-02T10:00:00.000000Z")
    wrong = annotation("caption B", 1, id=1, updated_at="2024-05-01T10:00:00.000000Z")
    _validation_inputs(tmp_path, [export_task("00000", "o", "A", annotation("caption A", 1)),
                                  export_task("00000", "c", "A", fixed, wrong)])
    code, _, err, _ = cfgen(tmp_path, "validation", env_extra=NO_TELEMETRY)
    assert code == 0, err
    metrics = json.loads((tmp_path / "reports/metrics/validation.json").read_text())
    assert (metrics["validated_pairs"], metrics["duplicate_annotations"]) == (1, 1)
    assert pl.read_parquet(tmp_path / "data/processed/validated.parquet")["caption_id"].to_list() == ["00000"]
    assert "1 repeated annotations" in err
