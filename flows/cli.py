"""`cfgen`: the command line that users and the DVC stages run.

Every command resolves `params.yaml` (or `--params-file`) with `-p key=value` overrides into one validated `Params`,
checks its inputs, outputs and models, and only then starts work (and at most one Prefect server). A mistake in any
of them is one line on stderr and exit code 2; `--verbose` shows the traceback. Stage modules are imported by the
command that runs them, so a DVC stage executes only its own code.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import click
import typer
import yaml
from rich.logging import RichHandler
from typer.core import TyperGroup

from flows.commands import (
    ParamOption,
    ParamsFile,
    check_models,
    check_source,
    command_help,
    command_names,
    on_engine,
    paths_command,
    register,
)
from flows.dag import register as register_dag
from flows.engine.console import VERBOSE, console, report_table, stop_on_signals, user_errors
from tasks.config import PARAMS_FILE, load_params, use_project_environment
from tasks.core import schemas
from tasks.core.io import check_distinct, check_input, check_outputs
from tasks.params import Params
from tasks.stages import CAPTION_STEPS, skip_reason, stage

STEP_COMMANDS = (*CAPTION_STEPS, "generate")  # `cfgen NAME SOURCE OUTPUT`, built when invoked (`_step_command`)


STAGES_PANEL = "Stages (each a DVC stage, in dvc.yaml's order)"


@cache
def dag_order() -> list[str]:
    """The commands `dvc.yaml`'s stages run (`cfgen NAME ...`), in its order, when the project's `dvc.yaml` is there."""
    dvc = Path(__file__).resolve().parents[1] / "dvc.yaml"
    if not dvc.is_file():
        return []
    return [stage["cmd"].split()[1] for stage in yaml.safe_load(dvc.read_text())["stages"].values()]


def step_help(name: str) -> str:
    """A data stage's help, from its declaration: what it does (its logic's docstring), reads, writes, its params."""
    step = stage(name)
    reads = f"the output of `cfgen {step.after}` (paths.{stage(step.after).data})" if step.after else "SOURCE"
    return f"{step.help} Reads {reads}; writes paths.{step.data} and its rejects; params: {name}."


class Commands(TyperGroup):
    """The app's commands, a registered stage's or paths command's built only when it is invoked: it imports its
    own module and no other stage's (`cfgen --help` lists them from their declarations, importing none): the
    project's own commands first, then the DAG's stages in its order."""

    listing = False

    def list_commands(self, ctx) -> list[str]:
        names = {*super().list_commands(ctx), *STEP_COMMANDS, *command_names()}
        dag = [name for name in dag_order() if name in names]
        return sorted(names - set(dag)) + dag

    def format_help(self, ctx, formatter) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False

    def get_command(self, ctx, name: str):
        build = _step_command if name in STEP_COMMANDS else paths_command if name in command_names() else None
        if self.listing:
            command = (click.Command(name, help=step_help(name) if name in STEP_COMMANDS else command_help(name))
                       if build else super().get_command(ctx, name))
            command.rich_help_panel = STAGES_PANEL if name in dag_order() else None
            return command
        if build is None:
            return super().get_command(ctx, name)
        one = typer.Typer(add_completion=False)
        one.command(name)(build(name))
        return typer.main.get_command(one)


app = typer.Typer(cls=Commands, help="Counterfactual image-text dataset engine.", no_args_is_help=True,
                  add_completion=False)

MetricsOption = Annotated[Path | None, typer.Option("--metrics", help="also write the step's metrics here (JSON)")]
ImagesOption = Annotated[Path | None, typer.Option(help="where the winners' PNGs are written [default: OUTPUT's "
                                                   "name + _images, beside it]")]


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="tracebacks on errors")] = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s",
                        handlers=[RichHandler(console=console, show_path=False)])
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Prefect API call otherwise
    VERBOSE["on"] = verbose
    stop_on_signals()
    use_project_environment()


def _run_flow(flow_fn: Callable, params: Params, *args: Any) -> Any:
    """`flow_fn(*args, params)` on the engine's task runner, under one Prefect API for the whole command."""
    from flows.engine.server import prefect_api
    from flows.engine.sharding import task_runner

    with on_engine(params), prefect_api():
        return flow_fn.with_options(task_runner=task_runner(params))(*args, params)


