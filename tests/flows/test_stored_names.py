"""Every reader of stored image names, through its real stage function, flow or `cfgen` command, given a selection
(or removal pairs) one of whose names is `..`, absolute or a link out of the image folder: one line naming it, and
no byte read or written outside the folder (every file the process opens is recorded by an audit hook), no output
written, the outside file unchanged."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tasks.core.errors import UserError
from tasks.core.schemas import COUNTERFACTUALS, INPAINTED, SAMPLES, SELECTED
from tasks.image import store
from tests.conftest import project_params

_opened: list[list[str]] = []  # while a test records: the paths every `open` of this process names


def _audit(event: str, args: tuple) -> None:
    if _opened and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened[-1].append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # for the process's life (a hook cannot be removed): it records only inside `recording`

KINDS = ("dotdot", "absolute", "file-link", "folder-link")


class Project:
    """A project (`root/project`) with two selected pairs whose PNGs are in its image folder, and `secret.png`
    outside it (`root/outside`); pair c1's I_c is named `bad`."""

    def __init__(self, root: Path, kind: str):
        self.root, outside = root / "project", root / "outside"
        self.images = self.root / "images"
        rng = np.random.default_rng(0)
        self.pngs = [store.write_png(self.images, rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)) for _ in range(4)]
        self.secret = outside / store.write_png(outside, rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
        self.before = (self.secret.read_bytes(), self.secret.stat().st_mtime_ns)
        (self.images / "zz").mkdir()
        (self.images / "zz" / "link.png").symlink_to(self.secret)
        (self.images / "out").symlink_to(self.secret.parent)
        self.bad = {"dotdot": os.path.relpath(self.secret, self.images), "absolute": str(self.secret),
                    "file-link": "zz/link.png", "folder-link": f"out/{self.secret.name}"}[kind]

    def selected(self) -> pl.DataFrame:
        rows = [{**dict.fromkeys(SELECTED), "caption_id": f"c{i}", "image_id": str(i), "caption": f"a dog {i}",
                 "counterfactual": f"a cat {i}", "edit_type": "noun", "original_word": "dog", "substitute": "cat",
                 "sample": 0, "seed": i, "p2p_fraction": 0.5, "guidance_scale": 7.5, "clip_dir": 0.1, "tried": 1,
                 "image_o": self.pngs[2 * i], "image_c": self.pngs[2 * i + 1] if i == 0 else self.bad}
                for i in range(2)]
        return pl.DataFrame(rows, schema=SELECTED)

    def counterfactuals(self) -> pl.DataFrame:
        return pl.DataFrame([{**dict.fromkeys(COUNTERFACTUALS), **{k: v for k, v in row.items() if k in COUNTERFACTUALS},
                              "position": 1, "start": 2, "end": 5} for row in self.selected().to_dicts()],
                            schema=COUNTERFACTUALS)

    def params(self, *overrides: str):
        """The project's params, every path it reads or writes under `root` (the tables written first)."""
        data = self.root / "data"
        data.mkdir(exist_ok=True)
        self.selected().write_parquet(data / "selected.parquet")
        self.counterfactuals().write_parquet(data / "counterfactuals.parquet")
        pl.DataFrame(schema=SAMPLES).write_parquet(data / "samples.parquet")
        paths = {"selected": data / "selected.parquet", "selected_images": self.images,
                 "counterfactual_captions": data / "counterfactuals.parquet", "samples": data / "samples.parquet",
                 **{name: self.root / "out" / name for name in (
                     "export", "gallery", "labelstudio_tasks", "metrics", "plots", "judged", "truth", "truth_samples",
                     "evaluation", "evaluation_reports", "validated", "removal_pairs", "labelstudio_export",
                     "run_metrics", "figures", "source_images")}}
        return project_params(*(f"paths.{k}={v}" for k, v in paths.items()), *overrides)

    def gallery_overrides(self) -> list[str]:
        """`-p paths.KEY=VALUE` for every path `cfgen gallery` reads or writes, as `params` sets them."""
        paths = self.params().paths
        return [arg for key in ("selected", "selected_images", "counterfactual_captions", "gallery", "judged",
                                "truth", "validated", "removal_pairs", "run_metrics", "figures")
                for arg in ("-p", f"paths.{key}={getattr(paths, key)}")]

    def written(self) -> list[str]:
        """Every file under the project's outputs (`root/out`) but a run's lock beside an output (`held`)."""
        out = self.root / "out"
        return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and not
                      (p.name.startswith(".") and p.name.endswith(".lock")))


@pytest.fixture(params=KINDS)
def project(request, tmp_path):
    return Project(tmp_path, request.param)


