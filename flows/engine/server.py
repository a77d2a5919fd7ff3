"""The Prefect API a `cfgen` command talks to, and its lifetime.

Invariant: **no Prefect server outlives the command that started it.**

- `prefect_api()` uses `PREFECT_API_URL` when it is set (and fails in one line if nothing answers there); otherwise it
  starts ONE `TemporaryServer` for the whole command (killed by the kernel if this process dies) and stops it when
  the block exits. Enter it from the main thread: the death signal follows the starting *thread*.
- `flows.engine.console.stop_on_signals()` turns SIGTERM into `SystemExit(143)` (Ctrl-C: KeyboardInterrupt) so `with`
  blocks and atexit hooks run (the server is stopped cleanly, results and logs are flushed) instead of the process
  dying on the spot; a process still waiting 5 s later (a task in flight) ends then.
- `run_with_server(command)` runs another command (`dvc repro`) under one such server: every process it starts
  inherits `PREFECT_API_URL`, so they all share one server instead of one temporary server each.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from prefect.settings import (PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings,
                              temporary_settings)

from flows.engine.process import PrefectUnavailable, death_signal
from tasks.core.errors import UserError
from tasks.core.io import check_folder
from tasks.core.writing import OutputError

if TYPE_CHECKING:  # prefect.server takes seconds to import: only a command that starts a server imports it
    from flows.engine.temporary_server import TemporaryServer

HEALTH_TIMEOUT_S = 3.0

def check_reachable(url: str, timeout: float = HEALTH_TIMEOUT_S) -> None:
    """Raise PrefectUnavailable (one line) unless `{url}/health` answers as a Prefect API does: a success with a JSON
    body (another service's 404 or HTML page is no Prefect API)."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/health", timeout=timeout)
    except httpx.HTTPError:
        raise PrefectUnavailable(f"Prefect API at {url} is not reachable: start the server or unset "
                                 "PREFECT_API_URL") from None
    try:
        response.raise_for_status()
        response.json()
    except (httpx.HTTPError, ValueError):
        raise PrefectUnavailable(f"PREFECT_API_URL {url} does not answer as a Prefect API ({url.rstrip('/')}/health: "
                                 f"{response.status_code} {response.reason_phrase}): point it at a Prefect server's "
                                 "/api or unset it") from None


def check_home() -> None:
    """Raise PrefectUnavailable (one line) unless PREFECT_HOME (its database, results and logs) is a folder this user
    can write, made when missing (Prefect itself only warns as it is imported: `flows.engine.console` hides that)."""
    home = Path(get_current_settings().home)
    try:
        check_folder(home)
        home.mkdir(parents=True, exist_ok=True)
    except (OutputError, OSError) as err:
        raise PrefectUnavailable(f"PREFECT_HOME {home} is no folder this user can write ({err}): set PREFECT_HOME "
                                 "to one") from None


def lasting_api() -> str:
    """`PREFECT_API_URL` when it is set and answers (a server that outlives this command, as a schedule needs), else
    PrefectUnavailable (one line)."""
    url = PREFECT_API_URL.value()
    if not url:
        raise PrefectUnavailable("serve needs a Prefect server that outlives it to keep the schedule: start one "
                                 "(`prefect server start`) and set PREFECT_API_URL")
    check_reachable(url)
    return url


@contextmanager
def _use_api(url: str, server: TemporaryServer) -> Iterator[None]:
    """Point this process (settings context, threads without one, Prefect's own ephemeral lookups) and the
    processes it starts (environment) at `url`; on exit flush Prefect's log/event workers while it still answers."""
    import prefect.context
    from prefect.server.api.server import SubprocessASGIServer

    previous_env = os.environ.get("PREFECT_API_URL")
    previous_default = SubprocessASGIServer._instances.get(None)
    os.environ["PREFECT_API_URL"] = url
    SubprocessASGIServer._instances[None] = server  # code that would start its own ephemeral server reuses ours
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(temporary_settings(updates={PREFECT_API_URL: url}))
            global_context = getattr(prefect.context, "_temporary_global_settings_context", None)
            if global_context is not None:  # threads started with an empty context read the global one
                stack.enter_context(global_context(prefect.context.get_settings_context()))
            try:
                yield
            finally:
                _drain_workers()
    finally:
        if SubprocessASGIServer._instances.get(None) is server:
            if previous_default is None:
                SubprocessASGIServer._instances.pop(None, None)
            else:
                SubprocessASGIServer._instances[None] = previous_default
        if previous_env is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous_env


def _drain_workers() -> None:
    """Send buffered flow-run logs and events before the server goes away (as prefect_test_harness does)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    with contextlib.suppress(Exception):
        APILogWorker.drain_all(timeout=5)
    with contextlib.suppress(Exception):
        EventsWorker.drain_all(timeout=5)


@contextmanager
def prefect_api(timeout: float = 60) -> Iterator[str]:
    """Yield the Prefect API URL this command uses (PREFECT_HOME checked first): PREFECT_API_URL if set (it must
    answer), else a temporary server started for the whole block and stopped when it exits (or killed by the kernel
    if this process dies). Its flow runs send no heartbeats: Prefect's heartbeat thread sleeps in whole seconds and
    holds each flow run's end until it wakes (0.85 s of a caption stage's 3.5), and no automation here watches them;
    a served deployment's runs (`cfgen serve`) keep them."""
    check_home()
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        configured = PREFECT_API_URL.value()
        if configured:
            check_reachable(configured)
            yield configured
            return
        from flows.engine.temporary_server import TemporaryServer

        server = TemporaryServer()
        server.start(timeout)
        try:
            with _use_api(server.api_url, server):
                yield server.api_url
        finally:
            server.stop()


def _terminal_delivers_sigint_to(child: subprocess.Popen[Any]) -> bool:
    """True when a Ctrl-C on our controlling terminal already reached `child` (same foreground process group)."""
    try:
        same_group = os.getpgid(child.pid) == os.getpgrp()
    except OSError:
        return False
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                return same_group and os.tcgetpgrp(fd) == os.getpgrp()
    return False


def run_with_server(command: list[str], timeout: float = 60) -> int:
    """Run `command` (an executable on PATH, checked before the server starts) with PREFECT_API_URL pointing at one
    Prefect API (see prefect_api) and return its exit code (128+N when it died of signal N). SIGTERM and SIGINT are
    forwarded to it; the server is stopped afterwards. The command gets PR_SET_PDEATHSIG too: if this process is
    killed, it is told to stop rather than run on without its server. Call from the main thread."""
    if not command:
        raise ValueError("run_with_server: no command given")
    if shutil.which(command[0]) is None:
        raise UserError(f"with-server: {shlex.quote(command[0])} is no executable command (not on PATH, or not executable)")
    with prefect_api(timeout) as url:
        child = subprocess.Popen(command, env={**os.environ, "PREFECT_API_URL": url}, preexec_fn=death_signal())

        def forward(signum: int, frame: Any) -> None:
            if signum == signal.SIGINT and _terminal_delivers_sigint_to(child):
                return  # the terminal sent Ctrl-C to the child as well: do not send it twice
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = child.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if child.poll() is None:  # we are leaving abnormally: do not leave the command behind either
                child.terminate()
                try:
                    child.wait(10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
    return 128 - code if code < 0 else code
