"""StageProgress: thread-safe counting + tqdm bar outside a run; progress artifact + run-logger lines inside one."""

from __future__ import annotations

import io
import re
import threading
import time
import warnings

import pytest

from flows.engine.progress import StageProgress, artifact_key, format_eta

LINE = re.compile(r"work: (\d+)/(\d+) samples \((\d+)%\), ETA (\?|\d+s|\d+m\d\ds|\d+h\d\dm\d\ds)$")


@pytest.mark.parametrize("seconds, text", [
    (252, "4m12s"), (0, "0s"), (59.6, "1m00s"), (42, "42s"), (3725, "1h02m05s"), (None, "?"), (float("inf"), "?"),
])
def test_eta_formatting(seconds, text):
    assert format_eta(seconds) == text


def test_artifact_keys_are_lowercase_letters_numbers_dashes():
    assert artifact_key("generate") == "generate-progress"
    assert artifact_key("Caption_Stages 2") == "caption-stages-2-progress"


def advance_from_threads(progress, threads: int, each: int) -> None:
    def work():
        for _ in range(each):
            progress(1)  # the plain-callable form, as the stage functions receive it

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def test_outside_a_run_threads_sum_and_the_bar_shows_done_over_total(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. Prefect's "artifact creation outside of a flow run" FutureWarning
        with StageProgress("sites", total=4000, unit="rows") as progress:
            advance_from_threads(progress, threads=8, each=500)
    assert progress.done == 4000
    err = capsys.readouterr().err
    assert "sites" in err and "4000/4000" in err and "rows" in err


def test_bar_to_a_file_grows_total_late_and_shows_an_eta():
    out = io.StringIO()
    with StageProgress("candidates", total=3, unit="shards", file=out) as progress:
        progress.advance(2)
        progress.add_total(2)
        assert progress.total == 5
        progress.advance(3)
    text = out.getvalue()
    assert "5/5" in text and "candidates" in text
    assert re.search(r"<\d\d:\d\d", text)  # tqdm's [elapsed<remaining] ETA field


def test_empty_stage_has_no_bar_until_it_learns_its_total():
    out = io.StringIO()
    with StageProgress("perplexity", total=0, file=out) as progress:
        assert out.getvalue() == "" and progress.percent() == 100.0
        progress.add_total(4)
        progress.advance(4)
    assert "4/4" in out.getvalue()


def test_status_line_has_done_total_percent_and_eta():
    with StageProgress("work", total=400, unit="samples", file=io.StringIO()) as progress:
        assert progress.status().endswith("0/400 samples (0%), ETA ?")
        progress.advance(120)
        assert LINE.match(progress.status()).groups()[:3] == ("120", "400", "30")


# -- inside a real flow run ----------------------------------------------------------------------------------------


def run_progress_flow(samples: int, interval: float):
    from prefect import flow, task
    from prefect.cache_policies import NONE
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect.utilities.annotations import unmapped

    @task(cache_policy=NONE)
    def pair(progress: StageProgress, n: int) -> int:
        for _ in range(n):
            time.sleep(0.005)
            progress(1)
        return n

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=4))
    def work_flow() -> int:
        with StageProgress("work", total=samples, unit="samples", interval=interval,
                           file=io.StringIO()) as progress:
            futures = pair.map(progress=unmapped(progress), n=[samples // 4] * 4)
            total = sum(f.result() for f in futures)
        assert progress.done == samples
        return total

    state = work_flow(return_state=True)
    assert state.is_completed(), state
    return state.result(), state.state_details.flow_run_id


def run_logs(flow_run_id, needle: str, at_least: int = 1, timeout: float = 15.0) -> list[str]:
    """The run's log messages containing `needle`, once the API has at least `at_least` (logs ship in batches)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=5)
    deadline = time.monotonic() + timeout
    while True:
        with get_client(sync_client=True) as client:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])),
                                    limit=200, offset=0)
        found = [log.message for log in logs if needle in log.message]
        if len(found) >= at_least or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def flow_run_artifacts(flow_run_id, key: str) -> list:
    """The run's artifacts with `key`. A raw filter request: the client's `read_artifacts` (and `Artifact.get`) send
    nulls for unset fields, which this server version (FastAPI 0.153) answers with 422."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import Artifact

    body = {"artifacts": {"key": {"any_": [key]}, "flow_run_id": {"any_": [str(flow_run_id)]}},
            "limit": 10, "offset": 0, "sort": "CREATED_DESC"}
    with get_client(sync_client=True) as client:
        return Artifact.model_validate_list(client.request("POST", "/artifacts/filter", json=body).json())


def test_inside_a_flow_run_the_artifact_ends_at_100_and_the_logger_reports_eta(prefect_server):
    done, flow_run_id = run_progress_flow(samples=200, interval=0.02)
    assert done == 200

    artifacts = flow_run_artifacts(flow_run_id, "work-progress")
    assert len(artifacts) == 1
    assert artifacts[0].type == "progress" and artifacts[0].data == 100.0
    assert artifacts[0].description.startswith("work: 200/200 samples (100%) in ")

    lines = [m for m in run_logs(flow_run_id, "ETA") if LINE.match(m)]
    assert lines, "no throttled `done/total ... ETA` line reached the run's logs"
    done_counts = [int(LINE.match(m).group(1)) for m in lines]
    assert all(0 < d <= 200 for d in done_counts) and all(LINE.match(m).group(2) == "200" for m in lines)
    assert len(lines) < 200  # throttled, not one line per sample
    assert run_logs(flow_run_id, "200/200 samples (100%) in ")


def test_a_failing_prefect_api_warns_once_and_the_stage_completes(prefect_server, monkeypatch):
    import prefect.artifacts

    calls = []

    def broken_update(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("API unavailable")

    monkeypatch.setattr(prefect.artifacts, "update_progress_artifact", broken_update)
    done, flow_run_id = run_progress_flow(samples=200, interval=0.0)
    assert done == 200
    assert len(calls) == 1  # after the failure the Prefect side is off: no retries per sample
    warnings_logged = run_logs(flow_run_id, "progress reporting to Prefect failed")
    assert len(warnings_logged) == 1 and "API unavailable" in warnings_logged[0]
