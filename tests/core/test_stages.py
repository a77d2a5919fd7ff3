"""The manifest (`tasks.stages`: `STAGES` and `Sections`): every DVC stage is declared once and loads alone, every
params section is named once; the DAG order, the caption steps, the CLI's commands, the params each command assembles
and `dvc.yaml`'s stages derive from it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml

from tasks.config import load_params
from tasks.core.code import entry
from tasks.core.edits import EDIT_TYPES
from tasks.core.io import rejects_path
from tasks.core.params import SHARED
from tasks.stages import Stage, TableStage, caption_steps, section_names, stages, steps
from tests.conftest import ROOT
from tools.tracing import code_deps


def test_the_data_stages_form_one_chain_in_dag_order_and_every_stage_follows_what_it_reads():
    order = list(steps())
    assert order == ["ingest", *caption_steps(), "generate", "selection"]
    assert caption_steps() == ("sites", "saliency", "candidates", "relations", "similarity", "perplexity")
    for before, after in zip(order, order[1:]):
        assert steps()[after].after == before and steps()[after].input is not None
    assert all(isinstance(s, Stage | TableStage) and s.name == name for name, s in stages().items())
    walked = list(stages())
    assert all(walked.index(need) < walked.index(name) for name, s in stages().items() for need in s.needs)


def test_a_declaration_names_its_logic_and_its_keys_read_it_by_name():
    sites = stages()["sites"]
    from tasks.text import edits
    from tasks.text import sites as module

    assert sites.logic is module and sites.help.startswith("Edit sites: where each edit type")
    assert sites.entries[:2] == ("tasks.text.sites:run", "tasks.text.sites:load_models") == (
        entry(module.run), entry(module.load_models))
    assert sites.entries[2:] == tuple(entry(edits.function(name, "sites")) for name in EDIT_TYPES)


def test_the_manifest_names_each_section_and_stage_once_and_a_name_it_lacks_is_one_line():
    """Each `Sections` entry is a `Section` class of its own module, imported with no other section's module; every
    non-shared key of `params.yaml` is one of them; an undeclared stage or section is refused in one line."""
    from tasks.core.errors import UserError
    from tasks.core.params import Section
    from tasks.stages import STAGES, section, stage, step, table

    assert [*SHARED, *section_names()] == list(yaml.safe_load((ROOT / "params.yaml").read_text()))
    assert len({declared.name for declared in STAGES}) == len(STAGES) == len(stages())
    probe = ("import sys\nfrom tasks.stages import section\nsection('relations')\n"
             "print(sorted(m for m in sys.modules if m.endswith('.params') and m.startswith('tasks.')))")
    found = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert found.stdout.splitlines()[-1] == "['tasks.core.params', 'tasks.text.params']", found.stderr[-2000:]
    for name in section_names():
        assert issubclass(section(name), Section) and section(name).__module__.startswith("tasks."), name
    with pytest.raises(ValueError, match="no params section named nowhere is declared in tasks.stages.Sections"):
        section("nowhere")
    with pytest.raises(UserError, match="no stage named nowhere: a stage is declared in tasks.stages.STAGES"):
        stage("nowhere")
    assert step("generate") is stages()["generate"] and table("truth") is stages()["truth"]
    with pytest.raises(ValueError, match="stage truth is a table stage, not a data stage"):
        step("truth")
    with pytest.raises(ValueError, match="stage generate is a data stage, not a table stage"):
        table("generate")


def test_a_declared_entry_naming_nothing_fails_where_it_is_declared(tmp_path):
    """A renamed function: the declaration fails on import, in one line naming the entry, before any key is built."""
    with pytest.raises(ValueError, match="code entry tasks.text.sites:render_sites: tasks.text.sites defines no "):
        replace(stages()["sites"], code=("tasks.text.sites:render_sites",))
    with pytest.raises(ValueError, match="tasks.text.nowhere defines no run"):
        replace(stages()["relations"], module="tasks.text.nowhere")


def test_reading_every_declaration_imports_no_stage_logic_and_no_model_library():
    probe = ("import sys\nfrom tasks.stages import stages\nhelps = [s.help for s in stages().values()]\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'diffusers', "
             "'nltk', 'open_clip', 'prefect', 'flows') or m.startswith(('tasks.text.', 'tasks.image.'))))")
    found = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert found.stdout.splitlines()[-1] == "[]", found.stderr[-2000:]


def test_every_table_stage_and_nothing_else_has_hooks_and_each_imports_its_own_flow_only():
    """`flows.hooks.HOOKS` has one entry per declared table stage; importing it imports no flow; a stage's entry
    imports its own flow module (and no other stage's); a stage without one is one line naming where it goes."""
    from flows.hooks import HOOKS, hooks

    assert set(HOOKS) == {name for name, s in stages().items() if isinstance(s, TableStage)}
    probe = ("import sys, flows.hooks as h\nbefore = set(sys.modules)\nh.hooks('mixtures')\n"
             "print(sorted(m for m in set(sys.modules) - before if m.startswith('flows.')))\n"
             "print(sorted(m for m in before if m.startswith('flows.')))")
    found = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    loaded, imported = found.stdout.splitlines()[-2:]
    assert imported == "['flows.hooks']", found.stderr[-2000:]
    assert loaded == "['flows.engine', 'flows.engine.console', 'flows.release', 'flows.release.mixtures']"
    for name in HOOKS:
        runs = hooks(name)
        assert callable(runs.flow) and all(h is None or callable(h) for h in (runs.check, runs.show)), name
    assert hooks("truth").flow.__module__ == "flows.truth"
    assert getattr(hooks("gallery").check, "__module__", None) == "flows.release.gallery"
    with pytest.raises(ValueError, match="table stage nowhere has no hooks: its entry goes in flows.hooks.HOOKS"):
        hooks("nowhere")


def test_every_declared_stage_is_a_dvc_stage_and_a_cli_command_and_nothing_else_is():
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert set(stages()) == set(dvc)
    listed = subprocess.run([sys.executable, "-m", "flows.cli", "--help"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "200"}, timeout=120).stdout
    cli = {line.strip("│ ").split()[0] for line in listed.splitlines() if line.startswith("│ ") and line.strip("│ ")}
    assert all(dvc[name]["cmd"].split()[:2] == ["cfgen", s.command] for name, s in stages().items())
    assert {s.command for s in stages().values()} <= cli


def _data_edges(dvc: dict, paths) -> dict[str, set[str]]:
    """Stage -> the other stages whose outputs (outs, metrics, plots) its `dvc.yaml` deps name."""
    def resolved(entry) -> str:
        entry = entry if isinstance(entry, str) else next(iter(entry))
        return re.sub(r"\$\{paths\.(\w+)\}", lambda m: str(getattr(paths, m.group(1))), entry)

    made = {resolved(out): name for name, s in dvc.items()
            for out in (*s.get("outs", []), *s.get("metrics", []), *s.get("plots", []))}
    return {name: {made[d] for d in map(resolved, s.get("deps", [])) if made.get(d, name) != name}
            for name, s in dvc.items()}


def test_dvc_yaml_is_checked_against_the_manifest():
    """Each stage's `dvc.yaml` entry follows exactly the stages its declaration says it reads (`after`: the stages
    whose outputs are its deps, and `params`, whose stamp every other stage depends on) and declares params of exactly
    the sections its command assembles (the shared ones aside; `params` and the datasheet, which assemble every
    section, depend on the whole file)."""
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    edges = _data_edges(dvc, load_params(ROOT / "params.yaml", [], ()).paths)
    for name, declared in stages().items():
        assert edges[name] == set(declared.needs), name
        listed = [p if isinstance(p, str) else next(iter(p)) for p in dvc[name].get("params", [])]
        if declared.sections is None:
            assert listed == ["params.yaml"], name
            continue
        assert {key.split(".")[0] for key in listed} - set(SHARED) == set(declared.sections), name
    assert set(section_names()) - set(stages()) == {"tiny_models", "synthetic_coco"}  # each a stage's or a tool's


def test_each_dvc_stage_runs_what_its_declaration_says():
    """A data stage's DVC entry runs `cfgen NAME` from the `paths` entry of the stage it reads (`after`) into its own
    (`data`), depends on the first and writes the second with its rejects beside it, and declares its params section
    (ingest reads none); a paths command's entry runs `cfgen NAME` alone."""
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    paths = load_params(ROOT / "params.yaml", []).paths
    for name, declared in steps().items():
        entry, source = dvc[name], steps()[declared.after].data if declared.after else "captions_source"
        assert entry["cmd"].startswith(f"cfgen {name} ${{paths.{source}}} ${{paths.{declared.data}}} "), name
        assert f"${{paths.{source}}}" in entry["deps"], name
        rejects = rejects_path(getattr(paths, declared.data)).as_posix()
        assert entry["outs"][:2] == [f"${{paths.{declared.data}}}", rejects], name
        assert declared.after is None or name in entry["params"], name
    assert all(dvc[name]["cmd"] == f"cfgen {s.command}" for name, s in stages().items() if isinstance(s, TableStage))


def test_a_step_commands_help_comes_from_its_declaration_and_imports_no_stage_logic():
    probe = ("import sys\nfrom flows.cli import app\ntry:\n    app(['relations', '--help'])\nexcept SystemExit:\n"
             "    pass\nprint(sorted(m for m in sys.modules if m.startswith(('tasks.text.', 'tasks.image.', 'torch'))\n"
             "             and not m.endswith('.params')))")  # every section is in `Params`; no stage's logic
    shown = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "200"}).stdout
    assert shown.splitlines()[-1] == "[]"
    assert "Lexical-relation filter" in shown  # the first paragraph of tasks/text/relations.py's docstring


