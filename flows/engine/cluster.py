"""A Dask cluster as the engine of a stage's tasks (`engine.dask_address`), checked before its first task.

- Every task holds `engine.task_resources` on its worker (`dask.annotate`): a worker started with `--resources
  GPU=1` runs one task at a time, whatever its thread count, so a GPU renders one batch at a time.
- Before the first task is submitted: some worker offers those resources (else every task would wait forever), it
  finds the NLTK data this process found (given the absolute folders, `tasks.core.environment.find_nltk_data`) and,
  under the paper profile, every worker sees exactly one GPU unless every model pins its device
  (`tasks.core.loading.gpu_pinning_problem`); each failure is one line naming the worker.
- When the flow run ends, every worker releases the models its tasks loaded (`tasks.core.loading.release_models`,
  by `Client.run`), so a worker holds the models of the stage it runs, not of every stage it ran; those of a run
  killed mid-stage go when the next stage on the cluster ends.
- The workers report their task runs to the Prefect API: a loopback API with a scheduler on another host is refused
  before anything runs (`check_api_reachable`).
- An address where no scheduler answers is one line within SCHEDULER_TIMEOUT_S (`check_scheduler`), before the
  command starts a Prefect server (distributed alone retries for 30 s, then fails inside the flow).
- A scheduler lost mid-run is one line (`scheduler_loss_is_one_line`): what finished is persisted, and the same
  command resumes from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import dask
from prefect_dask import DaskTaskRunner

from tasks.core.environment import find_nltk_data, nltk_found
from tasks.core.errors import UserError
from tasks.core.loading import gpu_pinning_problem, release_models

SCHEDULER_TIMEOUT_S = 5.0


def is_loopback(address: str) -> bool:
    """Whether a URL's or `tcp://host:port` address's host is this machine only."""
    host = urlparse(address).hostname or ""
    if host == "localhost":
        return True
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return False


def check_api_reachable(dask_address: str, api_url: str) -> None:
    """Refuse a Prefect API that workers on other hosts could not reach (their task runs and results would be
    lost to it)."""
    if is_loopback(api_url) and not is_loopback(dask_address):
        raise UserError(f"engine.dask_address {dask_address} is another host, but the Prefect API {api_url} listens on "
                        "loopback only, where its workers cannot report: start `prefect server start --host 0.0.0.0` "
                        "and set PREFECT_API_URL=http://<this host>:4200/api")


def check_scheduler(address: str, timeout: float = SCHEDULER_TIMEOUT_S) -> None:
    """Refuse `engine.dask_address` unless a Dask scheduler there completes distributed's handshake within `timeout`
    seconds; a TCP port that refuses is refused at once (distributed's `connect` retries it until `timeout`). Call it
    where no event loop runs (the command's main thread)."""
    from distributed.comm import connect
    from distributed.comm.addressing import parse_address, parse_host_port

    async def handshake() -> None:  # bounded as a whole: a listener that accepts and never answers would not be
        await (await connect(address, timeout=timeout)).close()

    try:
        scheme, location = parse_address(address)
        if scheme == "tcp":
            socket.create_connection(parse_host_port(location), timeout=timeout).close()
        asyncio.run(asyncio.wait_for(handshake(), timeout))
    except Exception as err:  # refused, timed out, not an address, or a server that speaks another protocol
        # (distributed then reads a garbage frame length: MemoryError)
        reason = (str(err) or type(err).__name__).splitlines()[0]
        raise UserError(f"no Dask scheduler answers at engine.dask_address {address} ({reason}): start one "
                        "(`dask scheduler`) or unset engine.dask_address") from None


@contextlib.contextmanager
def scheduler_loss_is_one_line(address: str) -> Iterator[None]:
    from distributed.client import FutureCancelledError

    try:
        yield
    except FutureCancelledError as lost:
        if getattr(lost, "reason", None) != "scheduler-connection-lost":
            raise
        raise UserError(f"lost the Dask scheduler at {address} mid-run: every sample and shard finished so far is "
                        "persisted; rerun the same command to resume from them") from None


class ClusterTaskRunner(DaskTaskRunner):
    """prefect-dask's runner on an existing scheduler, every task holding `resources` on its worker; the cluster's
    workers are checked once, when the first task is submitted (the client connects then)."""

    address: str  # an existing scheduler's, always given

    def __init__(self, address: str, resources: dict[str, float], devices_pinned: bool | None) -> None:
        super().__init__(address=address)
        self.resources, self.devices_pinned = resources, devices_pinned  # devices_pinned None: no GPU check
        self._checked = False

    def duplicate(self) -> ClusterTaskRunner:
        return type(self)(self.address, self.resources, self.devices_pinned)

    def __eq__(self, other: object) -> bool:
        return (super().__eq__(other) and isinstance(other, ClusterTaskRunner)
                and (self.resources, self.devices_pinned) == (other.resources, other.devices_pinned))

    def __exit__(self, *exc: Any) -> None:
        """Release the stage's models on every live worker (when it ran a task), then disconnect: a worker that died
        meanwhile is passed over (its models died with it). A scheduler lost meanwhile has no worker to release on,
        and its error stays the run's one line (`scheduler_loss_is_one_line`)."""
        if self._client is not None:
            with contextlib.suppress(OSError):  # distributed's CommClosedError and connect timeouts
                self._client.run(release_models, on_error="ignore")
        super().__exit__(*exc)

    def check_workers(self) -> None:
        workers = self.client.scheduler_info()["workers"]
        offered = [w for w, info in workers.items()
                   if all(info.get("resources", {}).get(k, 0) >= v for k, v in self.resources.items())]
        if workers and not offered:
            wanted = " ".join(f"{k}={v:g}" for k, v in self.resources.items())
            raise UserError(f"no worker of {self.address} offers engine.task_resources {wanted}: start workers with "
                            f"`dask worker {self.address} --resources {wanted.replace(' ', ',')}` (or set "
                            "engine.task_resources: {} for CPU workers)")
        problems = [self.client.run(find_nltk_data, nltk_found(), on_error="ignore")]  # a worker dead but not yet
        if self.devices_pinned is not None:  # known to the scheduler runs nothing: passed over, not the run's error
            problems.append(self.client.run(gpu_pinning_problem, self.devices_pinned, on_error="ignore"))
        if wrong := [f"Dask worker {worker} {problem}" for found in problems
                     for worker, problem in sorted(found.items()) if problem]:
            raise UserError("; ".join(wrong))

    def submit(self, task: Any, parameters: dict[str, Any], wait_for: Any = None, dependencies: Any = None) -> Any:
        if not self._checked:
            self.check_workers()
            self._checked = True
        with dask.annotate(resources=self.resources) if self.resources else contextlib.nullcontext():
            return super().submit(task, parameters, wait_for, dependencies)
