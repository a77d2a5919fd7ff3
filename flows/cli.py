"""`cfgen`: the command line that users and the DVC stages run.

Every command resolves `params.yaml` (or `--params-file`) with `-p key=value` overrides into one validated `Params`,
checks its inputs, outputs and models, and only then starts work (and at most one Prefect server). A mistake in any
of them is one line on stderr and exit code 2; `--verbose` shows the traceback. Stage modules are imported by the
command that runs them, so a DVC stage executes only its own code.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.logging import RichHandler

from flows.commands import ParamOption, ParamsFile, check_models, check_source, register
from flows.engine.console import VERBOSE, console, report_table, stop_on_sigterm, user_errors
from tasks.core.config import PARAMS_FILE, load_params
from tasks.core.errors import UserError
from tasks.core.io import check_distinct, check_input, check_outputs
from tasks.core.params import Params
from tasks.core.stages import CAPTION_STEPS, STAGES, skip_reason

app = typer.Typer(help="Counterfactual image-text dataset engine.", no_args_is_help=True, add_completion=False)

MetricsOption = Annotated[Path | None, typer.Option("--metrics", help="also write the step's metrics here (JSON)")]
ImagesOption = Annotated[Path, typer.Option(help="where the winners' PNGs are written")]


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="tracebacks on errors")] = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s",
                        handlers=[RichHandler(console=console, show_path=False)])
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Prefect API call otherwise
    VERBOSE["on"] = verbose
    stop_on_sigterm()


def _run_flow(flow_fn: Callable, params: Params, *args: Any) -> Any:
    """`flow_fn(*args, params)` on the engine's task runner, under one Prefect API for the whole command."""
    from flows.engine.server import prefect_api
    from flows.engine.sharding import task_runner

    with prefect_api(), on_cluster(params):
        return flow_fn.with_options(task_runner=task_runner(params))(*args, params)


def on_cluster(params: Params) -> contextlib.AbstractContextManager:
    """With `engine.dask_address`: a scheduler lost mid-run becomes one line (`flows.engine.cluster`)."""
    if not params.engine.dask_address:
        return contextlib.nullcontext()
    from flows.engine.cluster import scheduler_loss_is_one_line

    return scheduler_loss_is_one_line(params.engine.dask_address)


def _stage_flow(name: str) -> tuple[Callable, tuple]:
    """The flow that runs caption step or `generate` `name`, and the arguments it takes before (source, output)."""
    if name == "generate":
        from flows.image import generate_flow

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
        check_distinct(source, output)
        check_outputs(output, metrics)
        for name in CAPTION_STEPS:
            if not skip_reason(name, params):
                check_models(STAGES[name].section(params))
        from flows.text import captions_flow

        report_table(_run_flow(captions_flow, params, source, output), metrics)


@app.command()
def ingest(source: Path, output: Path, metrics: MetricsOption = None) -> None:
    """Step 1: COCO caption JSON or `caption_id<TAB>caption` TSV -> captions parquet (+ rejects)."""
    with user_errors():
        check_source(source)
        check_distinct(source, output)
        check_outputs(output, metrics)
        from flows.text import ingest_task

        report_table([ingest_task.fn(source, output)], metrics)


def _stage_command(name: str):
    """The command of data stage `name`: `cfgen NAME SOURCE OUTPUT` runs its flow on SOURCE, written to OUTPUT."""
    stage = STAGES[name]

    def command(source: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
                metrics: MetricsOption = None) -> None:
        with user_errors():
            params = load_params(params_file, param or [])
            check_input(source, stage.input, stage.after)
            check_distinct(source, output)
            check_outputs(output, metrics)
            if not skip_reason(name, params):
                check_models(stage.section(params))
            flow_fn, head = _stage_flow(name)
            report_table([_run_flow(flow_fn, params, *head, source, output)], metrics)

    command.__doc__ = f"{name}: {stage.description} (reads the output of `cfgen {stage.after}`)."
    return command


for _name in (*CAPTION_STEPS, "generate"):
    app.command(_name)(_stage_command(_name))


