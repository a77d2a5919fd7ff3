"""The real `dvc` CLI on the demo DAG in a temporary git repo: which stages rerun after which param or code change,
and what each rerun renders.

(a) a second `dvc repro` does nothing; (b) narrowing `similarity.upper` reruns similarity and downstream, but the
generate stage generates only never-seen caption pairs; (c) a CLIP threshold renders only new winners and its
reversal nothing; (d) fewer steps regenerates every pair; batch sizes render nothing; n_samples 4 -> 6 -> 4 renders
the 2 new samples per pair, then nothing; an edit two imports below generate re-renders everything, an edit of the
report module nothing; (g) an object-removal alpha reruns only the removal stages (+ evaluate, datasheet) and
fills only new edits; (h) switching the relations filter off reruns from relations and renders only changed
pairs; (i) a judge threshold or an edit of its verdict code reruns the judge and asks the VLM nothing;
`dvc exp run -S` behaves the same, and `cfgen diff` compares two versions.

The first repro is traced (tools/tracing): every stage's code `deps` are exactly the project files its command
imports, its `params:` cover exactly the keys it reads and its deps and outs every data file it
reads; it runs with HF_TOKEN and PREFECT_API_KEY set, and neither reaches any file or the Prefect
database. Its outputs are the reference of a copy whose `dvc repro` is SIGKILLed in generate, selection and inpaint:
resumed, it writes the same bytes. Every output after the caption stages keeps the minimal edit, after the first
repro and after (g)'s whole-DAG repro.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
import pytest
import yaml

from flows.engine.counters import facts, run_log
from tasks.release import gallery
from tasks.stages import FIRST, Sections, stages
from tasks.text.swaps import exchanged
from tests.conftest import ROOT, WORLD_CAPTIONS, requires_nltk
from tests.flows.records import persisted_samples
from tools.tracing import code_deps

pytestmark = [requires_nltk, pytest.mark.slow]
N_CAPTIONS = 15


def sh(repo: Path, *args: str, env: dict) -> str:
    """stdout and stderr of a command, interleaved as printed."""
    done = subprocess.run(args, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        raise AssertionError(f"{' '.join(args)} failed:\n{done.stdout[-8000:]}")
    return done.stdout


def ran(output: str) -> list[str]:
    """The stages a `dvc repro` ran, but `params`: the whole file's check, which runs first whenever params.yaml
    changed (or no run cache restores it: its stamp persists) and computes nothing."""
    return [name for name in re.findall(r"Running stage '([^']+)'", output) if name != FIRST]


def metrics(repo: Path, stage: str) -> dict:
    """The last run's metrics of `stage`, counters included (its run log)."""
    return json.loads(run_log(repo / "reports" / "metrics" / f"{stage}.json").read_text())


SECRETS = {"HF_TOKEN": f"hf_{secrets.token_hex(16)}", "PREFECT_API_KEY": f"pnu_{secrets.token_hex(16)}"}  # made
# here, so that no source file holds them
TRACING = ROOT / "tools" / "tracing"  # its sitecustomize records each stage's params keys and files


def copy_project(repo: Path, env: dict) -> None:
    """The project's git files (no dvc.lock) in `repo`, its first N_CAPTIONS demo captions and two real images
    (under `paths.source_images`), committed in a new git repo."""
    from PIL import Image

    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file() and name != "dvc.lock":
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    source = repo / WORLD_CAPTIONS.relative_to(ROOT)
    captions = source.read_text().splitlines()[:N_CAPTIONS]
    source.write_text("\n".join(captions) + "\n")
    for seed, image_id in enumerate(sorted({line.split("_")[0] for line in captions})[:2]):
        pixels = np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(repo / "data/raw/source_images" / f"{int(image_id):0>12}.jpg")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy"]):
        sh(repo, *cmd, env=env)


def project_env(repo: Path) -> dict:
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(repo),
            "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(repo / ".cache")}


def outputs(repo: Path) -> dict[str, bytes]:
    """Every file a repro writes (data, reports, lock files) and its bytes; not the run logs (`*.run.json`: what each
    run computed, untracked) nor the run lock beside a folder (`.NAME.lock`: made by the command that writes it,
    which DVC's run cache does not run)."""
    found = {"dvc.lock": (repo / "dvc.lock").read_bytes(), "demo/dvc.lock": (repo / "demo/dvc.lock").read_bytes()}
    for folder in ("data", "reports", "models"):
        found |= {str(p.relative_to(repo)): p.read_bytes() for p in sorted((repo / folder).rglob("*"))
                  if p.is_file() and not p.name.endswith(".run.json")
                  and not (p.name.startswith(".") and p.suffix == ".lock")}
    return found


class FirstRepro(NamedTuple):
    path: Path
    env: dict
    outputs: dict[str, bytes]  # the uninterrupted reference
    order: list[str]  # the stages in the order DVC ran them
    trace: Path  # per stage, the params keys and files it read (tools/tracing)


@pytest.fixture(scope="module")
def first_repro(tmp_path_factory, prefect_server) -> Iterator[FirstRepro]:
    """A git + DVC copy of the project (N_CAPTIONS demo captions), reproduced once with import, params and file
    tracing and with both secrets set; removed when the module ends (pytest keeps a fixture's folders to the run's
    end)."""
    repo = tmp_path_factory.mktemp("dvc_repo")
    env = project_env(repo)
    copy_project(repo, env)
    trace = tmp_path_factory.mktemp("trace")
    started = time.monotonic()
    first = sh(repo, "dvc", "repro", env={**env, **SECRETS, "CFGEN_TRACE_DIR": str(trace),
                                         "PYTHONPATH": f"{TRACING}:{repo}"})
    print(f"initial dvc repro: {time.monotonic() - started:.0f}s")
    assert "datasheet" in ran(first)
    (repo / ".cache").mkdir(exist_ok=True)
    reference = FirstRepro(repo, env, outputs(repo), ran(first), trace)
    commit(repo, env, "v1")
    yield reference
    shutil.rmtree(repo, ignore_errors=True)
    shutil.rmtree(trace, ignore_errors=True)


@pytest.fixture(scope="module")
def repo(first_repro) -> tuple[Path, dict]:
    return first_repro.path, first_repro.env


def test_every_stage_lists_exactly_the_code_it_imports(first_repro):
    path = first_repro.path
    stages = {name: stage for file, prefix in code_deps.FILES.items()  # DVC names demo/dvc.yaml's by file
              for name, stage in ((prefix + n, s) for n, s in yaml.safe_load((path / file).read_text())["stages"]
                                  .items())}
    imported = code_deps.imported(first_repro.trace, path)
    assert set(imported) == set(stages)
    wrong = {}
    for stage, files in imported.items():
        listed = {d for d in stages[stage]["deps"] if code_deps.is_code(d)}
        if listed != files:
            wrong[stage] = {"missing": sorted(files - listed), "not imported": sorted(listed - files)}
    assert not wrong, (json.dumps(wrong, indent=1) + "\nto write what each stage imported: python -m "
                       f"tools.tracing.code_deps {first_repro.trace} {path}")


