"""How a declared stage (`tasks.stages`) runs, the same from its command and from the whole-DAG flow: a data stage's
flow on its input and output, a table stage's flow on `paths`; a sharded one on the engine's task runner. Each
imports its own flow module only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from prefect import Flow
from prefect.task_runners import TaskRunner

from tasks.stages import Params, Stage, TableStage

if TYPE_CHECKING:
    from prefect.futures import PrefectFuture

    Runner = TaskRunner[PrefectFuture[Any]]  # any task runner, as a flow takes one


def _runner(params: Params, runner: Runner | None) -> Runner:
    """`runner`, else the engine's (`sharding.task_runner`: the cluster when one is set)."""
    from flows.engine.sharding import task_runner

    return runner if runner is not None else task_runner(params)


def run_step(declared: Stage, params: Params, source: Path, output: Path, images: Path | None = None,
             runner: Runner | None = None) -> dict:
    """Data stage `declared` on `source`, written to `output` (selection: its winners' PNGs to `images`), on `runner`
    (None: the engine's)."""
    if declared.name == "ingest":
        from flows.ingest import ingest_task

        return ingest_task.fn(source, output)
    runner = _runner(params, runner)
    if declared.name == "generate":
        from flows.image.generate import generate_flow

        return generate_flow.with_options(task_runner=runner)(source, output, params)
    if declared.name == "selection":
        from flows.image.selection import selection_flow

        return selection_flow.with_options(task_runner=runner)(source, output, cast(Path, images), params)  # given
    from flows.text import stage_flow

    return stage_flow.with_options(task_runner=runner)(declared.name, source, output, params)


def run_table(declared: TableStage, params: Params, runner: Runner | None = None) -> Any:
    """Table stage `declared` on `params.paths` (a sharded one on `runner`; None: the engine's)."""
    from flows.hooks import hooks

    work = hooks(declared.name).flow
    if declared.sharded:  # a sharded stage's work is a flow
        return cast(Flow, work).with_options(task_runner=_runner(params, runner))(params)
    return work(params)


@contextlib.contextmanager
def engine_api(params: Params, sharded: bool = True) -> Iterator[None]:
    """One Prefect API for a command's flows (the running one, else a temporary one), the engine checked first when
    they are sharded (`preflight.on_engine`; imported then only)."""
    from flows.engine.server import prefect_api

    with contextlib.ExitStack() as stack:
        if sharded:
            from flows.preflight import on_engine

            stack.enter_context(on_engine(params))
        stack.enter_context(prefect_api())
        yield


def api_for(declared: Stage | TableStage, params: Params) -> contextlib.AbstractContextManager:
    """What a command runs its stage under: `engine_api` when its work is a flow (a data stage's always is)."""
    if isinstance(declared, Stage):
        return engine_api(params)
    from flows.hooks import hooks

    return engine_api(params, declared.sharded) if isinstance(hooks(declared.name).flow, Flow) else (
        contextlib.nullcontext())
