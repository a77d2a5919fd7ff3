"""flows.engine.server: no Prefect server outlives the command that started it (real processes, real servers, no
mocks)."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from flows.engine.server import PrefectUnavailable, prefect_api, run_with_server
from flows.engine.temporary_server import TemporaryServer
from tests.conftest import ROOT, project_params

DRIVER = textwrap.dedent("""
    import time
    from prefect import flow
    from flows.engine.console import stop_on_signals
    from flows.engine.server import prefect_api

    @flow
    def trivial():
        return 1

    stop_on_signals()
    with prefect_api() as url:
        print(url, flush=True)
        trivial()
        print("ready", flush=True)
        time.sleep(600)
""")


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory) -> Path:
    """One PREFECT_HOME for the drivers: the first server migrates its database, the next ones start faster."""
    return tmp_path_factory.mktemp("prefect-home")


def _env(prefect_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return {**env, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(prefect_home), **extra}


def _readline(proc: subprocess.Popen, deadline: float, stderr: Path) -> str:
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=0.2):
                line = proc.stdout.readline()
                if line:
                    return line.strip()
            if proc.poll() is not None:
                break
    proc.kill()
    pytest.fail(f"driver gave no line (exit {proc.poll()}); stderr:\n{stderr.read_text()[-3000:]}")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_until(predicate, timeout: float) -> float:
    """Seconds until predicate() held; fails after timeout."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"not within {timeout} s: {predicate.__doc__}")
        time.sleep(0.1)
    return time.monotonic() - start


def _start_driver(tmp_path: Path, prefect_home: Path):
    """The driver, its API URL and the pid of its temporary server, once a flow has run against it."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    stderr = tmp_path / "driver.stderr"
    proc = subprocess.Popen([sys.executable, str(script)], env=_env(prefect_home), stdout=subprocess.PIPE,
                            stderr=stderr.open("w"), text=True)
    deadline = time.monotonic() + 90
    url = _readline(proc, deadline, stderr)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/api")
    assert _readline(proc, deadline, stderr) == "ready"
    descendants = psutil.Process(proc.pid).children(recursive=True)
    # one server, and the direct child is uvicorn itself (no wrapper whose grandchild would escape the signal)
    assert len(descendants) == 1, [p.cmdline() for p in descendants]
    server = descendants[0]
    assert server.ppid() == proc.pid and server.cmdline()[1:3] == ["-m", "uvicorn"]
    return proc, url, server.pid


def _port(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


@pytest.mark.slow
def test_sigterm_stops_command_and_its_server(tmp_path, prefect_home):
    proc, url, server = _start_driver(tmp_path, prefect_home)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 128 + signal.SIGTERM  # stop_on_signals: SystemExit, so `with` blocks ran
    exited = time.monotonic() - start

    def server_gone():
        """the server process and its port are gone"""
        return not _alive(server) and not _port_open(_port(url))

    _wait_until(server_gone, 10)
    assert exited < 10
    assert "Stopping temporary server" in (tmp_path / "driver.stderr").read_text()


@pytest.mark.slow
def test_sigkill_of_command_kills_its_server(tmp_path, prefect_home):
    proc, url, server = _start_driver(tmp_path, prefect_home)
    proc.kill()
    proc.wait(timeout=5)

    def server_gone():
        """PR_SET_PDEATHSIG: the orphaned server got SIGTERM and exited"""
        return not _alive(server) and not _port_open(_port(url))

    _wait_until(server_gone, 10)


def test_unreachable_api_url_fails_fast_in_one_line():
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/api"
        start = time.monotonic()
        with temporary_settings(updates={PREFECT_API_URL: url}), pytest.raises(PrefectUnavailable) as error:
            with prefect_api():
                pytest.fail("yielded an unreachable API")
    assert time.monotonic() - start < 5
    assert str(error.value) == (f"Prefect API at {url} is not reachable: start the server or unset "
                                "PREFECT_API_URL")


def test_a_stage_command_on_a_running_server_never_imports_the_server_code():
    """prefect.server costs seconds to import, in every stage process of a `dvc repro`: only a command that starts its
    own server may import it."""
    modules = "flows.cli, flows.engine.server, flows.text, flows.image.generate, flows.image.selection, " \
              "flows.release.report, flows.release.export, flows.pipeline"
    script = f"import sys, {modules}; print(sorted(m for m in sys.modules if m.startswith('prefect.server.api')))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_commands_flow_runs_send_no_heartbeat_and_end_at_once(prefect_server, monkeypatch):
    """Prefect's heartbeat thread sleeps in whole seconds and holds each flow run's end until it wakes: a command's
    flow runs (under `prefect_api`) start none; outside it, Prefect's default sends one."""
    from prefect import flow
    from prefect.flow_engine import FlowRunEngine

    beats = []
    monkeypatch.setattr(FlowRunEngine, "_emit_flow_run_heartbeat", lambda self, *a: beats.append(self.flow_run.id))

    @flow
    def noop() -> int:
        return 1

    with prefect_api():
        assert noop() == 1
    assert beats == []
    assert noop() == 1
    assert len(beats) == 1