def locked_stages(repo: Path) -> dict[str, dict]:
    """Each stage's resolved deps, outs and params keys, as `dvc.lock` and `demo/dvc.lock` record them."""
    stages = {}
    for lock, prefix in (("dvc.lock", ""), ("demo/dvc.lock", "demo/dvc.yaml:")):
        for name, stage in yaml.safe_load((repo / lock).read_text())["stages"].items():
            stages[prefix + name] = {"deps": [d["path"] for d in stage.get("deps", [])],
                                     "outs": [o["path"] for o in stage.get("outs", [])],
                                     "params": [k for keys in stage.get("params", {}).values() for k in keys]}
    return stages


def traced(first: FirstRepro) -> dict[str, dict]:
    """Per stage (as DVC names it), the union over its processes of what tools/tracing recorded."""
    found = code_deps.traced(first.trace)
    for name in locked_stages(first.path):
        assert name in found, f"no trace of stage {name}"
    return {name: found[name] for name in locked_stages(first.path)}


def under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


HELD = (".lock", ".table")  # an images folder's run lock and owner marker (`held_folder`): who may write it,
# not what a stage computes
NOT_DATA = (".git", ".dvc", ".cache", "params.yaml", "pyproject.toml", "prefect.toml", "dvc.yaml")  # VCS, the
# Prefect store, params (checked by key), the tools' own settings and the pipeline (whose deps the params stage checks);
# code is checked by import


READ_ELSEWHERE = {  # declared keys the demo run cannot show read, and why each is declared all the same
    ("saliency", "paths.source_images"): "read only with saliency.enabled (off in the demo)",
    ("saliency", "paths.source_image_name"): "read only with saliency.enabled (off in the demo)",
    ("generate", "selection"): "read only with generate.adaptive.enabled (off in the demo)",
    ("perplexity", "sites.types"): "read while params load: it fills perplexity.type_shares",
}


def branched(node) -> bool:
    """Whether a params subtree holds a per-profile value (`{demo: ..., paper: ...}`), which `profile` picks."""
    return isinstance(node, dict) and bool(node) and (set(node) <= {"demo", "paper"}
                                                      or any(branched(v) for v in node.values()))


def test_every_stage_declares_the_params_keys_it_reads(first_repro):
    """Every key a stage reads is under one of its `params:` entries (paths: checked as deps and outs), and every
    entry is read (or under a section read whole), apart from READ_ELSEWHERE and the `params` stage, whose whole work
    is validating every section as params load (reads the tracer leaves out). `profile` counts as read where a read
    key has per-profile values: it picks them as params load."""
    params, wrong = yaml.safe_load((first_repro.path / "params.yaml").read_text()), {}
    for stage, seen in traced(first_repro).items():
        declared = [d.replace(".", "/") for d in locked_stages(first_repro.path)[stage]["params"]]
        leaves, nodes = ({k.replace(".", "/") for k in seen[kind]} for kind in ("keys", "nodes"))
        subtrees = [params] if "*" in seen["nodes"] else [value_at(params, k) for k in leaves | nodes]
        if any(branched(t) for t in subtrees):
            leaves.add("profile")
        both = leaves | nodes
        missing = sorted(k for k in leaves if not under(k, declared) and not k.startswith("paths/"))
        unread = sorted(d for d in declared if "*" not in seen["nodes"] and not any(under(k, [d]) or under(d, [k])
                                                                                    for k in both))
        unread = [d for d in unread if (stage, d.replace("/", ".")) not in READ_ELSEWHERE and stage != "params"]
        if missing or unread:
            wrong[stage] = {"read, not declared": missing, "declared, never read": unread}
    assert not wrong, json.dumps(wrong, indent=1)


def value_at(params: dict, key: str):
    for part in key.split("/"):
        params = params.get(part) if isinstance(params, dict) else None
    return params


def test_every_stage_declares_the_files_it_reads(first_repro):
    root, wrong = str(first_repro.path), {}
    for stage, seen in traced(first_repro).items():
        locked = locked_stages(first_repro.path)[stage]
        files = {os.path.relpath(f, root) for f in seen["read"] if f.startswith(root + "/")}
        data = {f for f in files if not f.endswith((".py", ".pyc")) and not under(f, list(NOT_DATA))
                and not (Path(f).name.startswith(".") and Path(f).name.endswith(HELD))}
        if missing := sorted(f for f in data if not under(f, locked["deps"] + locked["outs"])):
            wrong[stage] = missing
    assert not wrong, json.dumps(wrong, indent=1)


def test_no_secret_reaches_a_file_the_dag_wrote_or_the_prefect_database(first_repro, prefect_server):
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

    database = Path(PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split(":///", 1)[1])
    files = [p for p in first_repro.path.rglob("*") if p.is_file() and ".git" not in p.relative_to(
        first_repro.path).parts[:1]] + list(database.parent.glob(database.name + "*"))
    assert database in files and any(".cache" in p.parts for p in files)  # the database and the result store
    leaks = {str(p): name for p in files for name, secret in SECRETS.items() if secret.encode() in p.read_bytes()}
    assert not leaks, leaks


def one_edit(c_o: str, c_c: str, original: str, substitute: str) -> bool:
    """C_c is C_o with one occurrence of `original` replaced by `substitute`, every other character kept."""
    return c_c != c_o and any(c_o[:i] + substitute + c_o[i + len(original):] == c_c
                              for i in range(len(c_o) + 1) if c_o.startswith(original, i))


def assert_minimal_edits(repo: Path) -> int:
    """The minimal-edit invariant on every row of every output after the caption stages: the C_c table, the selected
    pairs, both exported configs (a swap's also the two-span one, `exchanged`) and every mixture (each of its captions
    one of its pair's C_o, C_c). Returns the rows checked."""
    columns = ["caption", "counterfactual", "original_word", "substitute", "edit_type"]
    processed = repo / "data/processed"
    export = pl.concat([pl.read_parquet(repo / "data/export" / config / "*.parquet")
                        for config in ("data", "validated")])
    tables = {"counterfactual_captions": pl.read_parquet(processed / "counterfactual_captions.parquet").select(columns),
              "selected": pl.read_parquet(processed / "selected.parquet").select(columns),
              "export": export.select(pl.col("caption_0").alias("caption"), pl.col("caption_1").alias("counterfactual"),
                                      "original_word", "substitute", "edit_type")}
    for name, table in tables.items():
        broken = [row for row in table.iter_rows() if not one_edit(*row[:4])
                  or (row[4] == "swap" and not exchanged(*row[:2]))]
        assert table.height and not broken, (name, broken[:3])
    pairs = {r["id"]: {r["caption_0"], r["caption_1"]} for r in export.iter_rows(named=True)}
    mixtures = pl.read_parquet(repo / "data/export/mixtures/*/*.parquet")
    assert mixtures.height and all(caption in pairs[cid] for cid, caption in mixtures.select("caption_id", "caption")
                                   .iter_rows()), "a mixture caption that is neither C_o nor C_c of its pair"
    return sum(t.height for t in tables.values()) + mixtures.height


KILLED = ("generate", "selection", "inpaint")  # the kill test's stages, each SIGKILLed mid-way


def never_run_cached(repo: Path) -> set[str]:
    """The stages DVC's run cache never holds (`dvc.stage.Stage.run`): an output that persists, or one outside the
    cache that is neither a metric nor a plot."""
    return {name for name, stage in yaml.safe_load((repo / "dvc.yaml").read_text())["stages"].items()
            for out in stage.get("outs", []) if isinstance(out, dict)
            for options in out.values() if options and (options.get("persist") or options.get("cache") is False)}


