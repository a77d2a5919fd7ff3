"""`cfgen`: the command line that users and the DVC stages run.

Every command resolves `params.yaml` (or `--params-file`) with `-p key=value` overrides into one validated `Params`,
checks its inputs, outputs and models, and only then starts work (and at most one Prefect server). A mistake in any
of them is one line on stderr and exit code 2; `--verbose` shows the traceback. Stage modules, the models'
pre-flight and the metrics table are imported by the commands that use them, so a DVC stage executes only its own
code and the CLI's.
"""

from __future__ import annotations

import logging
import sys
from functools import cache
from pathlib import Path
from pkgutil import resolve_name
from typing import Annotated, cast

import typer
from rich.logging import RichHandler
from typer.core import TyperCommand, TyperGroup

from flows.engine.console import VERBOSE, console, refuse_empty_paths, stop_on_signals, user_errors
from tasks.config import PARAMS_FILE, load_params, use_project_environment
from tasks.core import schemas
from tasks.core.io import check_distinct, check_input, check_outputs, check_source
from tasks.stages import (CAPTIONS, DECLARED, STAGES, Stage, TableStage, caption_steps, skip_reason, stage, stages,
                          step, table)

ParamOption = Annotated[list[str] | None, typer.Option("--param", "-p", help="key=value override, e.g. "
                                                        "similarity.upper=0.9 (repeatable)")]
ParamsFile = Annotated[Path, typer.Option("--params-file", help="the params file to read")]
STAGES_PANEL = "Stages (each a DVC stage, in DAG order)"
GROUPS = {"flows.commands:tools": ("plan", "tiny-models", "synthetic-coco", "toy-world"),
          "flows.dag:dag": ("publish", "run", "serve", "diff", "with-server")}
"""The tools' and the whole DAG's commands, each group imported when one of its commands runs or is listed."""


@cache
def dag_order() -> dict[str, Stage | TableStage]:
    """Every stage's command, in DAG order (`tasks.stages.stages`)."""
    return {declared.command: declared for declared in stages().values()}


def stage_help(name: str) -> str:
    """A stage's help, from its declaration: a data stage's also says what it reads and writes, and its params."""
    declared = stage(name)
    if isinstance(declared, TableStage):
        return declared.help
    reads = (f"the output of `cfgen {declared.after}` (paths.{step(declared.after).data})"
             if declared.after else "SOURCE")
    return (f"{declared.help} Reads {reads}; writes paths.{declared.data} and its rejects; params: "
            f"{', '.join(declared.sections)}.")


class Commands(TyperGroup):
    """The app's commands, a stage's built only when it is invoked: it imports its own module and no other stage's
    (`cfgen --help` lists them from their declarations, importing no logic): the project's own commands first, then
    the stages in DAG order."""

    listing = False

    def list_commands(self, ctx) -> list[str]:
        """Every command; the stages in DAG order when listing (their declarations loaded), else by name (none)."""
        ordered = list(dag_order()) if self.listing else [declared.command for declared in STAGES]
        names = {*super().list_commands(ctx), *ordered, *(name for group in GROUPS.values() for name in group)}
        return sorted(names - set(ordered)) + ordered

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        refuse_empty_paths(self, ctx, list(args))  # before any callback: '' would be the folder `.`
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False

    def get_command(self, ctx, name: str):
        if group := next((entry for entry, names in GROUPS.items() if name in names), None):
            return typer.main.get_group(resolve_name(group)).get_command(ctx, name)
        written = super().get_command(ctx, name)  # ingest's and selection's commands are written out
        built = written is None and name.replace("-", "_") in DECLARED
        if self.listing:
            command = TyperCommand(name, help=stage_help(name)) if built else written
            if isinstance(command, (TyperCommand, TyperGroup)):  # as typer builds the written ones
                command.rich_help_panel = STAGES_PANEL if name in dag_order() else None
            return command
        if not built:
            return written
        one = typer.Typer(add_completion=False)
        one.command(name)(_step_command(name) if isinstance(stage(name), Stage) else table_command(name))
        return typer.main.get_command(one)


