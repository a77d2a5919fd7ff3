"""Each key of a result store is computed once across every process sharing the store (`caching.in_store`:
SERIALIZABLE over `KeyLocks`), and a holder killed mid-task strands nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.engine.caching import KeyLocks
from tests.conftest import ROOT


def start(store: Path, log: Path, seconds: float) -> subprocess.Popen:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": PREFECT_API_URL.value()}
    return subprocess.Popen([sys.executable, "-m", "tests.flows.key_lock_job", str(store), str(log), str(seconds)],
                            cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def result(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return out.strip().splitlines()[-1]


def runs(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def wait_for_a_run(log: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not runs(log):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.2)


def test_two_processes_on_one_key_compute_it_once_and_both_get_its_result(tmp_path, prefect_server):
    store, log = tmp_path / "store", tmp_path / "computed"
    first = start(store, log, 6)
    wait_for_a_run(log, first)  # the first holds the key, inside its body
    second = start(store, log, 6)
    assert result(first) == result(second) == "THE CONTENT"
    assert runs(log) == [str(first.pid)]  # the second waited, then read the first's result


def test_a_holder_killed_mid_task_strands_nothing(tmp_path, prefect_server):
    store, log = tmp_path / "store", tmp_path / "computed"
    killed = start(store, log, 600)
    wait_for_a_run(log, killed)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    again = start(store, log, 0)
    assert result(again) == "THE CONTENT"
    assert runs(log) == [str(killed.pid), str(again.pid)]
    assert result(start(store, log, 0)) == "THE CONTENT" and len(runs(log)) == 2  # now cached


def test_key_locks_hold_across_processes_and_refuse_a_stranger(tmp_path):
    locks = KeyLocks(tmp_path / "locks")
    assert locks.wait_for_lock("k", 0) and not locks.is_locked("k")
    assert locks.acquire_lock("k", "me")
    probe = ("from pathlib import Path; from flows.engine.caching import KeyLocks; "
             f"l = KeyLocks(Path({str(tmp_path / 'locks')!r})); "
             "print(l.is_locked('k'), l.wait_for_lock('k', 0.3), l.acquire_lock('k', 'them', 0.3))")
    other = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert other.stdout.split() == ["True", "False", "False"]
    with pytest.raises(ValueError, match="does not hold"):
        locks.release_lock("k", "them")
    assert locks.is_lock_holder("k", "me") and locks.acquire_lock("k", "me", 0)  # a holder may ask again
    locks.release_lock("k", "me")
    other = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert other.stdout.split() == ["False", "True", "True"]