@pytest.mark.slow
def test_server_that_cannot_start_fails_in_one_line_with_its_last_stderr_line(tmp_path, prefect_home):
    script = "\n".join([
        "from flows.engine.server import PrefectUnavailable, prefect_api",
        "try:",
        "    with prefect_api(timeout=60): pass",
        "except PrefectUnavailable as e:",
        "    print(e)",
    ])
    # a database nobody listens on: the server's lifespan startup fails
    env = _env(prefect_home, PREFECT_SERVER_DATABASE_CONNECTION_URL="postgresql+asyncpg://u:p@127.0.0.1:1/db")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=90)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith("temporary Prefect server on http://127.0.0.1:")
    assert "exited with code" in lines[0] and "ConnectionRefusedError" in lines[0]
    assert "uvicorn" not in {p.name() for p in psutil.Process().children(recursive=True)}


@pytest.mark.slow
def test_run_with_server_shares_one_server_and_stops_it(monkeypatch, capfd):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    command = [sys.executable, "-c", textwrap.dedent("""
        import os, urllib.request, psutil
        urllib.request.urlopen(os.environ['PREFECT_API_URL'] + '/health')
        url = os.environ['PREFECT_API_URL']
        port = url.rsplit(':', 1)[1].split('/')[0]  # not the suite's own session server, also our parent's child
        siblings = psutil.Process(os.getppid()).children()
        print('ok', url, *[p.pid for p in siblings if 'uvicorn' in p.cmdline() and port in p.cmdline()])
    """)]
    with temporary_settings(restore_defaults={PREFECT_API_URL}):  # even after a test that set one
        assert run_with_server(command) == 0
    out = capfd.readouterr().out.split()
    assert out[0] == "ok", out
    url, servers = out[1], [int(pid) for pid in out[2:]]
    assert len(servers) == 1
    assert not _alive(servers[0]) and not _port_open(_port(url))
    assert "PREFECT_API_URL" not in os.environ


ONE_FLOW = textwrap.dedent("""
    from prefect import flow
    from flows.engine.server import prefect_api

    @flow
    def trivial():
        return 1

    with prefect_api(timeout=90):
        assert trivial() == 1
    print("ok", flush=True)
""")