def refused(project: Project, run) -> str:
    """`run()` raises one line naming the bad name; no file outside the image folder was opened and none written;
    the outside file is as it was. Returns the line."""
    _opened.append([])
    try:
        with pytest.raises(UserError) as raised:
            run()
    finally:
        opened = _opened.pop()
    message = str(raised.value)
    assert "\n" not in message and repr(project.bad) in message, message
    outside = project.secret.parent.resolve()
    assert not [p for p in opened if Path(p).resolve().is_relative_to(outside)]
    assert (project.secret.read_bytes(), project.secret.stat().st_mtime_ns) == project.before
    assert project.written() == []
    return message


def test_export_embeds_no_file_outside_the_image_folder(project):
    from tasks.release import export
    from tasks.release.params import ExportParams

    rows = export.dataset_rows(project.selected(), project.counterfactuals(), {})
    refused(project, lambda: export.embedded(rows, project.images))
    refused(project, lambda: export.write_dataset({"train": rows}, project.images, project.root / "out",
                                                  ExportParams()))


def test_the_removal_export_embeds_no_file_outside_the_image_folder(project):
    """The same writer over the object-removal pairs (I_0, I_1 in the inpainted images)."""
    from tasks.release import export
    from tasks.removal import release

    rows = release.dataset_rows(removal_pairs(project))
    refused(project, lambda: export.write_dataset({"test": rows}, project.images, project.root / "out",
                                                  export.ExportParams()))


def removal_pairs(project: Project) -> pl.DataFrame:
    from tasks.core.schemas import REMOVAL_PAIRS

    return pl.DataFrame([{**dict.fromkeys(REMOVAL_PAIRS), "caption_id": f"c{i}", "image_id": str(i),
                          "caption": "a dog", "edited_caption": "a photo", "decision": "remove", "fill": "inpaint",
                          "removed": ["dog"], "remaining": [], "deleted": ["dog"], "split": "test",
                          "image_0": project.pngs[2 * i], "image_1": project.pngs[2 * i + 1] if i == 0 else project.bad}
                         for i in range(2)], schema=REMOVAL_PAIRS)


def test_the_label_studio_tasks_embed_no_file_outside_the_image_folder(project, prefect_server):
    from flows.validation import validation_tasks_flow

    refused(project, lambda: validation_tasks_flow(project.params()))


def test_the_gallery_command_copies_no_file_from_outside_the_image_folder(project):
    """`cfgen gallery` (its flow is no Prefect flow: no server) in this process: exit 2, one `error:` line."""
    from tests.flows.test_cli import cfgen_in_process

    overrides = project.gallery_overrides()

    def run():
        code, lines = cfgen_in_process("gallery", *overrides)
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: stored image name"), lines
        raise UserError(lines[0])

    refused(project, run)


@pytest.mark.parametrize("project", ["dotdot", "absolute"], indirect=True)
def test_the_diff_gallery_copies_no_file_from_outside_the_image_folder(project):
    """`cfgen diff`'s gallery reads each version's PNGs through DVC at its revision, where a link of the working
    tree plays no part: its names are checked before any card is written."""
    from tasks.release import gallery, gallery_site

    read = gallery_site.from_store(project.images)
    refused(project, lambda: gallery.compare(project.root / "out" / "diff", "a → b",
                                             {"b": (project.counterfactuals(), project.selected(), read)},
                                             {"c0": "added", "c1": "added"}))


def test_the_report_draws_no_file_from_outside_the_image_folder(project):
    from tasks.release import report

    refused(project, lambda: report.figures(project.counterfactuals(), pl.DataFrame(schema=SAMPLES),
                                            project.selected(), {"captions": 2}, project.images,
                                            project.root / "out" / "figures"))


def test_mixtures_embed_no_file_from_outside_the_image_folder(project, prefect_server):
    from flows.release.mixtures import mixtures_flow

    refused(project, lambda: mixtures_flow(project.params()))


def test_the_judge_asks_about_no_file_outside_the_image_folder(project, result_store):
    from flows.judge import judge_flow

    refused(project, lambda: judge_flow(project.params("judge.enabled=true")))


def test_evaluate_scores_no_file_outside_the_image_folder(project, result_store):
    from flows.evaluation import evaluate_flow

    refused(project, lambda: evaluate_flow(project.params()))


def test_truth_reads_back_no_file_outside_the_image_folder(project, result_store, monkeypatch):
    """Checked before any sample is re-rendered (the model checks, `flows.truth.check`, are another test's)."""
    import flows.truth

    monkeypatch.setattr(flows.truth, "check", lambda params: None)
    refused(project, lambda: flows.truth.truth_flow(project.params("truth.enabled=true")))


def test_the_removal_selection_scores_no_file_outside_the_image_folder(project):
    """Checked before the CLIP model is used (none is given)."""
    from tasks.removal import selection

    edits = removal_pairs(project).select(list(INPAINTED))
    refused(project, lambda: selection.run(edits, project.images, project_params().removal_selection, None))


