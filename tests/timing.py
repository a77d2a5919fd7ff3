"""Each run's timings, to balance the two workers (`benchmarks/suite.py` prints them): every test's time (setup, call
and teardown) and the worker that ran it, written when the run ends to `TIMINGS` by the process that saw every
report (the controller under xdist, else the one process)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

TIMINGS = Path(__file__).resolve().parents[1] / ".pytest_cache" / "cfgen-timings.json"
_seconds: dict[tuple[str, str], float] = {}  # (worker, test id) -> seconds
_started = time.time()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # the worker that sent it, in the xdist controller
    key = (node.gateway.id if node is not None else os.environ.get("PYTEST_XDIST_WORKER", "main"), report.nodeid)
    _seconds[key] = _seconds.get(key, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or not _seconds:
        return  # a worker: the controller has its reports too
    TIMINGS.parent.mkdir(exist_ok=True)
    tests = [{"worker": worker, "test": test, "seconds": round(seconds, 3)}
             for (worker, test), seconds in sorted(_seconds.items())]
    TIMINGS.write_text(json.dumps({"started": _started, "wall_s": round(time.time() - _started, 1),
                                   "exit": int(session.exitstatus), "tests": tests}, indent=1) + "\n")
