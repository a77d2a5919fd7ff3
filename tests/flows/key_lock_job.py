"""A process running one unit task through `in_store` (the path every unit task takes): `python -m
tests.flows.key_lock_job STORE LOG SECONDS` appends its pid to LOG when its body runs, sleeps SECONDS inside it, and
prints the result."""

from __future__ import annotations

import os
import sys
import time
from prefect import flow

from flows.engine.caching import in_store, unit_task
from tasks.core import keys
from tests.conftest import project_params


def computed(content: str, log: str, seconds: float) -> str:
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return content.upper()


@unit_task
def slow_unit(unit: keys.Unit, content: str, log: str, seconds: float) -> str:
    return computed(content, log, seconds)


@flow
def job(store: str, log: str, seconds: float) -> str:
    params = project_params(f"engine.result_storage={store}")
    unit = keys.unit("key-lock-job", [in_store], {})  # tests are no code entries
    return in_store(slow_unit, params)(unit, "the content", log, seconds)


if __name__ == "__main__":
    print(job(sys.argv[1], sys.argv[2], float(sys.argv[3])))
