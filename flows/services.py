"""Local stand-ins for a team's shared services, to try them on one machine (`make remote`, `make database`) and for
the tests that use them: a WebDAV server holding a DVC remote, a throw-away PostgreSQL cluster holding a Prefect
server's database, and the venv Label Studio runs from (`make labelstudio`: its pins clash with ours).

Invariants: each listens on 127.0.0.1 only, runs exactly as long as its `with` block (or its command, until Ctrl-C),
keeps everything it writes in the folder it is given, and refuses in one line when its program is missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from flows.engine.console import console, stop_on_signals, user_errors
from tasks.core.errors import UserError

HOST = "127.0.0.1"
POSTGRES_USER = "cfgen"  # the cluster's superuser: trust authentication, loopback only
POSTGRES_DATABASE = "prefect"
POSTGRES_BINARIES = tuple(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True))  # Debian's, newest first


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def program(name: str, install: str, folders: tuple[Path, ...] = ()) -> str:
    """`name`'s path on PATH, beside this Python or in `folders`, else a one-line UserError saying how to install it."""
    for path in (None, Path(sys.executable).parent, *folders):
        if found := shutil.which(name, path=None if path is None else str(path)):
            return found
    raise UserError(f"{name} is not installed: {install}")


def last_line(text: str) -> str:
    return (text.strip().splitlines() or ["(no output)"])[-1]


def wait_until_listening(port: int, process: subprocess.Popen, what: str, log: Path, timeout_s: float = 60) -> None:
    """Return once something accepts on `port`; a one-line UserError (with the log's last line) if `process` exits or
    `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UserError(f"{what} exited with code {process.returncode} before listening on {HOST}:{port}: "
                            f"{last_line(log.read_text(errors='replace'))}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            return
        time.sleep(0.1)
    raise UserError(f"{what} did not listen on {HOST}:{port} within {timeout_s:g} s (its log: {log})")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM `process`'s group, then SIGKILL it after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def remote(root: Path, port: int) -> Iterator[str]:
    """A WebDAV server (wsgidav) serving `root` (made when missing) read-write to anyone on loopback; yields the URL
    of a DVC remote there (`dvc remote add -d NAME URL`, the dvc-webdav plug-in). Its log: `root`.log."""
    wsgidav = program("wsgidav", "pip install wsgidav cheroot (`make setup` installs them from requirements.lock)")
    root.mkdir(parents=True, exist_ok=True)
    log = root.with_name(f"{root.name}.log")
    with log.open("w") as out:
        process = subprocess.Popen([wsgidav, "--host", HOST, "--port", str(port), "--root", str(root),
                                    "--auth", "anonymous", "--no-config", "-q"],
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_listening(port, process, "the WebDAV server", log)
        yield f"webdav://{HOST}:{port}/"
    finally:
        stop(process)


def postgres_program(name: str) -> str:
    """A PostgreSQL program's path (on PATH or in Debian's folders), else a one-line UserError."""
    return program(name, "apt-get install postgresql-15 (`make tools` does)", POSTGRES_BINARIES)


def as_postgres(command: list[str]) -> list[str]:
    """`command` as the `postgres` user when this process is root (PostgreSQL refuses to run as root)."""
    if os.geteuid() != 0:
        return command
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise UserError("PostgreSQL will not run as root and there is no `postgres` user: run as another user, or "
                        "install Debian's postgresql-15, which makes one") from None
    return ["runuser", "-u", "postgres", "--", *command]


def run_checked(command: list[str], what: str) -> None:
    """Run `command`; a one-line UserError with its last line of output when it fails."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise UserError(f"{what} failed: {last_line(done.stderr + done.stdout)}")


@contextmanager
def database(folder: Path, port: int) -> Iterator[str]:
    """A PostgreSQL cluster in `folder` (initialised when empty: superuser `cfgen`, trust authentication on loopback,
    database `prefect`) listening on 127.0.0.1:`port`; yields the URL for PREFECT_API_DATABASE_CONNECTION_URL. As
    root it runs as `postgres`, which then owns `folder` (its parents must let that user through)."""
    initdb, pg_ctl, createdb = (postgres_program(name) for name in ("initdb", "pg_ctl", "createdb"))
    fresh = not folder.exists() or not any(folder.iterdir())
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    log = folder.with_name(f"{folder.name}.log")
    if fresh:
        run_checked(as_postgres([initdb, "-D", str(folder), "-U", POSTGRES_USER, "--auth", "trust", "-E", "UTF8"]),
                    f"initdb of {folder}")
    log.touch()
    if os.geteuid() == 0:
        shutil.chown(log, "postgres", "postgres")
    options = f"-p {port} -c listen_addresses={HOST} -k ''"  # TCP only: no socket file, whatever the folder's length
    started = subprocess.run(as_postgres([pg_ctl, "-D", str(folder), "-l", str(log), "-o", options, "-w", "start"]),
                             capture_output=True)
    if started.returncode:
        raise UserError(f"PostgreSQL did not start on {HOST}:{port}: {last_line(log.read_text(errors='replace'))}")
    try:
        if fresh:
            run_checked([createdb, "-h", HOST, "-p", str(port), "-U", POSTGRES_USER, POSTGRES_DATABASE], "createdb")
        yield f"postgresql+asyncpg://{POSTGRES_USER}@{HOST}:{port}/{POSTGRES_DATABASE}"
    finally:
        subprocess.run(as_postgres([pg_ctl, "-D", str(folder), "-m", "fast", "-w", "stop"]), capture_output=True)