SHARED_CODE = {  # what every stage runs: the CLI and its console, params, schemas, stage I/O, the manifest
    "flows/cli.py", "flows/engine/console.py", "tasks/__init__.py", "tasks/config.py", "tasks/core/errors.py",
    "tasks/core/fields.py", "tasks/core/io.py", "tasks/core/params.py", "tasks/core/schemas.py",
    "tasks/core/source.py", "tasks/core/writing.py", "tasks/stages/__init__.py",
    "tasks/stages/kinds.py"}


def test_the_code_every_dvc_stage_shares_is_the_cli_params_schemas_and_io():
    """The code deps all 25 DVC stages share (as the DVC test's traced run holds them to what each imports): an edit
    to a model pre-flight, the metrics table, the edit types or the model specs stales only the stages that run them.
    A module that runs nothing but its docstring (`tasks/core/__init__.py`) is in no stage's deps."""
    code = {file: [{d for d in stage["deps"] if code_deps.is_code(d)}
                   for stage in yaml.safe_load((ROOT / file).read_text())["stages"].values()]
            for file in code_deps.FILES}
    assert len(code["dvc.yaml"]) == 25 and set.intersection(*code["dvc.yaml"]) == SHARED_CODE
    listed = set.union(*code["dvc.yaml"], *code["demo/dvc.yaml"])
    assert all(code_deps.runs_code(ROOT / d) for d in listed)
    assert "tasks/core/__init__.py" not in listed and not code_deps.runs_code(ROOT / "tasks/core/__init__.py")