@pytest.mark.slow
def test_commands_started_together_on_a_fresh_prefect_home_all_succeed(tmp_path):
    """Concurrent first runs (`dvc queue start -j 2`) share one new database: without the set-up lock, a server whose
    migrations overlap another's dies ("table ... already exists", "duplicate column name")."""
    script = tmp_path / "one_flow.py"
    script.write_text(ONE_FLOW)
    env = _env(tmp_path / "fresh-home", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    procs = []
    for n in range(3):  # 1 s apart: where the second's migrations start depends on the machine
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
        time.sleep(1.0 if n < 2 else 0)
    results = [proc.communicate(timeout=180) for proc in procs]
    for proc, (out, err) in zip(procs, results):
        assert (proc.returncode, out.strip()) == (0, "ok"), err[-3000:]
        assert "Traceback" not in err, err[-3000:]


@pytest.mark.parametrize("scheduler, api, refused", [
    ("tcp://10.1.2.3:8786", "http://127.0.0.1:4200/api", True),
    ("tcp://10.1.2.3:8786", "http://localhost:4200/api", True),
    ("tcp://10.1.2.3:8786", "http://10.1.2.4:4200/api", False),
    ("tcp://127.0.0.1:8786", "http://127.0.0.1:4200/api", False),  # a cluster on this machine
])
def test_a_loopback_prefect_api_is_refused_for_a_scheduler_on_another_host(scheduler, api, refused):
    """Before any connection: the flow's workers on other hosts could not report to it."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.engine.sharding import task_runner
    from tasks.core.errors import UserError

    params = project_params(f"engine.dask_address={scheduler}")
    with temporary_settings(updates={PREFECT_API_URL: api}):
        if not refused:
            assert task_runner(params).address == scheduler
            return
        with pytest.raises(UserError) as error:
            task_runner(params)
    assert str(error.value).startswith(f"engine.dask_address {scheduler} is another host, but the Prefect API {api}")


def test_what_a_server_says_once_it_is_being_stopped_stays_off_the_commands_stderr(capfd):
    """The tee of a temporary server's stderr: shown while it runs; once `stop()` has begun (a flush of its event
    queue cut short prints a long traceback) only kept in `stderr_tail`, where a failed start reads its last line."""
    server = TemporaryServer()
    server._tee_stderr(io.BytesIO(b"a real server error\n"))
    server.stop()  # never started: only marks it as stopping
    server._tee_stderr(io.BytesIO(b"Error flushing events (attempt 1/3)\nTraceback (most recent call last):\n"))
    err = capfd.readouterr().err
    assert "a real server error" in err and "flushing" not in err and "Traceback" not in err
    assert list(server.stderr_tail)[-2:] == ["Error flushing events (attempt 1/3)",
                                             "Traceback (most recent call last):"]


IN_FLIGHT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import tasks.text.relations as relations

    def run(frame, params, models=None):  # a shard that takes two minutes
        Path(sys.argv[1]).write_text("started")
        time.sleep(120)

    relations.run = run
    from flows.cli import app
    app(["relations", sys.argv[2], sys.argv[3]])
""")


@pytest.mark.slow
def test_ctrl_c_with_a_task_in_flight_ends_the_command_and_its_server_within_seconds(tmp_path, prefect_home):
    """Ctrl-C (SIGINT) while a shard's task runs on a worker thread: the command does not wait for it (it would for
    two minutes) but ends with 130 within `STOP_GRACE_S` and a margin, saying how to resume, its server gone and no
    output written."""
    from flows.engine.console import STOP_GRACE_S
    from tasks.core.schemas import CANDIDATES
    from tests.flows.test_cli import one_row_parquet

    one_row_parquet(tmp_path / "candidates.parquet", CANDIDATES)
    started, script = tmp_path / "started", tmp_path / "in_flight.py"
    script.write_text(IN_FLIGHT)
    proc = subprocess.Popen([sys.executable, str(script), str(started), str(tmp_path / "candidates.parquet"),
                             str(tmp_path / "out.parquet")], env=_env(prefect_home), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not started.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
        time.sleep(0.2)
    servers = [p.pid for p in psutil.Process(proc.pid).children(recursive=True) if "uvicorn" in p.cmdline()]
    interrupted = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=STOP_GRACE_S + 20) == 128 + signal.SIGINT
    assert time.monotonic() - interrupted < STOP_GRACE_S + 10
    assert "rerun the command to resume" in proc.stderr.read()
    assert servers
    _wait_until(lambda: not any(_alive(pid) for pid in servers), 10)  # the kernel's death signal, or its stop
    assert not (tmp_path / "out.parquet").exists()