def table_command(name: str):
    """The CLI command of table stage `name` (`cfgen NAME`): its sections loaded, its check and its models' pre-flight
    passed, its flow run under one Prefect API (`flows.runners`), its result shown (`flows.hooks`)."""
    declared = table(name)

    def command(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
        from flows.hooks import hooks

        with user_errors():
            params = load_params(params_file, param or [], declared.sections)  # before its flow module is imported
            runs = hooks(declared.name)
            if runs.check is not None:
                runs.check(params)
            if declared.models:
                from flows.preflight import check_models
                from tasks.plan.preflight import running_sections

                check_models(*running_sections(params, declared.models))
            from flows.runners import api_for, run_table

            with api_for(declared, params):
                result = run_table(declared, params)
        if runs.show is not None:
            runs.show(result)

    command.__doc__ = declared.help
    return command


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
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # "generated new fontManager", once per fresh cache
    VERBOSE["on"] = verbose
    stop_on_signals()
    use_project_environment()


@app.command(help=f"Every caption step ({', '.join((CAPTIONS, *caption_steps()))}) on a COCO JSON or TSV file.")
def captions(source: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
             metrics: MetricsOption = None) -> None:
    with user_errors():
        params = load_params(params_file, param or [], caption_steps())
        check_source(source)
        check_distinct(source, output, metrics, params_file)
        check_outputs(output, metrics)
        from flows.preflight import check_models

        check_models(*(getattr(params, name) for name in caption_steps() if not skip_reason(name, params)))
        from flows.engine.counters import report_table
        from flows.engine.sharding import task_runner
        from flows.runners import engine_api
        from flows.text import captions_flow

        with engine_api(params):
            report_table(captions_flow.with_options(task_runner=task_runner(params))(source, output, params), metrics)


@app.command()
def ingest(source: Path, output: Path, metrics: MetricsOption = None) -> None:
    """Step 1: COCO caption JSON or `caption_id<TAB>caption` TSV -> captions parquet (+ rejects)."""
    with user_errors():
        check_source(source)
        check_distinct(source, output, metrics)
        check_outputs(output, metrics)
        from flows.engine.counters import report_table
        from flows.ingest import ingest_task

        report_table([ingest_task.fn(source, output)], metrics)


def _step_command(name: str):
    """The command of data stage `name`: `cfgen NAME SOURCE OUTPUT` runs its flow on SOURCE, written to OUTPUT."""
    declared = step(name)

    def command(source: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
                metrics: MetricsOption = None) -> None:
        with user_errors():
            params = load_params(params_file, param or [], declared.sections)
            check_input(source, cast(schemas.Schema, declared.input), cast(str, declared.after))  # not ingest: both set
            check_distinct(source, output, metrics, params_file)
            check_outputs(output, metrics)
            if not skip_reason(name, params):
                from flows.preflight import check_models

                check_models(declared.section(params))
            from flows.engine.counters import report_table
            from flows.runners import api_for, run_step

            with api_for(declared, params):
                report_table([run_step(declared, params, source, output)], metrics)

    command.__doc__ = stage_help(name)
    return command


@app.command()
def selection(scores: Path, output: Path, selected_images: ImagesOption = None,
              param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE, metrics: MetricsOption = None) -> None:
    """Thresholds on the score table, then each pair's best passing sample rendered alone (cached by content)."""
    with user_errors():
        declared = step("selection")
        params = load_params(params_file, param or [], declared.sections)
        check_input(scores, schemas.SAMPLES, "generate")
        check_distinct(scores, output, metrics, params_file)
        check_outputs(output, metrics)
        images = selected_images or output.with_name(f"{output.stem}_images")  # never the pipeline's, unless told
        from flows.preflight import check_models
        from tasks.core.publication import STORED_PNG, check_filled

        check_filled(images, STORED_PNG)  # a folder cfgen did not fill is refused before anything starts
        check_models(params.generate)
        from flows.engine.counters import report_table
        from flows.runners import api_for, run_step

        with api_for(declared, params):
            report_table([run_step(declared, params, scores, output, images)], metrics)


if __name__ == "__main__":
    sys.exit(app())