def test_a_canonical_render_record_names_no_file_outside_its_folder(project):
    """The selection stage's canonical renders are read back by the names their pair's record holds."""
    from flows.image.selection import canonical_images, stored_canonical
    from tasks.image.records import MEASURED, PairRecords

    records = PairRecords(project.root / "records")
    folder = canonical_images(records)
    folder.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(project.images, folder)  # the canonical folder holds the project's images (and their links)
    measured = {**dict.fromkeys(MEASURED, 0.5), "nan": False, "max_pixel_o": 9, "max_pixel_c": 9}
    records.append("ab" * 16, {"canonical-x": {**measured, "pngs": [project.pngs[0], project.bad]}})
    refused(project, lambda: stored_canonical(records, "ab" * 16, "canonical-x"))


@pytest.mark.parametrize("project", ["dotdot"], indirect=True)
def test_the_cfgen_command_says_it_in_one_line(project):
    """`cfgen validation-tasks` as a user runs it (a subprocess, its temporary Prefect server): exit 2, one `error:`
    line (the Prefect log of the failed flow run aside), no tasks file."""
    from tests.flows.test_cli import cfgen
    from tests.flows.test_faults import NO_TELEMETRY

    data = project.root / "data/processed"
    data.mkdir(parents=True)
    project.selected().write_parquet(data / "selected.parquet")
    os.rename(project.images, data / "images")  # the default paths.selected_images; the bad name moves along
    code, out, err, _ = cfgen(project.root, "validation-tasks", env_extra=NO_TELEMETRY)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and "Traceback" not in out + err and errors == [err.strip().splitlines()[-1]], err
    assert errors[0].startswith(f"error: stored image name {project.bad!r}")
    assert not (project.root / "data/validation").exists()



STRACE = shutil.which("strace")
SYSCALLS = "open,openat,openat2,creat,truncate,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,link,symlink"
CALL = re.compile(r"^\d+\s+(\w+)\((.*)\)\s+=\s+(-?\d+)(?:<([^>]*)>)?")  # pid name(args) = result<fd's file>


def needs_strace() -> None:
    if STRACE is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but strace is not installed (make test installs it with apt-get)")
        pytest.skip("strace not installed (apt-get install strace)")


def file_calls(log: Path, cwd: Path) -> list[tuple[str, bool, list[Path]]]:
    """(syscall, whether it writes, the files it names, resolved) of each successful call in an `strace -f -y` log:
    an open writes when its flags do; relative names resolve against the folder `-y` shows for their dirfd."""
    found = []
    for line in log.read_text().splitlines():
        if not (call := CALL.match(line)) or int(call[3]) < 0:
            continue
        name, args, opened = call[1], call[2], call[4]
        base = Path(m[1]) if (m := re.match(r"\w+<([^>]*)>", args)) else cwd
        files = [base / quoted for quoted in re.findall(r'"([^"]*)"', args)] + ([Path(opened)] if opened else [])
        writes = not name.startswith("open") or bool(re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC", args))
        found.append((name, writes, [Path(os.path.normpath(f)) for f in files]))
    return found


@pytest.mark.parametrize("project", KINDS, indirect=True)
def test_syscalls_show_no_byte_read_or_written_beyond_the_project(project):
    """`cfgen gallery` under `strace -f -y` (every process it starts traced): no file-name syscall of the run names
    the file beyond the image folder or its folder, whatever the stored name (`..`, absolute, a link to it, a link to
    its folder), and every file it opens to write, creates, renames or removes is in the project or a device; exit 2
    with the one line, the file beyond as it was."""
    needs_strace()
    from tests.flows.test_cli import cfgen

    overrides = project.gallery_overrides()
    log = project.root.parent / "strace.log"
    code, _, err, _ = cfgen(project.root, "gallery", *overrides, env_extra={"PYTHONDONTWRITEBYTECODE": "1"},
                            wrapper=(STRACE, "-f", "-y", "-qq", "-e", f"trace={SYSCALLS}", "-o", str(log)))
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: stored image name"), err
    calls, beyond, root = file_calls(log, project.root), project.secret.parent.resolve(), project.root.resolve()
    assert len(calls) > 100  # the whole run was traced: Python's imports alone open hundreds of files
    assert not [c for c in calls if any(f.resolve().is_relative_to(beyond) for f in c[2])]
    written = [c for c in calls if c[1] and not all(f.resolve().is_relative_to(root) or f.is_relative_to("/dev")
                                                      for f in c[2])]
    assert not written, written[:5]
    assert (project.secret.read_bytes(), project.secret.stat().st_mtime_ns) == project.before
