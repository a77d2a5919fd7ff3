"""The Prefect API a `cfgen` command talks to, and its lifetime.

Invariant: **no Prefect server outlives the command that started it.**

- `prefect_api()` uses `PREFECT_API_URL` when it is set (and fails in one line if nothing answers there); otherwise it
  starts ONE temporary server for the whole command (Prefect's own `SubprocessASGIServer`, i.e. a `python -m uvicorn`
  child) and stops it when the block exits. The uvicorn process is the direct child (no wrapper, no grandchild) and
  is started with Linux `prctl(PR_SET_PDEATHSIG, SIGTERM)`: the kernel sends it SIGTERM when the thread that started
  it dies, however it dies (SIGKILL and OOM included), so it cannot be re-parented and left running.
  Enter it from the main thread: the death signal follows the starting *thread*.
- `flows.console.stop_on_sigterm()` turns SIGTERM into `SystemExit(143)` so `with` blocks and atexit hooks run (the
  server is stopped cleanly, results and logs are flushed) instead of the process dying on the spot.
- `run_with_server(command)` runs another command (`dvc repro`) under one such server: every process it starts
  inherits `PREFECT_API_URL`, so they all share one server instead of one temporary server each.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import prefect
from prefect.server.api.server import SubprocessASGIServer, subprocess_server_logger
from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

from tasks.core.errors import UserError

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
HEALTH_TIMEOUT_S = 3.0


class PrefectUnavailable(UserError):
    """No Prefect API to talk to; the message is one line meant for the user."""


def _death_signal(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive `sig` when its parent (thread) dies; None off Linux.

    libc and `prctl` are resolved here, in the parent, so the forked child only makes the call.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
            os._exit(127)
        if os.getppid() != parent:  # the parent died between fork() and prctl(): nobody will signal us
            os._exit(128 + sig)

    return preexec


class TemporaryServer(SubprocessASGIServer):
    """Prefect's temporary server (same uvicorn command, port range and stop()), as a child that dies with us.

    Differences from `SubprocessASGIServer.start`: the child gets PR_SET_PDEATHSIG, its own session (a terminal
    Ctrl-C reaches cfgen, which then stops the server after its flows are finalised), stderr is tee'd so a failed
    start can say why, a dead child fails the start at once instead of after the whole timeout.
    """

    _instances: dict[int | None, SubprocessASGIServer] = {}  # not Prefect's: never handed to its own callers

    def __init__(self, port: int | None = None):
        super().__init__(port)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self._tee: threading.Thread | None = None

    def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
        # The same command and environment as SubprocessASGIServer._run_uvicorn_command (prefect 3.8).
        server_env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent),
             "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "error", "--lifespan", "on"],
            env={**os.environ, **server_env, **get_current_settings().to_environment_variables(exclude_unset=True)},
            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_death_signal(), start_new_session=True)
        self._tee = threading.Thread(target=self._tee_stderr, args=(process.stderr,), daemon=True,
                                     name=f"prefect-server-{process.pid}-stderr")
        self._tee.start()
        return process

    def _tee_stderr(self, stream) -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                line = raw.decode(errors="replace")
                if line.strip():
                    self.stderr_tail.append(line.strip())
                with contextlib.suppress(Exception):  # our stderr may be closed at exit; keep draining the pipe
                    sys.stderr.write(line)

    def _failure(self, why: str) -> PrefectUnavailable:
        """Stop the server; an error ending with its last line on stderr, passing over uvicorn's closing
        "Application startup failed. Exiting." to the exception it follows."""
        self.stop()
        lines = [line for line in self.stderr_tail if "Application startup failed" not in line]
        last = lines[-1] if lines else (self.stderr_tail[-1] if self.stderr_tail else "(nothing on stderr)")
        return PrefectUnavailable(f"temporary Prefect server on {self.address} {why}: {last}")

    def start(self, timeout: float | None = 60) -> None:  # type: ignore[override]
        if self.running:
            return
        deadline = time.monotonic() + (timeout or 60)
        for attempt in range(3):
            self.port = self.find_available_port() if attempt or self.port is None else self.port
            self.stderr_tail.clear()
            subprocess_server_logger.info(f"Starting temporary server on {self.address} for this command")
            self.server_process, self.running = self._run_uvicorn_command(), True
            atexit.register(self.stop)
            try:
                if self._wait_healthy(deadline):
                    return
            except BaseException:
                self.stop()
                raise
            code = self.server_process.returncode
            port_taken = code is not None and not self.is_port_available(self.port)
            if not port_taken or time.monotonic() >= deadline:  # a bind race (another process took the port): retry
                raise self._failure(f"exited with code {code}" if code is not None else
                                    f"did not come up within {timeout:g} s")
            self.stop()
        raise self._failure("could not bind a free port")

    def _wait_healthy(self, deadline: float) -> bool:
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.server_process.poll() is not None:
                    return False
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{self.api_url}/health").status_code == 200:
                        return True
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        atexit.unregister(self.stop)
        super().stop()
        if self._tee is not None:  # the child is gone: its stderr ends; read the last lines before going on
            self._tee.join(timeout=2)


def check_reachable(url: str, timeout: float = HEALTH_TIMEOUT_S) -> None:
    """Raise PrefectUnavailable (one line) unless `{url}/health` answers."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/health", timeout=timeout)
    except httpx.HTTPError:
        response = None
    if response is None or response.status_code >= 500:
        raise PrefectUnavailable(f"Prefect API at {url} is not reachable: start the server or unset PREFECT_API_URL")


@contextmanager
def _use_api(url: str, server: SubprocessASGIServer) -> Iterator[None]:
    """Point this process (settings context, threads without one, Prefect's own ephemeral lookups) and the
    processes it starts (environment) at `url`; on exit flush Prefect's log/event workers while it still answers."""
    import prefect.context

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
    """Yield the Prefect API URL this command uses: PREFECT_API_URL if set (it must answer), else a temporary
    server started for the whole block and stopped when it exits (or killed by the kernel if this process dies)."""
    configured = PREFECT_API_URL.value()
    if configured:
        check_reachable(configured)
        yield configured
        return
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
    """Run `command` with PREFECT_API_URL pointing at one Prefect API (see prefect_api) and return its exit code
    (128+N when it died of signal N). SIGTERM and SIGINT are forwarded to it; the server is stopped afterwards.
    The command gets PR_SET_PDEATHSIG too: if this process is killed, it is told to stop rather than run on
    without its server. Call from the main thread."""
    if not command:
        raise ValueError("run_with_server: no command given")
    with prefect_api(timeout) as url:
        child = subprocess.Popen(command, env={**os.environ, "PREFECT_API_URL": url}, preexec_fn=_death_signal())

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
