"""`cfgen`: the command line that users and the DVC stages run.

Every command resolves `params.yaml` (or `--params-file`) with `-p key=value` overrides into one validated `Params`,
checks its inputs, outputs and models, and only then starts work (and at most one Prefect server). A mistake in any
of them is one line on stderr and exit code 2; `--verbose` shows the traceback. Stage modules are imported by the
command that runs them, so a DVC stage executes only its own code.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.table import Table

from flows.io import check_input, write_json
from tasks.errors import UserError
from tasks.params import PARAMS_FILE, Params, load_params
from tasks.stages import CAPTION_STEPS, STAGES

app = typer.Typer(help="Counterfactual image-text dataset engine.", no_args_is_help=True, add_completion=False)
console = Console(stderr=True)
VERBOSE = {"on": False}

ParamOption = Annotated[list[str] | None, typer.Option("--param", "-p", help="key=value override, e.g. "
                                                        "similarity.upper=0.9 (repeatable)")]
ParamsFile = Annotated[Path, typer.Option("--params-file", help="the params file to read")]
MetricsOption = Annotated[Path | None, typer.Option("--metrics", help="also write the step's metrics here (JSON)")]


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="tracebacks on errors")] = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s",
                        handlers=[RichHandler(console=console, show_path=False)])
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Prefect API call otherwise
    VERBOSE["on"] = verbose
    stop_on_sigterm()


def stop_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit(143) in the main thread, so `with` blocks and atexit hooks run (a temporary
    Prefect server is stopped). Call it from the main thread: only there can Python install signal handlers."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


@contextmanager
def user_errors():
    """A `UserError` anywhere below becomes one line and exit code 2 (the traceback with --verbose)."""
    try:
        yield
    except UserError as err:
        if VERBOSE["on"]:
            raise
        console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def _params(params_file: Path, param: list[str] | None) -> Params:
    return load_params(params_file, param or [])


def _check_models(section: Any) -> None:
    """Every model of a params section is identifiable (a missing folder fails here, before any work)."""
    from tasks.models import model_fingerprints

    model_fingerprints(section)


def _check_source(source: Path) -> None:
    if not source.is_file():
        raise UserError(f"caption file {source} does not exist")


def _check_output(source: Path, output: Path) -> None:
    from tasks.ingest import check_distinct

    check_distinct(source, output)


def _run_flow(flow_fn: Callable, params: Params, *args: Any) -> Any:
    """`flow_fn(*args, params)` on the engine's task runner, under one Prefect API for the whole command."""
    from flows.captions import task_runner
    from flows.server import prefect_api

    with prefect_api():
        return flow_fn.with_options(task_runner=task_runner(params.engine))(*args, params)


def _report(metrics: list[dict], path: Path | None) -> None:
    table = Table("step", "rows in", "rows out", "rejects", "counters")
    for m in metrics:
        rejects = ", ".join(f"{k}={v}" for k, v in m["rejects"].items()) or "-"
        counters = ", ".join(f"{k}={v}" for k, v in m.items() if k not in {"stage", "rows_in", "rows_out", "rejects"})
        table.add_row(m["stage"], str(m["rows_in"]), str(m["rows_out"]), rejects, counters or "-")
    console.print(table)
    if path:
        write_json(metrics[0] if len(metrics) == 1 else {m["stage"]: m for m in metrics}, path)


@app.command()
def captions(source: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
             metrics: MetricsOption = None) -> None:
    """Steps 1-5 (ingest, nouns, candidates, similarity, perplexity) on a COCO JSON or TSV caption file."""
    with user_errors():
        params = _params(params_file, param)
        _check_source(source)
        _check_output(source, output)
        for name in CAPTION_STEPS:
            _check_models(STAGES[name].section(params))
        from flows.captions import captions_flow

        _report(_run_flow(captions_flow, params, source, output), metrics)


@app.command()
def ingest(source: Path, output: Path, metrics: MetricsOption = None) -> None:
    """Step 1: COCO caption JSON or `caption_id<TAB>caption` TSV -> captions parquet (+ rejects)."""
    with user_errors():
        _check_source(source)
        _check_output(source, output)
        from flows.captions import ingest_task

        _report([ingest_task.fn(source, output)], metrics)


def _step_command(name: str):
    stage = STAGES[name]

    def command(source: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
                metrics: MetricsOption = None) -> None:
        with user_errors():
            params = _params(params_file, param)
            check_input(source, stage.input, stage.after)
            _check_output(source, output)
            _check_models(stage.section(params))
            from flows.captions import stage_flow

            _report([_run_flow(stage_flow, params, name, source, output)], metrics)

    command.__doc__ = f"{name}: {stage.description} (reads the output of `cfgen {stage.after}`)."
    return command


