"""Each run's timings and disk, to balance the two workers and keep a small CI disk from filling
(`benchmarks/suite.py` prints them): every test's time (setup, call and teardown), the worker that ran it and the
bytes in use on the temporary folder's disk when its last report arrived, written when the run ends to `TIMINGS` by
the process that saw every report (the controller under xdist, else the one process)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

TIMINGS = Path(__file__).resolve().parents[1] / ".pytest_cache" / "cfgen-timings.json"
_seconds: dict[tuple[str, str], float] = {}  # (worker, test id) -> seconds
_disk: dict[tuple[str, str], tuple[float, int]] = {}  # (worker, test id) -> (time, bytes in use on the temp disk)
_started, _disk_at_start = time.time(), shutil.disk_usage(tempfile.gettempdir()).used


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # the worker that sent it, in the xdist controller
    key = (node.gateway.id if node is not None else os.environ.get("PYTEST_XDIST_WORKER", "main"), report.nodeid)
    _seconds[key] = _seconds.get(key, 0.0) + report.duration
    _disk[key] = time.time(), shutil.disk_usage(tempfile.gettempdir()).used


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or not _seconds:
        return  # a worker: the controller has its reports too
    TIMINGS.parent.mkdir(exist_ok=True)
    tests = [{"worker": worker, "test": test, "seconds": round(seconds, 3), "ended": _disk[worker, test][0],
              "disk_used": _disk[worker, test][1]} for (worker, test), seconds in sorted(_seconds.items())]
    TIMINGS.write_text(json.dumps({"started": _started, "wall_s": round(time.time() - _started, 1),
                                   "disk_used_at_start": _disk_at_start,
                                   "exit": int(session.exitstatus), "tests": tests}, indent=1) + "\n")