def test_each_dvc_stage_reads_in_one_screen_and_its_code_deps_are_rewritten_alone():
    """`dvc.yaml`'s deps are in the form `tools.tracing.code_deps` writes after a traced run, which changes a
    stage's code deps and nothing else; each stage's entry fits one screen (55 lines)."""
    for file in code_deps.FILES:
        text = (ROOT / file).read_text()
        assert code_deps.rewrite(text, {}) == text, f"{file} is not in canonical form"
        assert max(len(stage.splitlines()) for stage in text.split("\nstages:\n")[1].split("\n\n")) <= 55
    text = (ROOT / "dvc.yaml").read_text()
    before = yaml.safe_load(text)["stages"]
    after = yaml.safe_load(code_deps.rewrite(text, {"sites": {"tasks/text/sites.py", "flows/text.py"}}))["stages"]
    assert after["sites"]["deps"] == [d for d in before["sites"]["deps"] if not code_deps.is_code(d)] + [
        "flows/text.py", "tasks/text/sites.py"]
    assert {**after, "sites": before["sites"]} == before


def test_the_cli_lists_each_lazily_loaded_group_by_the_names_the_group_defines():
    """`flows.cli.GROUPS` names the tools' and the DAG's commands without importing them; each group defines
    exactly those, and `cfgen NAME --help` of each loads its group."""
    from pkgutil import resolve_name

    from typer.main import get_group

    from flows.cli import GROUPS

    for group, names in GROUPS.items():
        assert set(get_group(resolve_name(group)).list_commands(None)) == set(names), group
    shown = subprocess.run([sys.executable, "-m", "flows.cli", "toy-world", "train", "--help"], cwd=ROOT,
                           capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, timeout=120).stdout
    assert "--resume" in shown and "--min-snr-gamma" in shown


