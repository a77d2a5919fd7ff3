"""Progress of a long stage: done/total and an ETA on the terminal and, inside a flow run, in the Prefect UI.

    with StageProgress("generate", total=pairs * n_samples, unit="samples") as progress:
        generate.run(..., progress=progress)        # plain stage code calls progress(n): a Callable[[int], None]

- terminal: a tqdm bar on stderr (or `file=`) with done/total, rate and ETA; no bar while total == 0.
- Prefect UI (only when entered inside a flow or task run): a progress artifact keyed `{stage}-progress`, updated at
  most every `interval` seconds and once more at exit with the final percentage, and at the same throttled pace one
  run-logger line such as `generate: 120/400 samples (30%), ETA 4m12s`.

`advance` may be called from any thread (the workers of Prefect's ThreadPoolTaskRunner); the throttled Prefect
calls happen on whichever thread crosses the interval, outside the counter lock, so other workers never wait on the
API. A failing Prefect side (API down, bad response) never breaks the stage: one warning, then terminal only.
Counts reach this object only from threads of the flow's own process (a Dask worker's calls would stay there).
`tasks/` never imports this module; it receives the plain callable.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from typing import IO, Any, cast
from uuid import UUID

from tqdm import tqdm

fallback_logger = logging.getLogger(__name__)


def format_eta(seconds: float | None) -> str:
    """Seconds as `42s`, `4m12s` or `1h04m12s`; `?` when unknown (nothing done yet)."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    s = max(0, round(seconds))
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def artifact_key(stage: str) -> str:
    """`{stage}-progress` reduced to what Prefect allows in a key: lowercase letters, numbers, dashes."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", f"{stage}-progress".lower())).strip("-")


class StageProgress:
    """Context manager counting units of work done out of `total` (which may grow: `add_total`)."""

    def __init__(self, stage: str, total: int, unit: str = "rows", interval: float = 10.0,
                 file: IO[str] | None = None) -> None:
        self.stage, self.unit, self.interval = stage, unit, interval
        self._file = file
        self._done, self._total = 0, int(total)
        self._lock = threading.Lock()          # counters and the bar
        self._report_lock = threading.Lock()   # one Prefect report at a time
        self._bar: tqdm | None = None
        self._start = self._last_report = time.monotonic()
        self._logger: Any = None               # the run logger, when entered inside a run
        self._artifact_id: UUID | None = None
        self._prefect_ok = False
        self._open = False

    # -- counting ------------------------------------------------------------------------------------------------

    @property
    def done(self) -> int:
        return self._done

    @property
    def total(self) -> int:
        return self._total

    def advance(self, n: int = 1) -> None:
        """Count `n` more units done (thread-safe); reports to Prefect when `interval` has passed."""
        with self._lock:
            self._done += n
            if self._bar is not None:
                self._bar.update(n)
            due = self._prefect_ok and time.monotonic() - self._last_report >= self.interval
        if due:
            self._report(final=False)

    __call__ = advance

    def add_total(self, n: int) -> None:
        """Grow the total by `n` (for stages that learn their work late)."""
        with self._lock:
            self._total += n
            if self._bar is not None:
                self._bar.total = self._total
                self._bar.refresh()
            elif self._open:
                self._bar = self._make_bar()

    # -- context -------------------------------------------------------------------------------------------------

    def __enter__(self) -> StageProgress:
        with self._lock:
            self._start = self._last_report = time.monotonic()
            self._open = True
            self._bar = self._make_bar()
        self._start_prefect()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._prefect_ok:
            self._report(final=True)
        with self._lock:
            self._open = False
            if self._bar is not None:
                self._bar.close()

    def _make_bar(self) -> tqdm | None:
        """A bar only once there is work to show (tqdm cannot be re-enabled, so a 0-total bar is created later)."""
        if self._total <= 0:
            return None
        return tqdm(total=self._total, initial=self._done, desc=self.stage, unit=self.unit,
                    file=self._file if self._file is not None else sys.stderr, dynamic_ncols=True)

    # -- Prefect -------------------------------------------------------------------------------------------------

    def status(self) -> str:
        """`stage: done/total unit (pct%), ETA 4m12s` (rate = average since entering)."""
        done, total = self._done, self._total
        elapsed = time.monotonic() - self._start
        eta = (total - done) * elapsed / done if done and total >= done else None
        return f"{self.stage}: {done}/{total} {self.unit} ({self.percent():.0f}%), ETA {format_eta(eta)}"

    def percent(self) -> float:
        """0-100; an empty stage counts as complete."""
        if self._total <= 0:
            return 100.0
        return max(0.0, min(100.0, 100.0 * self._done / self._total))

    def _start_prefect(self) -> None:
        from prefect.context import FlowRunContext, TaskRunContext

        if FlowRunContext.get() is None and TaskRunContext.get() is None:
            return  # outside a run: terminal only
        try:
            from prefect import get_run_logger
            from prefect.artifacts import create_progress_artifact

            self._logger = get_run_logger()
            self._artifact_id = create_progress_artifact(  # type: ignore[call-arg, assignment]  # _sync: untyped
                self.percent(), key=artifact_key(self.stage), description=self.status(), _sync=True)
            self._prefect_ok = True
        except Exception as error:  # noqa: BLE001 - progress must never break the stage
            self._prefect_failed(error)

    def _report(self, final: bool) -> None:
        """Update the artifact and log one line; skipped if another thread is reporting (unless final)."""
        if not self._report_lock.acquire(blocking=final):
            return
        try:
            with self._lock:
                now = time.monotonic()
                if not final and now - self._last_report < self.interval:
                    return  # another thread reported while this one waited
                self._last_report = now
                percent, line = self.percent(), self.status()
            if final:
                line = f"{line.rsplit(', ETA', 1)[0]} in {format_eta(time.monotonic() - self._start)}"
            try:
                from prefect.artifacts import update_progress_artifact

                update_progress_artifact(  # type: ignore[call-arg]  # _sync: untyped
                    cast(UUID, self._artifact_id), percent, description=line, _sync=True)  # reports follow its creation
                self._logger.info(line)
            except Exception as error:  # noqa: BLE001
                self._prefect_failed(error)
        finally:
            self._report_lock.release()

    def _prefect_failed(self, error: Exception) -> None:
        """Warn once, then keep going with the terminal bar only."""
        self._prefect_ok = False
        (self._logger or fallback_logger).warning(
            "%s: progress reporting to Prefect failed (%s: %s); continuing with the terminal bar only",
            self.stage, type(error).__name__, error)