for _name in CAPTION_STEPS:
    app.command(_name)(_step_command(_name))


@app.command()
def generate(pairs: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
             metrics: MetricsOption = None) -> None:
    """Render and CLIP-score n_samples image pairs per caption pair (each sample cached by content)."""
    with user_errors():
        params = _params(params_file, param)
        check_input(pairs, STAGES["generate"].input, "perplexity")
        _check_output(pairs, output)
        _check_models(params.generate)
        from flows.images import generate_flow

        _report([_run_flow(generate_flow, params, pairs, output)], metrics)


@app.command("filter")
def filter_command(scores: Path, output: Path,
                   selected_images: Annotated[Path, typer.Option(help="where the winners' PNGs are written")] =
                   Path("data/processed/images"), param: ParamOption = None,
                   params_file: ParamsFile = PARAMS_FILE, metrics: MetricsOption = None) -> None:
    """Thresholds on the score table, then each pair's best passing sample rendered alone (cached by content)."""
    with user_errors():
        params = _params(params_file, param)
        check_input(scores, STAGES["filter"].input, "generate")
        _check_output(scores, output)
        _check_models(params.generate)
        from flows.images import filter_flow

        _report([_run_flow(filter_flow, params, scores, output, selected_images)], metrics)


@app.command("tiny-models")
def tiny_models(source: Path, output: Path, param: ParamOption = None,
                params_file: ParamsFile = PARAMS_FILE) -> None:
    """Build the demo profile's tiny random models from a caption file (offline, seeded, deterministic)."""
    with user_errors():
        params = _params(params_file, param)
        _check_source(source)
        from tasks.tiny_models import build

        build(source, output, params.tiny_models)
        console.print(f"tiny models written to {output}")


def _release(flow_name: str, param: list[str] | None, params_file: Path) -> Any:
    with user_errors():
        params = _params(params_file, param)
        import flows.publish

        from flows.server import prefect_api

        with prefect_api():
            return getattr(flows.publish, flow_name)(params)


@app.command()
def report(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """reports/metrics.json, figures and plot data for the current run (paths from params.yaml)."""
    console.print_json(data=_release("report_flow", param, params_file)["funnel"])


@app.command()
def export(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Write the selected pairs as a Hugging Face `datasets` folder (parquet shards, images embedded)."""
    console.print(f"{_release('export_flow', param, params_file)} rows exported")


@app.command()
def datasheet(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Generate the datasheet and the dataset card that embeds it."""
    _release("datasheet_flow", param, params_file)


@app.command()
def publish(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Push the export folder to the Hub when `export.repo_id` is set and HF_TOKEN is in the environment."""
    with user_errors():
        params = _params(params_file, param)
        from tasks.export import push_if_configured

        url = push_if_configured(params.paths.export, params.export)
    console.print(f"pushed to {url}" if url else "not pushed: set export.repo_id and HF_TOKEN to publish")


@app.command()
def run(source: Annotated[str | None, typer.Option(help="caption file (default: paths.captions_source)")] = None,
        profile: Annotated[str | None, typer.Option(help="demo | paper (default: params.yaml)")] = None,
        param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """The whole DAG as one Prefect flow (what the scheduled deployment runs)."""
    with user_errors():
        extra = [f"{k}={v}" for k, v in {"paths.captions_source": source, "profile": profile}.items() if v]
        params = _params(params_file, [*(param or []), *extra])
        _check_source(params.paths.captions_source)
        from flows.pipeline import dataset_flow
        from flows.server import prefect_api

        with prefect_api():
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
        _params(params_file, [*(param or []), *extra])
        from flows.pipeline import serve as serve_deployment

        serve_deployment(name, cron, source, profile, str(params_file), param or [])


@app.command()
def diff(rev_a: str, rev_b: str, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Compare the dataset at two git revisions or DVC experiments; writes markdown + HTML under paths.diff."""
    with user_errors():
        paths = _params(params_file, None).paths
        from flows.versions import write_diff

        for kind, path in write_diff(rev_a, rev_b, paths).items():
            console.print(f"{kind}: {path}")


@app.command("with-server", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def with_server(ctx: typer.Context) -> None:
    """Run a command (e.g. `dvc repro`) with one temporary Prefect server shared by all its processes."""
    from flows.server import run_with_server

    with user_errors():
        if not ctx.args:
            raise UserError("with-server needs a command, e.g. `cfgen with-server -- dvc repro`")
        raise typer.Exit(run_with_server(ctx.args))


if __name__ == "__main__":
    sys.exit(app())