@contextmanager
def prefect_server(database_url: str, home: Path, port: int) -> Iterator[str]:
    """`prefect server start` (no UI) over `database_url` (PostgreSQL, or
    `sqlite+aiosqlite:///FILE`), its PREFECT_HOME `home`, on 127.0.0.1:`port`; yields its API URL once it answers.
    Its log: `home`.log."""
    from flows.engine.process import PrefectUnavailable
    from flows.engine.server import check_reachable

    home.mkdir(parents=True, exist_ok=True)
    log = home.with_name(f"{home.name}.log")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}, "PREFECT_HOME": str(home),
           "PREFECT_API_DATABASE_CONNECTION_URL": database_url, "PREFECT_UI_ENABLED": "0"}
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port",
                                    str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"http://{HOST}:{port}/api"
    try:
        wait_until_listening(port, process, "the Prefect server", log, timeout_s=180)
        deadline = time.monotonic() + 180
        while True:
            try:
                check_reachable(url)  # answers as a Prefect API does (its database migrated)
                break
            except PrefectUnavailable:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise UserError(f"the Prefect server on {url} never answered: "
                                    f"{last_line(log.read_text(errors='replace'))}") from None
                time.sleep(0.5)
        yield url
    finally:
        stop(process)


LABELSTUDIO_LOCK = Path(__file__).resolve().parents[1] / "requirements-labelstudio.lock"


def labelstudio_venv(lock: Path = LABELSTUDIO_LOCK) -> Path:
    """`label-studio` of the venv built from `lock`'s content, under the user's cache (one per content of the lock:
    every clone and run of this machine shares it), built under a file lock when none is complete (a killed build is
    redone). A build that fails is one UserError line."""
    from filelock import FileLock

    venvs = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cfgen" / "labelstudio"
    venv = venvs / hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    complete = venv / "complete"
    venvs.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{venv}.lock"):
        if not complete.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            try:
                subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, text=True)
                subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "-r", lock],
                               check=True, capture_output=True, text=True, timeout=1800)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
                output = err.stderr if isinstance(err.stderr, str) else ""
                raise UserError(f"cannot build {venv} from {lock.name}: {last_line(output) or err}") from None
            complete.touch()
    return venv / "bin" / "label-studio"


services = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])
Folder = Annotated[Path, typer.Argument(help="where it keeps everything it writes")]


def serve_until_interrupted(service, folder: Path, port: int, then: str) -> None:
    """Run `service` until Ctrl-C or SIGTERM, either of which stops it cleanly."""
    stop_on_signals()
    with user_errors(), service(folder.absolute(), port) as url:
        console.print(f"{url}\n{then.format(url=url)}\n(Ctrl-C stops it)", highlight=False, soft_wrap=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


@services.command("remote")
def remote_command(folder: Folder, port: int = 8765) -> None:
    """Serve FOLDER as a DVC remote over WebDAV on loopback until Ctrl-C."""
    serve_until_interrupted(remote, folder, port, "dvc remote add -d local {url}; dvc push")


@services.command("database")
def database_command(folder: Folder, port: int = 5433) -> None:
    """Run a PostgreSQL cluster in FOLDER on loopback for a Prefect server until Ctrl-C."""
    serve_until_interrupted(database, folder, port, "PREFECT_API_DATABASE_CONNECTION_URL={url} prefect server start")


@services.command("labelstudio")
def labelstudio_command() -> None:
    """Build (once per content of requirements-labelstudio.lock) the venv Label Studio runs from; print its
    `label-studio`."""
    with user_errors():
        console.print(str(labelstudio_venv()), highlight=False, soft_wrap=True)


if __name__ == "__main__":
    services()