IMAGE_SECTIONS = {"generate", "selection"}  # the params sections `tasks/image/params.py` declares


def test_imports_follow_reads_no_stage_lists_an_image_section_it_does_not_read():
    """A stage whose command reads no image section has `tasks/image/params.py` in no code dep (as the traced run holds
    them to its imports): the pre-flight and every shared helper import a section's module only for the commands
    that read it, so an image param's default stales no caption stage; a caption stage lists no image module."""
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, declared in stages().items():
        if declared.sections is not None and not IMAGE_SECTIONS & set(declared.sections):
            assert "tasks/image/params.py" not in dvc[name]["deps"], name
    for name in ("ingest", *caption_steps()):
        assert not [d for d in dvc[name]["deps"] if d.startswith("tasks/image/")], name


def test_the_params_stage_refuses_a_dvc_yaml_lacking_the_chosen_backends_code(tmp_path):
    """The image stages name the chosen backend's module through `${generate.backend}` and list the rest of its code:
    sd1 and sdxl pass; sd3 (its joint attention in joint_p2p.py, which no stage of the demo runs) is one line naming
    the stage and the file; a stage that drops the shared part (sd1.py, p2p.py) is refused under every backend."""
    from flows.params import BACKEND_DEP, check_backend_deps
    from tasks.core.errors import UserError

    dvc = ROOT / "dvc.yaml"
    for backend in ("sd1", "sdxl"):
        check_backend_deps(load_params(ROOT / "params.yaml", [f"generate.backend={backend}"]), dvc)
    with pytest.raises(UserError, match="stage generate runs image backend sd3, whose code includes "
                                        "tasks/image/joint_p2p.py, which its deps lack"):
        check_backend_deps(load_params(ROOT / "params.yaml", ["generate.backend=sd3"]), dvc)
    stages = yaml.safe_load(dvc.read_text())["stages"]
    assert all(BACKEND_DEP in stages[name]["deps"] for name in ("generate", "selection", "truth"))
    stages["truth"]["deps"].remove("tasks/image/p2p.py")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    for backend in ("sd1", "sdxl"):
        with pytest.raises(UserError, match="stage truth runs image backend .*tasks/image/p2p.py"):
            check_backend_deps(load_params(ROOT / "params.yaml", [f"generate.backend={backend}"]),
                               tmp_path / "dvc.yaml")