@app.command()
def selection(scores: Path, output: Path, selected_images: ImagesOption = Path("data/processed/images"),
              param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE, metrics: MetricsOption = None) -> None:
    """Thresholds on the score table, then each pair's best passing sample rendered alone (cached by content)."""
    with user_errors():
        params = load_params(params_file, param or [])
        check_input(scores, STAGES["selection"].input, "generate")
        check_distinct(scores, output)
        check_outputs(output, metrics)
        check_models(params.generate)
        from flows.image import selection_flow

        report_table([_run_flow(selection_flow, params, scores, output, selected_images)], metrics)


@app.command()
def gallery(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """The static pair gallery (paths.gallery): every accepted pair, the rejects of every stage, the object-removal
    pairs and the run's funnel; open its index.html from the file system or any static host."""
    with user_errors():
        params = load_params(params_file, param or [])
        check_input(params.paths.selected, STAGES["selection"].output, "selection")
        from tasks.release.gallery import build

        counts = build(params)
    console.print(f"gallery written to {params.paths.gallery}/index.html: " + ", ".join(f"{v} {k}" for k, v in
                                                                                          counts.items()))


@app.command()
def judge(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """The VLM judge: four yes/no questions per selected pair (cached per pair), the verdict from judge.thresholds
    (reject reasons judge_*) and its agreement with the Label Studio labels (paths.metrics/judge.json)."""
    with user_errors():
        params = load_params(params_file, param or [])
        check_input(params.paths.selected, STAGES["selection"].output, "selection")
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


@app.command()
def publish(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Push the export folder to the Hub when `export.repo_id` is set and HF_TOKEN is in the environment."""
    with user_errors():
        params = load_params(params_file, param or [])
        from tasks.release.export import push_if_configured

        url = push_if_configured(params.paths.export, params.export)
    console.print(f"pushed to {url}" if url else "not pushed: set export.repo_id and HF_TOKEN to publish")


@app.command()
def run(source: Annotated[str | None, typer.Option(help="caption file (default: paths.captions_source)")] = None,
        profile: Annotated[str | None, typer.Option(help="demo | paper (default: params.yaml)")] = None,
        param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """The whole DAG as one Prefect flow (what the scheduled deployment runs)."""
    with user_errors():
        extra = [f"{k}={v}" for k, v in {"paths.captions_source": source, "profile": profile}.items() if v]
        params = load_params(params_file, [*(param or []), *extra])
        check_source(params.paths.captions_source)
        from flows.engine.server import prefect_api
        from flows.pipeline import dataset_flow

        with prefect_api(), on_cluster(params):
            console.print_json(data=dataset_flow(source, profile, str(params_file), param or []))


@app.command()
def serve(name: Annotated[str, typer.Option(help="deployment name")] = "refresh",
          cron: Annotated[str, typer.Option(help="schedule")] = "0 3 * * *",
          source: Annotated[str | None, typer.Option(help="caption file the refresh reads")] = None,
          profile: Annotated[str | None, typer.Option(help="demo | paper")] = None,
          param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Register the cron-scheduled `cfgen-dataset` deployment on PREFECT_API_URL and serve its runs."""
    with user_errors():
        extra = [f"{k}={v}" for k, v in {"paths.captions_source": source, "profile": profile}.items() if v]
        check_source(load_params(params_file, [*(param or []), *extra]).paths.captions_source)
        from flows.engine.server import lasting_api

        lasting_api()
        from flows.pipeline import serve as serve_deployment  # every flow: imported once the checks passed

        serve_deployment(name, cron, source, profile, str(params_file), param or [])


@app.command()
def diff(rev_a: str, rev_b: str, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Compare the dataset at two git revisions or DVC experiments; writes markdown + HTML under paths.diff."""
    with user_errors():
        paths = load_params(params_file).paths
        from flows.versions import write_diff

        for kind, path in write_diff(rev_a, rev_b, paths).items():
            console.print(f"{kind}: {path}")


@app.command("with-server", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def with_server(ctx: typer.Context) -> None:
    """Run a command (e.g. `dvc repro`) with one temporary Prefect server shared by all its processes."""
    from flows.engine.server import run_with_server

    with user_errors():
        if not ctx.args:
            raise UserError("with-server needs a command, e.g. `cfgen with-server -- dvc repro`")
        raise typer.Exit(run_with_server(ctx.args))


if __name__ == "__main__":
    sys.exit(app())