def kill_mid(repo: Path, env: dict, stage: str, log: Path) -> tuple[int, int]:
    """Start `dvc repro STAGE` (every stage it reaches runs, an earlier killed one resumes: no run cache); SIGKILL its
    whole process group (dvc and the stage's `cfgen`) once `stage`'s progress bar shows 0 < done < total. Returns
    (done, total) at the kill; fails when the repro ends or moves on without that."""
    bar = re.compile(rf"{stage}:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")
    with log.open("w") as out:
        process = subprocess.Popen(["dvc", "repro", "--no-run-cache", stage], cwd=repo, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    hung = time.monotonic() + 3600  # a guard against a hang, not a speed bound: the stages before run at any pace
    while process.poll() is None and time.monotonic() < hung:
        text = log.read_text(errors="replace")
        if (at := text.find(f"Running stage '{stage}'")) >= 0:
            for done, total in bar.findall(text[at:]):
                if 0 < int(done) < int(total):
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    return int(done), int(total)
            if text.find("Running stage '", at + 1) >= 0:
                break  # on to the next stage: this one's bar never showed it mid-way
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError(f"{stage} was never seen mid-way:\n{log.read_text(errors='replace')[-3000:]}")


def differing(a: dict[str, bytes], b: dict[str, bytes]) -> list[str]:
    """Files whose bytes differ, or that only one side has; a lock file by its entries, which DVC writes in the order
    the stages first complete (a repro of one target completes them in another)."""
    def content(files: dict[str, bytes], name: str):
        return yaml.safe_load(files[name]) if name.endswith("dvc.lock") and name in files else files.get(name)

    return sorted(name for name in a.keys() | b.keys() if content(a, name) != content(b, name))


def commit(repo: Path, env: dict, message: str) -> None:
    sh(repo, "git", "add", "-A", env=env)
    sh(repo, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--allow-empty", "-qm", message, env=env)


def set_param(repo: Path, dotted: str, value) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    node = params
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = value
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def timed_repro(repo: Path, env: dict, label: str, *targets: str) -> list[str]:
    started = time.monotonic()
    stages = ran(sh(repo, "dvc", "repro", *targets, env=env))
    print(f"{label}: {time.monotonic() - started:.0f}s, reran {stages}")
    return stages


def test_every_output_after_the_caption_stages_keeps_the_minimal_edit(repo):
    assert assert_minimal_edits(repo[0]) > 0


def test_a_dvc_repro_killed_in_generate_selection_and_inpaint_resumes_to_the_uninterrupted_bytes(
        first_repro, tmp_path):
    """Three SIGKILLs of `dvc repro STAGE`'s process group, each at a point its progress bar reached, then the
    killed stages resumed: every output, rejects file, metric, figure, PNG and lock file equals the uninterrupted
    first repro's, byte for byte (metrics hold no counter: those are in the untracked run logs). The stages no kill
    reaches come from the first repro's run cache, which restores a stage only when every input is the uninterrupted
    bytes: after the resumes, nothing runs but the stages it never holds (`never_run_cached`)."""
    repo = tmp_path / "killed"
    repo.mkdir()
    env = project_env(repo)
    copy_project(repo, env)
    sh(repo, "dvc", "cache", "dir", str(first_repro.path / ".dvc" / "cache"), env=env)
    assert ran(sh(repo, "dvc", "repro", "perplexity", env=env)) == []  # restored, not run
    order = sorted(KILLED, key=first_repro.order.index)  # DVC's run order: a kill's repro resumes the one before
    killed = {stage: kill_mid(repo, env, stage, tmp_path / f"{stage}.log") for stage in order}
    print(f"killed at {killed}")
    assert order[-1] in ran(sh(repo, "dvc", "repro", "--no-run-cache", *KILLED, env=env))  # resumed, not restored
    rest = ran(sh(repo, "dvc", "repro", env=env))  # the others restored: their inputs are the uninterrupted bytes
    assert sorted(rest) == sorted(never_run_cached(repo) - {FIRST}), rest
    resumed = outputs(repo)
    assert not differing(first_repro.outputs, resumed), differing(first_repro.outputs, resumed)
    assert sum(name.endswith(".png") for name in resumed) > 20 and "data/interim/samples.rejects.parquet" in resumed


def test_a_second_repro_does_nothing(repo):
    path, env = repo
    assert timed_repro(path, env, "(a) second repro") == []
    assert "up to date" in sh(path, "dvc", "status", env=env)
    # a step command on your own output writes beside it, never into the pipeline's outputs
    sh(path, "cfgen", "selection", "data/interim/samples.parquet", ".cache/own.parquet", env=env)
    own = pl.read_parquet(path / ".cache/own.parquet")
    named = [path / ".cache/own_images" / p for p in [*own["image_o"], *own["image_c"]]]  # relative to its folder
    assert own.height and all(p.is_file() for p in named)
    assert "up to date" in sh(path, "dvc", "status", env=env)


MODEL_LIBRARIES = ("torch", "transformers", "diffusers", "open_clip", "sentence_transformers")


STAGE_MODULES = {"tasks/text/relations.py": "relations", "tasks/image/generate.py": "generate",
                 "flows/image/generate.py": "generate", "tasks/image/selection.py": "selection",
                 "flows/image/selection.py": "selection", "tasks/release/mixtures.py": "mixtures",
                 "flows/release/export.py": "export", "tasks/release/gallery.py": "gallery",
                 "tasks/text/edits/swap.py": {"sites", "candidates"}}
"""A stage's own modules: an edit of one stales that stage alone (an edit type's module: the two steps running it)."""
SECTION_MODULES = ("tasks/judge/params.py", "tasks/validation/params.py", "tasks/text/params.py")
"""Params-section modules: an edit of one stales exactly the stages whose declarations read a section it defines."""


def readers(module: str) -> set[str]:
    """The stages whose declarations read a section defined in `module` (the datasheet reads every section)."""
    dotted = module.removesuffix(".py").replace("/", ".")
    defined = {name for name, cls in Sections.__annotations__.items() if cls.rpartition(".")[0] == dotted}
    return {name for name, s in stages().items() if s.sections is None or defined & set(s.sections)}


def test_the_release_stages_read_declarations_only_and_one_stages_edit_stales_that_stage_alone(repo):
    """`cfgen report`, `export` and `gallery` on the demo run import no model library and no stage's logic (they read
    the declarations); an edit of a stage's own module, its code and its help text (the module's docstring), leaves
    every other DVC stage up to date (`STAGE_MODULES`: a caption step, each image stage's logic and flow, release
    stages'); an edit of a params section's module stales the stages that read one of its sections and no other
    (`SECTION_MODULES`: a command assembles only the sections its stage reads)."""
    path, env = repo
    probe = ("import atexit, sys\nfrom flows.cli import app\natexit.register(lambda: print(sorted(m for m in "
             f"sys.modules if m.split('.')[0] in {MODEL_LIBRARIES} or m.startswith(('tasks.text.', 'tasks.image.')) "
             "and not m.endswith('.params'))))\napp(sys.argv[1:])")
    for command in ("report", "export", "gallery"):
        shown = sh(path, sys.executable, "-c", probe, command, env=env)
        assert shown.splitlines()[-1] == "[]", f"cfgen {command}: {shown[-3000:]}"
    edits = {**STAGE_MODULES, **{name: readers(name) for name in SECTION_MODULES}}
    assert edits["tasks/judge/params.py"] == {"params", "judge", "truth", "export", "datasheet"}
    for name, stale in edits.items():
        module = path / name
        original = module.read_text()
        try:
            module.write_text(original.replace('"""', '"""(edited) ', 1) + "\n\ndef _edited() -> int:\n    return 1\n")
            status = subprocess.run(["dvc", "status", "--json"], cwd=path, env=env, capture_output=True, text=True,
                                    check=True).stdout
            assert set(json.loads(status)) == ({stale} if isinstance(stale, str) else stale), f"{name}: {status}"
        finally:
            module.write_text(original)
    assert "up to date" in sh(path, "dvc", "status", env=env)


HELD_FOLDERS = {  # a command that writes a folder as a whole, and the folder
    ("selection", "data/interim/samples.parquet", "data/processed/selected.parquet", "--selected-images",
     "data/processed/images"): "data/processed/images",
    ("inpaint",): "data/interim/inpainted_images", ("gallery",): "reports/gallery", ("export",): "data/export/data",
    ("mixtures",): "data/export/mixtures", ("removal-export",): "data/export_removal/data"}


def test_a_folder_another_run_writes_is_one_line_and_left_as_it_was(repo):
    """Every command that writes a folder as a whole, while another run holds it (its lock, taken by this process):
    exit 2, one `error:` line naming the folder, and not one file under it changed."""
    from filelock import FileLock

    path, env = repo
    for command, folder in HELD_FOLDERS.items():
        target = path / folder
        assert target.is_dir(), f"the demo run wrote no {folder}"
        before = {p: p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()}
        with FileLock(target.with_name(f".{target.name}.lock")):
            done = subprocess.run(["cfgen", *command], cwd=path, env=env, capture_output=True, text=True)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 2 and len(errors) == 1, f"cfgen {command[0]}: {done.stderr[-3000:]}"
        assert re.fullmatch(f"error: another run is writing (.*/)?{folder}: wait for it, or give this run its own "
                            "folder", errors[0]), errors[0]
        assert {p: p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()} == before, command[0]


def test_dvc_plots_show_renders_every_figure_as_an_image_offline(repo, tmp_path):
    path, env = repo
    shown = subprocess.run(["dvc", "plots", "show", "--json", "-o", str(tmp_path)], cwd=path, env=env,
                           capture_output=True, text=True, check=True).stdout
    images = {name for name, renders in json.loads(shown)["data"].items() if renders and renders[0]["type"] == "image"}
    figures = {p.relative_to(path).as_posix() for p in (path / "reports/figures").glob("*.png")}
    assert len(figures) >= 5 and figures | {"reports/evaluation/itm_deltas.png"} <= images, shown[:2000]


def test_i_a_judge_threshold_or_its_verdict_code_reruns_the_judge_and_asks_the_vlm_nothing(repo):
    """(i), on the up-to-date DAG (a) leaves: the judge stage reruns on its params and code; the per-pair cache holds
    the answers, so neither a threshold nor an edit of the verdict module asks the VLM again, while the verdict
    follows the new thresholds; nothing upstream reruns. The truth stage follows the new verdicts without rendering,
    and re-renders every pair when the checker's code changes."""
    path, env = repo
    thresholds = yaml.safe_load((path / "params.yaml").read_text())["judge"]["thresholds"]
    for question, bar in (("original_o", 0.0), ("substitute_c", 0.0), ("substitute_o", 1.0), ("original_c", 1.0)):
        set_param(path, f"judge.thresholds.{question}", bar)  # every pair passes (the random VLM's P(yes) follows
    timed_repro(path, env, "(i0) the judge's thresholds pass every pair")  # the captions it was built from)
    first = metrics(path, "judge")
    assert first["enabled"] and first["pairs"] > 0 and first["rows_out"] == first["pairs"] and first["pairs_asked"] == 0
    for question in ("original_o", "substitute_c"):  # P(Yes) < 1: every pair's asked word now reads as missing
        set_param(path, f"judge.thresholds.{question}", 1.0)
    stages = timed_repro(path, env, "(i1) the judge's expected-yes thresholds 1.0")
    assert stages[0] == "judge" and set(stages) <= {"judge", "truth", "report", "export", "datasheet", "gallery"}
    judged = metrics(path, "judge")
    assert (judged["pairs_asked"], judged["pairs_cached"], judged["rows_out"]) == (0, first["pairs"], 0)
    assert set(judged["rejects"]) <= {"judge_original_missing", "judge_substitute_missing"}
    # new verdicts, the same images (or DVC's run cache restores truth: the first repro's verdicts were these)
    assert "truth" not in stages or metrics(path, "truth")["pairs_checked"] == 0
    with (path / "tasks/judge/verdict.py").open("a") as f:
        f.write("\n# A comment: the stage's code changed, no answer did.\n")
    stages = timed_repro(path, env, "(i2) tasks/judge/verdict.py edited", "judge")
    assert stages == ["judge"] and metrics(path, "judge")["pairs_asked"] == 0
    set_param(path, "judge.thresholds", thresholds)
    timed_repro(path, env, "(i3) the thresholds back")
    checker = path / "tasks/toyworld/checker.py"  # reached by the truth stage's per-pair task: in its key
    source = checker.read_text()
    assert "SHAPE_FIT = 0.78" in source
    checker.write_text(source.replace("SHAPE_FIT = 0.78", "SHAPE_FIT = 0.781"))
    stages = timed_repro(path, env, "(i4) the toy world's checker edited", "truth")
    assert stages == ["truth"] and metrics(path, "truth")["pairs_checked"] == metrics(path, "generate")["pairs"]
    checker.write_text(source)
    timed_repro(path, env, "(i5) the checker back")
    commit(path, env, "judge")


def test_the_export_and_datasheet_record_the_library_versions_of_the_cache_keys(repo):
    from importlib.metadata import version

    path, _ = repo
    exported = pl.read_parquet(next((path / "data/export/data").glob("*.parquet")))
    libraries = {c.removeprefix("library_"): exported[c].unique().to_list() for c in exported.columns
                 if c.startswith("library_")}
    assert {"torch", "diffusers", "transformers", "open_clip_torch", "nltk", "sentence-transformers"} <= set(libraries)
    assert all(values == [version(name)] for name, values in libraries.items())
    sheet = (path / "reports/datasheet.md").read_text()
    assert f"| diffusers | {version('diffusers')} |" in sheet
    assert f"| diffusers | {version('diffusers')} |" in (path / "data/export/README.md").read_text()


def test_the_truth_stage_reads_back_every_sample_and_selected_pair(repo):
    """The toy world's truth of the demo run: a row per generated sample and per selected pair, each selected pair
    read from its PNGs exactly as its sample was re-rendered (same seed, p2p fraction, scale), the headline keys at
    the top of truth.json, tracked by `dvc metrics show`, and in the report, the datasheet and the gallery's data."""
    path, env = repo
    samples = pl.read_parquet(path / "data/interim/samples.parquet")
    selected = pl.read_parquet(path / "data/processed/selected.parquet")
    checked = pl.read_parquet(path / "data/interim/truth_samples.parquet")
    chosen = pl.read_parquet(path / "data/processed/truth.parquet")
    assert sorted(checked.select("caption_id", "sample").rows()) == sorted(
        samples.select("caption_id", "sample").rows())
    assert sorted(chosen["caption_id"]) == sorted(selected["caption_id"]) and selected.height > 0
    again = chosen.join(selected.select("caption_id", "sample"), on="caption_id").join(
        checked, on=["caption_id", "sample"], suffix="_sample")
    assert again.height == chosen.height
    assert (again["accurate"] == again["accurate_sample"]).all() and (again["minimal"] == again["minimal_sample"]).all()
    truth = metrics(path, "truth")
    assert truth["enabled"] and truth["samples"] == samples.height and truth["selected_pairs"] == selected.height
    assert {k: (m["count"], m["of"]) for k, m in truth["pair_accuracy"].items()} == {
        "samples": (checked["accurate"].sum(), checked.height), "selected": (chosen["accurate"].sum(), chosen.height)}
    assert {"minimality", "p2p_gain", "filter_lift", "image_accuracy", "selection_keys", "both_subjects_check",
            "judge"} <= set(truth)
    # accurate means showing the edit: each image its own caption, and I_o not C_c unless C_o entails it
    assert not checked.filter("accurate", ~pl.col("o_shows_o") | ~pl.col("c_shows_c")).height
    assert not checked.filter("accurate", pl.col("o_shows_c"), ~pl.col("edit_type").is_in(["delete"])).height
    shown = json.loads(sh(path, "dvc", "metrics", "show", "--json", env=env))
    tracked = {k: v for run in shown.values() for f, d in run["data"].items() if f.endswith("truth.json")
               for k, v in d["data"].items()}
    assert tracked["filter_lift"]["value"] == truth["filter_lift"]["value"]  # DVC shows numbers, not the interval
    counted = [f for run in shown.values() for f, d in run["data"].items() if facts(d["data"]) != d["data"]]
    assert not counted, f"DVC tracks run counters as metrics in {counted}"  # they are in the run logs
    assert "samples_rendered" in metrics(path, "generate")  # the run log keeps them
    assert json.loads((path / "reports/metrics.json").read_text())["truth"]["pair_accuracy"] == truth["pair_accuracy"]
    picked = truth["pair_accuracy"]["selected"]
    assert f"Selection picked a real counterfactual (I_o shows C_o and not C_c, I_c shows C_c and not C_o) in " \
           f"{picked['count']} of {picked['of']} pairs" in (path / "reports/datasheet.md").read_text()
    site = json.loads((path / "reports/gallery/data.js").read_text().removeprefix("window.GALLERY = ").rstrip(";\n"))
    assert {c["caption_id"]: c["truth"] for c in site["pairs"]} == {
        r["caption_id"]: {k: r[k] for k in gallery.TRUTH_FIELDS} for r in chosen.iter_rows(named=True)}


VISIBLE_IMAGES_LOADED = ("[...document.images].filter(i => i.offsetParent && i.getBoundingClientRect().top < "
                         "innerHeight).every(i => i.complete && i.naturalWidth > 0)")  # lazy ones below: not asked


def test_the_gallery_of_the_demo_run_in_a_browser(repo, tmp_path):
    """The gallery stage's site, opened from the file system in headless Chromium: no console error, the demo notice
    in its header, a card per accepted pair, filters that agree with polars on selected.parquet, the rejects files'
    counts, a URL that reopens its slice, a non-blank first page."""
    from PIL import Image

    from tests.browser import page

    path, _ = repo
    index = (path / "reports/gallery/index.html").as_uri()
    selected = pl.read_parquet(path / "data/processed/selected.parquet")
    first_page = selected.sort("caption_id")["caption_id"].head(48).to_list()
    with page() as tab:
        tab.goto(index + "#tab=pairs")
        assert tab.locator("article.card").evaluate_all("cs => cs.map(c => c.dataset.captionId)") == first_page
        assert tab.inner_text("#count") == f"{selected.height} of {selected.height} pairs"
        assert tab.is_visible("#notice") and tab.inner_text("#notice").startswith("Demo profile: the toy world")
        tab.wait_for_function(VISIBLE_IMAGES_LOADED)
        tab.screenshot(path=tmp_path / "gallery.png")
        truth = dict(pl.read_parquet(path / "data/processed/truth.parquet").select("caption_id", "accurate").rows())
        badges = tab.locator("article.card").evaluate_all(
            "cs => cs.map(c => [c.dataset.captionId, c.querySelector('.truth-pass, .truth-fail').textContent])")
        assert [(i, not b.startswith("truth: not")) for i, b in badges] == [(i, truth[i]) for i in first_page]
        tips = tab.locator("article.card .truth-pass, article.card .truth-fail").evaluate_all(
            "bs => bs.map(b => b.title)")
        assert all(t.startswith("I_o: ") and "\nI_c: " in t for t in tips)  # what each image shows, or why not

        edit_type = selected["edit_type"].mode().sort()[0]
        tab.select_option("select[name=edit_type]", edit_type)
        of_type = selected.filter(pl.col("edit_type") == edit_type)
        assert tab.inner_text("#count") == f"{of_type.height} of {selected.height} pairs"
        assert set(tab.locator("article.card").evaluate_all("cs => cs.map(c => c.dataset.editType)")) == {edit_type}
        shared = tab.url

        values = selected["clip_dir"].drop_nulls().sort().to_list()
        low, high = ((values[i] + values[i + 1]) / 2 for i in (len(values) // 4, len(values) - 2))  # between values
        tab.goto(f"{index}#tab=pairs&min.clip_dir={low}&max.clip_dir={high}")
        in_range = selected.filter(pl.col("clip_dir").is_between(low, high)).sort("caption_id")
        assert tab.inner_text("#count") == f"{in_range.height} of {selected.height} pairs"
        assert tab.locator("article.card").evaluate_all("cs => cs.map(c => c.dataset.captionId)") == \
            in_range["caption_id"].head(48).to_list()

        tab.goto(index + "#tab=rejects")
        shown = sorted((g["reason"], int(g["count"])) for g in tab.locator("details.reject-group").evaluate_all(
            "gs => gs.map(g => ({...g.dataset}))"))
        errors = list(tab.errors)
    expected = sorted(row for file in path.glob("data/*/*.rejects.parquet")
                      for row in pl.read_parquet(file).group_by("reason").len().iter_rows())
    assert shown == expected and expected
    assert errors == []
    with page() as again:  # the shared link reopens the same slice
        again.goto(shared)
        assert again.inner_text("#count") == f"{of_type.height} of {selected.height} pairs"
        assert again.input_value("select[name=edit_type]") == edit_type
    pixels = np.asarray(Image.open(tmp_path / "gallery.png").convert("L"))
    assert (pixels < 200).mean() > 0.05 and len(np.unique(pixels)) > 50


def test_b_narrower_similarity_window_generates_only_unseen_pairs(repo):
    path, env = repo
    output = path / "data/processed/counterfactual_captions.parquet"
    before = pl.read_parquet(output)
    own = yaml.safe_load((path / "params.yaml").read_text())["similarity"]["upper_by_type"]  # a swap's: not `upper`
    shared = before.filter(~pl.col("edit_type").is_in(list(own)))["similarity"]
    assert shared.len() > 0
    set_param(path, "similarity.upper", float(shared.max()))  # every current winner stays inside
    stages = timed_repro(path, env, "(b1) similarity.upper = max winner similarity", "generate")
    assert stages[:2] == ["similarity", "perplexity"] and "candidates" not in stages
    after = pl.read_parquet(output)  # the same C_c; a perplexity may differ by float rounding (another trie packing)
    assert after.drop("perplexity").equals(before.drop("perplexity"))
    assert after["perplexity"].to_list() == pytest.approx(before["perplexity"].to_list(), rel=1e-5)
    assert "generate" not in stages or metrics(path, "generate")["pairs_generated"] == 0  # nothing to render

    set_param(path, "similarity.upper", float(shared.median()))  # half the winners under `upper` must change
    stages = timed_repro(path, env, "(b2) similarity.upper = median winner similarity", "generate")
    assert stages[:2] == ["similarity", "perplexity"] and "generate" in stages and "candidates" not in stages
    after = pl.read_parquet(output)
    unseen = after.join(before, on=["caption_id", "counterfactual"], how="anti").height
    generated = metrics(path, "generate")
    assert generated["pairs"] == after.height and generated["pairs_generated"] == unseen < after.height
    commit(path, env, "narrow")


def test_c_clip_threshold_renders_only_new_winners_and_its_reversal_nothing(repo):
    path, env = repo
    timed_repro(path, env, "(c0) selection after (b)", "selection")  # every current pair's winner rendered once
    before = pl.read_parquet(path / "data/processed/selected.parquet")
    default = yaml.safe_load((path / "params.yaml").read_text())["selection"]["min_clip_dir"]["demo"]
    set_param(path, "selection.min_clip_dir.demo", float(before["clip_dir"].median()))
    stages = timed_repro(path, env, "(c1) selection.min_clip_dir = median winner clip_dir", "selection")
    assert "selection" in stages  # (its downstream stages rerun on its changed output: DVC's own rule)
    assert not set(stages) & {"ingest", "sites", "saliency", "candidates", "similarity", "perplexity"}
    assert metrics(path, "generate")["pairs_generated"] == 0
    after = pl.read_parquet(path / "data/processed/selected.parquet")
    assert metrics(path, "selection")["renders"] == after.join(before, on=["caption_id", "sample"], how="anti").height
    set_param(path, "selection.min_clip_dir.demo", default)
    stages = timed_repro(path, env, "(c2) threshold reverted", "selection")
    # DVC's run cache restores (c0)'s outputs without running selection; if selection runs, every winner is a cache hit
    assert "selection" not in stages or metrics(path, "selection")["renders"] == 0
    assert pl.read_parquet(path / "data/processed/selected.parquet").equals(before)
    checked = before["subject_margin_c"].drop_nulls().len()
    margins = pl.read_parquet(path / "data/interim/samples.parquet")["subject_margin_c"].drop_nulls()
    assert checked > 0  # accepted pairs the both-subjects check applies to (noun edits, swaps)
    set_param(path, "selection.min_subject_margin_c.demo", float(margins.max()))  # no sample is above it
    stages = timed_repro(path, env, "(c3) selection.min_subject_margin_c above every sample's", "selection")
    assert "selection" in stages and metrics(path, "generate")["pairs_generated"] == 0  # margins come from screening
    after = pl.read_parquet(path / "data/processed/selected.parquet")
    assert after["subject_margin_c"].drop_nulls().is_empty() and after.height == before.height - checked
    assert metrics(path, "selection")["renders"] == after.join(before, on=["caption_id", "sample"], how="anti").height
    # every pair the check applies to (noun edits, swaps) is rejected for it, unless no sample passed the CLIP
    # thresholds; each formerly accepted one passed them
    applies = pl.read_parquet(path / "data/interim/samples.parquet").filter(pl.col("subject_margin_c").is_not_null())
    reasons = pl.read_parquet(path / "data/processed/selected.rejects.parquet").filter(
        pl.col("sample").is_null(), pl.col("caption_id").is_in(applies["caption_id"].to_list()))["reason"]
    assert set(reasons) <= {"original_subject_in_image_c", "substitute_in_image_o", "no_sample_passed"}
    assert subject_rejected(path) >= checked
    gate = yaml.safe_load((path / "params.yaml").read_text())["selection"]["min_image_image"]["demo"]
    set_param(path, "selection.min_image_image.demo", float(after["sim_image_image"].median()))  # half the winners fail
    timed_repro(path, env, "(c4) selection.min_image_image = median winner sim_image_image", "selection")
    strict = pl.read_parquet(path / "data/processed/selected.parquet")
    assert 0 < metrics(path, "selection")["accepted"] == strict.height <= after.height
    assert strict["sim_image_image"].min() >= float(after["sim_image_image"].median())
    assert metrics(path, "selection")["renders"] == strict.join(after, on=["caption_id", "sample"], how="anti").height
    set_param(path, "selection.min_image_image.demo", gate)  # the later steps count renders: keep pairs accepted
    commit(path, env, "strict")


def test_d_fewer_steps_regenerates(repo):
    path, env = repo
    set_param(path, "generate.steps.demo", 3)
    stages = timed_repro(path, env, "(d) generate.steps", "generate")
    assert "generate" in stages
    generated = metrics(path, "generate")
    assert generated["pairs_generated"] == generated["pairs"] > 0
    commit(path, env, "steps")


def rendered(path: Path) -> tuple[int, int, int]:
    generated = metrics(path, "generate")
    return generated["pairs_generated"], generated["samples_rendered"], metrics(path, "selection")["renders"]


def test_e_batch_sizes_and_n_samples_render_only_new_samples(repo):
    path, env = repo
    timed_repro(path, env, "(e0) selection after (d)", "selection")  # (d) reproduced up to generate only
    set_param(path, "generate.batch_samples", 1)  # both in generate's DVC params, neither in a cache key
    set_param(path, "generate.clip_batch_size", 2)
    assert "generate" in timed_repro(path, env, "(e) batch_samples=1, clip_batch_size=2", "selection")
    assert rendered(path) == (0, 0, 0) and metrics(path, "selection")["accepted"] > 0
    pairs = metrics(path, "generate")["pairs"]
    set_param(path, "generate.n_samples.demo", 6)
    timed_repro(path, env, "(e) n_samples 4 -> 6", "selection")
    assert rendered(path)[:2] == (pairs, 2 * pairs)
    set_param(path, "generate.n_samples.demo", 4)
    down = timed_repro(path, env, "(e) n_samples 6 -> 4", "selection")
    assert "generate" not in down or rendered(path)[:2] == (0, 0)  # DVC's run cache restores it, or nothing renders
    assert json.loads((path / "reports/metrics/generate.json").read_text())["samples"] == 4 * pairs
    commit(path, env, "batches")


def test_f_code_edits_rerun_exactly_what_they_affect(repo):
    path, env = repo
    p2p = path / "tasks/image/p2p.py"  # generate -> render -> sampling -> p2p.install -> processor -> share_rows
    p2p.write_text(p2p.read_text().replace("    mask = shared.view(-1, *([1] * (x.ndim - 2)))",
                                           "    mask = shared.view(-1, *([1] * (x.ndim - 2))).bool()"))
    stages = timed_repro(path, env, "(f1) inside the P2P processor", "selection")
    assert stages == ["generate", "selection"]
    generated = metrics(path, "generate")
    assert generated["pairs_generated"] == generated["pairs"] and generated["samples_rendered"] == generated["samples"]
    assert metrics(path, "selection")["renders"] == metrics(path, "selection")["accepted"] > 0
    timed_repro(path, env, "(f1) the rest of the DAG after the partial repros")  # every stage up to date again
    with (path / "tasks/release/report.py").open("a") as f:
        f.write("\n\ndef _edited() -> None:\n    \"\"\"A change to the report only.\"\"\"\n")
    importing = [name for name, stage in yaml.safe_load((path / "dvc.yaml").read_text())["stages"].items()
                 if "tasks/release/report.py" in stage["deps"]]  # the stages that run the report code
    assert sorted(timed_repro(path, env, "(f2) tasks/release/report.py edited")) == sorted(importing)
    assert not set(importing) & {"generate", "selection"}
    sh(path, "cfgen", "generate", "data/processed/counterfactual_captions.parquet", ".cache/f2.parquet",
       "--metrics", ".cache/f2.json", env=env)  # the Prefect cache alone decides: nothing to render
    direct = json.loads(run_log(path / ".cache/f2.json").read_text())
    assert (direct["pairs_generated"], direct["samples_rendered"]) == (0, 0)
    commit(path, env, "edits")


def subject_rejected(path: Path) -> int:
    """Pairs the both-subjects check rejected in the last selection run."""
    reasons = metrics(path, "selection")["rejects"]
    return reasons.get("original_subject_in_image_c", 0) + reasons.get("substitute_in_image_o", 0)


NOUN_SWAP = {"demo/dvc.yaml:tiny_models", "ingest", "sites", "saliency", "candidates", "relations", "similarity",
             "perplexity", "generate", "selection", "validation_tasks", "validation", "judge", "truth", "report",
             "export", "mixtures"}
REMOVAL = ["removal_masks", "removal_captions", "inpaint", "removal_selection", "removal_export"]


def edits(path: Path) -> set[tuple]:
    frame = pl.read_parquet(path / "data/interim/removal_captions.parquet")
    return {(r["caption_id"], tuple(r["removed"])) for r in frame.iter_rows(named=True)}


def test_g_alpha1_reruns_the_removal_stages_and_fills_only_new_edits(repo):
    path, env = repo
    timed_repro(path, env, "(g0) the whole DAG after (f)")
    assert assert_minimal_edits(path) > 0
    before, pairs = edits(path), metrics(path, "removal_selection")["rows_out"]
    ambiguous = metrics(path, "removal_masks")["rejects"].get("ambiguous_overlap", 0)
    assert ambiguous and pairs  # the synthetic set has partly overlapping objects and makes pairs
    set_param(path, "removal_masks.alpha1", 0.79)  # an overlap in [0.4, 0.79) now removes its class alone
    stages = timed_repro(path, env, "(g1) removal_masks.alpha1 0.4 -> 0.79")
    assert stages[:3] == REMOVAL[:3] and set(REMOVAL) <= set(stages) and not set(stages) & NOUN_SWAP
    assert set(stages) - set(REMOVAL) <= {"evaluate", "datasheet", "gallery"}  # ODmAP and the gallery read the
    # pairs; the datasheet all params
    assert metrics(path, "removal_masks")["rejects"].get("ambiguous_overlap", 0) < ambiguous
    after, filled = edits(path), metrics(path, "inpaint")
    assert after > before  # nothing lost, some removals added
    assert filled["edits_filled"] == len(after - before) and filled["edits_cached"] == len(before)
    set_param(path, "removal_masks.alpha1", 0.4)
    stages = timed_repro(path, env, "(g2) alpha1 back to 0.4")
    assert edits(path) == before
    assert "inpaint" not in stages or metrics(path, "inpaint")["edits_filled"] == 0  # (or DVC's run cache restored it)
    commit(path, env, "alpha1")


def test_h_relations_filter_off_reruns_from_relations_and_renders_only_changed_pairs(repo):
    path, env = repo
    output, window = path / "data/processed/counterfactual_captions.parquet", path / "data/interim/similarity.parquet"
    before, filtered, in_window = pl.read_parquet(output), metrics(path, "relations"), pl.read_parquet(window)
    assert sum(filtered["rejects"].values()) > 0  # the demo captions have WordNet-related fills
    set_param(path, "relations.reject", [])
    stages = timed_repro(path, env, "(h) relations.reject = []", "generate")
    assert stages[:2] == ["relations", "similarity"] and "candidates" not in stages
    assert metrics(path, "relations")["rows_out"] == filtered["rows_in"]  # every fill kept
    assert ("perplexity" in stages) == (not pl.read_parquet(window).equals(in_window))  # DVC: only if it changed
    changed = pl.read_parquet(output).join(before, on=["caption_id", "counterfactual"], how="anti").height
    assert "generate" not in stages or metrics(path, "generate")["pairs_generated"] == changed
    commit(path, env, "relations")


def selected_at(repo: Path, rev: str | None) -> pl.DataFrame:
    """The selected pairs at a git revision (None: the workspace)."""
    from dvc.api import read

    if rev is None:
        return pl.read_parquet(repo / "data/processed/selected.parquet")
    return pl.read_parquet(io.BytesIO(read("data/processed/selected.parquet", repo=str(repo), rev=rev, mode="rb")))


def test_a_failed_exp_run_and_the_readmes_way_back_leave_every_output_as_it_was(repo):
    """`dvc exp run -S similarity.upper=abc` fails in one line at the `params` stage, before any stage: every output,
    lock and metrics file is as it was (DVC removes a stage's outputs before running it). A stage that fails itself
    (its model not on this machine) has removed its outputs; the way back the README gives (its commands, read from
    it) restores every output byte for byte, and `dvc status` says what it said before (the earlier tests leave
    stages to rerun)."""
    path, env = repo
    commit(path, env, "before a failed experiment")
    before, status = outputs(path), sh(path, "dvc", "status", env=env)
    typo = subprocess.run(["dvc", "exp", "run", "-S", "similarity.upper=abc"], cwd=path, env=env,
                          capture_output=True, text=True)
    assert typo.returncode != 0 and "similarity.upper" in typo.stdout + typo.stderr
    assert "Running stage 'params'" in typo.stdout and ran(typo.stdout) == [] and outputs(path) == before
    sh(path, "git", "checkout", "params.yaml", env=env)
    failed = subprocess.run(["dvc", "exp", "run", "-S", "similarity.model.demo.id=models/no_such_model"], cwd=path,
                            env=env, capture_output=True, text=True)
    assert failed.returncode != 0 and "models/no_such_model" in failed.stdout + failed.stderr
    assert ran(failed.stdout)[-1] == "similarity" and not (path / "reports/metrics/similarity.json").exists()
    readme = (ROOT / "README.md").read_text()
    way_back = re.findall(r"`([^`]+)`", readme.split("To get back:")[1].split("\n\n")[0])[:2]
    assert way_back[0].startswith("git checkout") and way_back[1] == "dvc checkout", way_back
    for command in way_back:
        sh(path, *command.split(), env=env)
    assert outputs(path) == before
    assert sh(path, "dvc", "status", env=env) == status
    assert sh(path, "git", "status", "--porcelain", env=env) == ""


def test_the_image_stages_depend_on_the_chosen_backends_code(repo):
    """`dvc.yaml` interpolates `generate.backend` into a dep of generate, selection and truth: with sdxl chosen and
    the lock committed (`dvc commit`, nothing rendered), an edit to sdxl.py stales exactly those three stages and one
    to sd3.py none; sd3, whose code includes a module those stages do not list (joint_p2p.py), is refused in one line
    by the params stage before any stage runs, every output kept. The repo is left as it was."""
    path, env = repo
    commit(path, env, "before switching the backend")
    before, backends = outputs(path), path / "tasks/image/backends"

    def stale() -> set[str]:
        done = subprocess.run(["dvc", "status", "--json"], cwd=path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return set(json.loads(done.stdout))

    try:
        set_param(path, "generate.backend", "sdxl")
        sh(path, "dvc", "commit", "-f", "-q", env=env)
        assert stale() == set()
        for module, expected in (("sdxl.py", {"generate", "selection", "truth"}), ("sd3.py", set())):
            source = (backends / module).read_text()
            (backends / module).write_text(source + "\n# an edit\n")
            assert stale() == expected, module
            (backends / module).write_text(source)
        set_param(path, "generate.backend", "sd3")
        refused = subprocess.run(["dvc", "repro"], cwd=path, env=env, capture_output=True, text=True)
        assert refused.returncode != 0 and "Running stage 'params'" in refused.stdout and ran(refused.stdout) == []
        assert "runs image backend sd3, whose code includes tasks/image/joint_p2p.py" in refused.stdout + refused.stderr
        locks = ("dvc.lock", "demo/dvc.lock")  # what `dvc commit` wrote
        assert {k: v for k, v in outputs(path).items() if k not in locks} == {
            k: v for k, v in before.items() if k not in locks}
    finally:
        sh(path, "git", "checkout", "params.yaml", "dvc.lock", "demo/dvc.lock", "tasks/image/backends", env=env)
    assert outputs(path) == before and sh(path, "git", "status", "--porcelain", env=env) == ""


def test_exp_run_and_dataset_diff(repo):
    path, env = repo
    started = time.monotonic()
    out = sh(path, "dvc", "exp", "run", "-n", "wide", "-S", "similarity.upper=0.95", "report", env=env)
    print(f"(exp) dvc exp run -S similarity.upper=0.95: {time.monotonic() - started:.0f}s, reran {ran(out)}")
    assert ran(out)[:2] == ["similarity", "perplexity"] and "candidates" not in ran(out)
    head, wide = selected_at(path, "HEAD"), selected_at(path, None)  # exp run leaves its results in the workspace
    sh(path, "cfgen", "diff", "HEAD", "wide", env=env)
    pairs = json.loads((path / "reports/diff/HEAD..wide.json").read_text())["pairs"]
    a_ids, b_ids = set(head["caption_id"]), set(wide["caption_id"])
    assert (pairs["a"], pairs["b"]) == (len(a_ids), len(b_ids))
    assert (pairs["added"], pairs["removed"]) == (len(b_ids - a_ids), len(a_ids - b_ids))
    both = head.join(wide, on="caption_id", suffix="_b")
    changed = both.filter((pl.col("counterfactual") != pl.col("counterfactual_b"))
                          | (pl.col("image_o") != pl.col("image_o_b")) | (pl.col("image_c") != pl.col("image_c_b")))
    assert pairs["caption_changed"] + pairs["image_changed"] == changed.height
    assert pairs["unchanged"] == both.height - changed.height
    assert "wide" in (path / "reports/diff/HEAD..wide.md").read_text()
    assert (path / "reports/diff/HEAD..wide.html").read_text().lstrip().startswith("<")
    from tests.browser import page  # the pairs they do not share, as gallery cards of each version

    category = {i: "added" for i in b_ids - a_ids} | {i: "removed" for i in a_ids - b_ids} | {
        i: "caption changed" if c != c_b else "image changed"
        for i, c, c_b in changed.select("caption_id", "counterfactual", "counterfactual_b").iter_rows()}
    cards = [f"{i} {label} · {category[i]}" for i in sorted(category)
             for label, ids in (("HEAD", a_ids), ("wide", b_ids)) if i in ids]
    with page() as tab:
        tab.goto((path / "reports/diff/HEAD..wide/index.html").as_uri())
        assert tab.inner_text("#count") == f"{len(cards)} of {len(cards)} pairs"
        assert tab.locator("article.card").evaluate_all(
            "cs => cs.map(c => c.dataset.captionId + ' ' + c.querySelector('.version').textContent)") == cards[:48]
        assert tab.errors == []


def plain_shell(repo: Path, command: str) -> str:
    """`command` run as a new user runs the README's: bash in the project with `.venv` activated, and nothing of
    make's or the tests' environment (no Prefect API or home, NLTK_DATA, offline flags or PYTHONPATH)."""
    env = {"HOME": os.environ["HOME"], "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    done = subprocess.run(["bash", "-c", f"source .venv/bin/activate && {command}"], cwd=repo, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-8000:]}"
    return done.stdout


def readme_sweep() -> list[str]:
    """The commands of the README's queued-sweep example, as written there."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("\n## Sweeps\n")[1].split("```console\n")[1].split("```")[0]
    return [line.removeprefix("$ ") for line in block.splitlines() if line.startswith("$ ")]


def test_the_readmes_queued_sweep_works_as_written_in_a_plain_shell(repo):
    """The README's sweep, command by command, in a plain shell (`plain_shell`; the project's `.venv` linked in as
    `make setup` would build it): both queued experiments run at once in DVC's temporary copies, on the workspace's
    DVC cache and Prefect result store (the project's `.prefect/storage`, which each copy resolves to the
    workspace's), so together they render each new sample once (the store's records say so: no counter is a DVC
    metric); `dvc exp show` lists both with their metrics and `cfgen diff` writes the comparison."""
    from dvc.api import read

    path, _ = repo
    commands = readme_sweep()
    names = [re.search(r"-n (\S+)", c)[1] for c in commands if c.startswith("dvc exp run --queue")]
    status_at = next(i for i, c in enumerate(commands) if c.startswith("dvc queue status"))
    (path / ".venv").symlink_to(ROOT / ".venv")
    store = path / ".prefect/storage"
    try:
        for command in commands[:status_at]:
            plain_shell(path, command)
        started = time.monotonic()
        while re.search(r"\b(Queued|Running)\b", status := plain_shell(path, commands[status_at])):
            assert time.monotonic() - started < 1500, status
            time.sleep(2)
        print(f"(queue) the README's 2 experiments, -j 2: {time.monotonic() - started:.0f}s\n{status}")
        assert len(names) == 2 and all(re.search(rf"\b{re.escape(n)}\s+.*\bSuccess\b", status) for n in names), status
        shown = [plain_shell(path, command) for command in commands[status_at + 1:]]
    finally:
        (path / ".venv").unlink()
    generate = {name: json.loads(read("reports/metrics/generate.json", repo=str(path), rev=name)) for name in names}
    pairs = generate[names[0]]["pairs"]
    assert pairs == generate[names[1]]["pairs"] > 0
    assert persisted_samples(store) == 4 * pairs  # each never-seen sample once, by either
    header = shown[0].splitlines()[1]  # the columns the README names, no counter among them
    assert all(name in shown[0] for name in names) and "samples_rendered" not in shown[0]
    assert re.search(r"json:unet_evals\s+accepted\s+generate\.steps\.demo\s+selection\.min_image_image", header)
    a, b = names
    assert (path / f"reports/diff/{a}..{b}.md").is_file() and (path / f"reports/diff/{a}..{b}/index.html").is_file()
    assert sh(path, "git", "status", "--porcelain", "reports/diff", env=repo[1]) == ""  # a view, not a result
