"""The CPU code paths (`tasks.config.CPU_NUMERICS`): `cfgen` pins them before any tensor, a user's own choice stays
and is keyed, and a process at another instruction set says so in one line (a Dask worker's check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.config import CPU_NUMERICS
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif("avx2" not in Path("/proc/cpuinfo").read_text().split(),
                                reason="the pinned path needs an x86-64 CPU with AVX2")
SET_UP = "from tasks.config import use_project_environment; use_project_environment(); import torch; "


def printed(code: str, **env: str) -> list[str]:
    """The lines `code` prints in a fresh interpreter whose environment has no CPU-path variable but `env`."""
    clean = {k: v for k, v in os.environ.items() if k not in CPU_NUMERICS} | env
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True,
                         check=True)
    return run.stdout.splitlines()


def test_cfgen_pins_avx2_before_any_tensor_and_keeps_the_users_choice():
    assert printed(SET_UP + "import os; print(torch.backends.cpu.get_cpu_capability(), "
                   "os.environ['MKL_ENABLE_INSTRUCTIONS'])") == ["AVX2 AVX2"]
    assert printed(SET_UP + "print(torch.backends.cpu.get_cpu_capability())",
                   ATEN_CPU_CAPABILITY="default") == ["DEFAULT"]


def test_a_process_at_another_instruction_set_is_one_line():
    """As a Dask worker started with another setting (or that ran torch before the cluster check, when pinning is too
    late): it says so, and how to restart it."""
    same, other = printed("from flows.engine.cluster import cpu_path_problem; "
                          "print(repr(cpu_path_problem('DEFAULT'))); print(cpu_path_problem('AVX2'))",
                          ATEN_CPU_CAPABILITY="default")
    assert same == "None"
    assert other.startswith("runs torch's CPU kernels at DEFAULT, this run at AVX2") and \
        "restart it with ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 in its" in other, other


def test_a_cpu_unit_is_keyed_by_its_instruction_set():
    """A unit on the CPU keys the instruction set its process computes at: the same in two pinned processes, another
    where the user chose another one (its bits differ, so its results never mix with the pinned ones)."""
    code = ("from tasks.core.keys import Unit; from tasks.core.specs import ModelSpec; "
            "print(Unit('u', (), 'code', 'shared', (ModelSpec(id='m', device='cpu'),)).digest('input'))")
    pinned, again, other = printed(code), printed(code), printed(code, ATEN_CPU_CAPABILITY="default")
    assert pinned == again != other