def _stage_flow(name: str) -> tuple[Callable, tuple]:
    """The flow that runs caption step or `generate` `name`, and the arguments it takes before (source, output)."""
    if name == "generate":
        from flows.image.generate import generate_flow

        return generate_flow, ()
    from flows.text import stage_flow

    return stage_flow, (name,)


@app.command()
def captions(source: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
             metrics: MetricsOption = None) -> None:
    """Every caption step (ingest, sites, saliency, candidates, relations, similarity, perplexity) on a COCO JSON or
    TSV file."""
    with user_errors():
        params = load_params(params_file, param or [])
        check_source(source)
        check_distinct(source, output, metrics)
        check_outputs(output, metrics)
        check_models(*(getattr(params, name) for name in CAPTION_STEPS if not skip_reason(name, params)))
        from flows.text import captions_flow

        report_table(_run_flow(captions_flow, params, source, output), metrics)


@app.command()
def ingest(source: Path, output: Path, metrics: MetricsOption = None) -> None:
    """Step 1: COCO caption JSON or `caption_id<TAB>caption` TSV -> captions parquet (+ rejects)."""
    with user_errors():
        check_source(source)
        check_distinct(source, output, metrics)
        check_outputs(output, metrics)
        from flows.text import ingest_task

        report_table([ingest_task.fn(source, output)], metrics)


def _step_command(name: str):
    """The command of data stage `name`: `cfgen NAME SOURCE OUTPUT` runs its flow on SOURCE, written to OUTPUT."""
    step = stage(name)

    def command(source: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
                metrics: MetricsOption = None) -> None:
        with user_errors():
            params = load_params(params_file, param or [])
            check_input(source, step.input, step.after)
            check_distinct(source, output, metrics)
            check_outputs(output, metrics)
            if not skip_reason(name, params):
                check_models(step.section(params))
            flow_fn, head = _stage_flow(name)
            report_table([_run_flow(flow_fn, params, *head, source, output)], metrics)

    command.__doc__ = step_help(name)
    return command


@app.command()
def selection(scores: Path, output: Path, selected_images: ImagesOption = None,
              param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE, metrics: MetricsOption = None) -> None:
    """Thresholds on the score table, then each pair's best passing sample rendered alone (cached by content)."""
    with user_errors():
        params = load_params(params_file, param or [])
        check_input(scores, schemas.SAMPLES, "generate")
        check_distinct(scores, output, metrics)
        check_outputs(output, metrics)
        check_models(params.generate)
        from flows.image.selection import selection_flow

        images = selected_images or output.with_name(f"{output.stem}_images")  # never the pipeline's, unless told
        report_table([_run_flow(selection_flow, params, scores, output, images)], metrics)


@app.command()
def gallery(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """The static pair gallery (paths.gallery): every accepted pair, the rejects of every stage, the object-removal
    pairs and the run's funnel; open its index.html from the file system or any static host."""
    with user_errors():
        params = load_params(params_file, param or [])
        check_input(params.paths.selected, schemas.SELECTED, "selection")
        from tasks.core.publication import held
        from tasks.release.gallery import build

        with held(params.paths.gallery):  # the site is written by one run at a time
            counts = build(params)
    console.print(f"gallery written to {params.paths.gallery}/index.html: " + ", ".join(f"{v} {k}" for k, v in
                                                                                          counts.items()))


@app.command()
def judge(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """The VLM judge: four yes/no questions per selected pair (cached per pair), the verdict from judge.thresholds
    (reject reasons judge_*) and its agreement with the Label Studio labels (paths.metrics/judge.json)."""
    with user_errors():
        params = load_params(params_file, param or [])
        check_input(params.paths.selected, schemas.SELECTED, "selection")
        if params.judge.enabled:
            check_models(params.judge)
        from flows.judge import judge_flow
        from flows.validation import check_export

        check_export(params)
        metrics = _run_flow(judge_flow, params)
    report_table([{k: v for k, v in metrics.items() if k not in ("model", "agreement", "thresholds")}], None)
    if agreed := metrics["agreement"]:
        console.print(f"agreement with people on {agreed['pairs_compared']} pairs: accuracy {agreed['accuracy']}, "
                      f"Cohen's kappa {agreed['cohen_kappa']}")


register(app)
register_dag(app)


if __name__ == "__main__":
    sys.exit(app())
