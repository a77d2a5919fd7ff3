"""A temporary Prefect server that dies with the command that started it.

`TemporaryServer` is Prefect's own `SubprocessASGIServer` (the same `python -m uvicorn` command, port range and
`stop()`) with the uvicorn process as our direct child, started with Linux `prctl(PR_SET_PDEATHSIG, SIGTERM)`: the
kernel sends it SIGTERM when the thread that started it dies, however it dies (SIGKILL and OOM included), so it
cannot be re-parented and left running. Start it from the main thread: the death signal follows the starting thread.

Servers that share a database (one PREFECT_HOME: `dvc queue start -j 2`, two shells) start one at a time: each holds
a file lock beside the database until it answers, so its set-up (Alembic migrations, block registration) never races
another's on a fresh database ("table ... already exists").
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import filelock
import httpx
import prefect
import sqlalchemy
from prefect.server.api.server import SubprocessASGIServer, subprocess_server_logger
from prefect.settings import get_current_settings
from pydantic import SecretStr

from flows.engine.process import PrefectUnavailable, death_signal


def setup_lock_path() -> Path:
    """The lock a server holds while it sets up its database: beside the SQLite file, else in PREFECT_HOME."""
    settings = get_current_settings()
    connection_url = cast(SecretStr, settings.server.database.connection_url)  # the settings fill in a default
    url = sqlalchemy.engine.make_url(connection_url.get_secret_value())
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(f"{url.database}.cfgen-setup.lock")
    return Path(settings.home) / "cfgen-server-setup.lock"


@contextmanager
def database_setup_lock(timeout: float) -> Iterator[None]:
    """Hold `setup_lock_path()` (waiting at most `timeout` s for another command's server to come up)."""
    path = setup_lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with filelock.FileLock(path, timeout=max(timeout, 0)):
            yield
    except filelock.Timeout:
        raise PrefectUnavailable(f"another command's Prefect server held {path} for {timeout:g} s while starting: "
                                 "retry, or share one server with `cfgen with-server`") from None


class TemporaryServer(SubprocessASGIServer):
    """Prefect's temporary server (same uvicorn command, port range and stop()), as a child that dies with us.

    Differences from `SubprocessASGIServer.start`: the child gets PR_SET_PDEATHSIG, its own session (a terminal
    Ctrl-C reaches cfgen, which then stops the server after its flows are finalised), stderr is tee'd so a failed
    start can say why (and not shown once it is being stopped: its shutdown noise is not the command's), a dead child
    fails the start at once instead of after the whole timeout, and it starts under `database_setup_lock`.
    """

    _instances: dict[int | None, SubprocessASGIServer] = {}  # not Prefect's: never handed to its own callers

    def __init__(self, port: int | None = None):
        super().__init__(port)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self._tee: threading.Thread | None = None
        self._stopping = False

    def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
        # The same command and environment as SubprocessASGIServer._run_uvicorn_command (prefect 3.8).
        # Beside them: no telemetry, wherever the command runs (the project's prefect.toml says so only in its root).
        server_env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
                      "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent),
             "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "error", "--lifespan", "on"],
            env={**os.environ, **server_env, **get_current_settings().to_environment_variables(exclude_unset=True)},
            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=death_signal(), start_new_session=True)
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
                if self._stopping:  # what a server being stopped says (a flush of its event queue cut short, ...)
                    continue  # is not the command's: kept in stderr_tail only
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
        with database_setup_lock(deadline - time.monotonic()):
            self._start(deadline, timeout)

    def _start(self, deadline: float, timeout: float | None) -> None:
        for attempt in range(3):
            self.port = self.find_available_port() if attempt or self.port is None else self.port
            self.stderr_tail.clear()
            self._stopping = False
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
                if cast(subprocess.Popen, self.server_process).poll() is not None:  # `_start` started it
                    return False
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{self.api_url}/health").status_code == 200:
                        return True
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        atexit.unregister(self.stop)
        self._stopping = True
        super().stop()
        if self._tee is not None:  # the child is gone: its stderr ends; read the last lines before going on
            self._tee.join(timeout=2)
