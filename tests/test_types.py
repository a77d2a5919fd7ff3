"""`tasks/` and `flows/` type-check clean under mypy (`pyproject.toml`'s `[tool.mypy]`: the pydantic plugin, and the
model libraries whose lazily built modules mypy cannot read left as Any): `params.<section>` is typed
(`tasks.stages.Params`), so a misspelt section or field is an error before any run."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_tasks_and_flows_type_check_clean():
    done = subprocess.run([sys.executable, "-m", "mypy", "tasks", "flows"], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found")


def test_a_misspelt_section_or_field_is_a_type_error(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from tasks.stages import Params\n\n\ndef f(params: Params) -> None:\n"
                     "    params.generate.steps + 1\n    params.generat\n    params.generate.stepz\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), str(probe)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    errors = [line for line in done.stdout.splitlines() if line.startswith(f"{probe}:") and ": error:" in line]
    assert [line.split(": error: ")[1].split(";")[0].split("  [")[0] for line in errors] == [
        '"Params" has no attribute "generat"', '"GenerateParams" has no attribute "stepz"'], done.stdout
