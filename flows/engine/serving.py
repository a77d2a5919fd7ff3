"""`cfgen serve`'s runner: Prefect's `Runner`, which SIGTERM stops as gracefully as Ctrl-C.

Prefect's own SIGTERM handler calls the runner's `stop()` inside its event loop, where that only makes a coroutine
nobody awaits (a RuntimeWarning at every shutdown), then exits mid-loop. Here SIGTERM schedules `astop` on the
runner's loop: polling ends, the served deployment's schedule is paused, and the command exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any

from prefect import Flow
from prefect.client.schemas.schedules import CronSchedule
from prefect.runner import Runner
from prefect.types.names import BANNED_CHARACTERS
from pydantic import ValidationError

from flows.engine.console import console
from tasks.core.errors import UserError


class GracefulRunner(Runner):
    def handle_sigterm(self, *args: Any, **kwargs: Any) -> None:
        self._logger.info("SIGTERM received, stopping...")
        self.execute_in_background(self.astop)


def check_deployment(name: str, cron: str) -> None:
    """Raise a one-line UserError unless `name` is a deployment name and `cron` a schedule Prefect takes."""
    if not name.strip() or any(c in name for c in BANNED_CHARACTERS):
        raise UserError(f"--name {name!r} is no deployment name: give one without {' '.join(BANNED_CHARACTERS)}")
    try:
        CronSchedule(cron=cron)
    except ValidationError:
        raise UserError(f"--cron {cron!r} is no cron schedule: give minute hour day month weekday, e.g. '0 3 * * *'"
                        ) from None


def serve(flow: Flow, name: str, cron: str, parameters: dict[str, Any]) -> None:
    """Register `flow` as deployment `name` on the Prefect API with its cron schedule (`check_deployment` first: a bad
    one registers nothing) and run its runs here until SIGTERM or Ctrl-C (then its schedule is paused)."""
    check_deployment(name, cron)
    runner = GracefulRunner(name=name, pause_on_shutdown=True)
    runner.add_flow(flow, name=name, cron=cron, parameters=parameters)
    console.print(f"serving {flow.name}/{name} on {cron!r}; a run now: prefect deployment run '{flow.name}/{name}'",
                  highlight=False, soft_wrap=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # asyncio.run's own Ctrl-C: it stops the runner
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: asyncio.run has stopped the runner, schedule paused
        asyncio.run(runner.start())
