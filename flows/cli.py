"""`cfgen`: the command line that users and the DVC stages run.

Every command reads `params.yaml` (or `--params-file`) with `--param key=value` overrides; each step reads only
its own section plus `profile` and `engine`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from flows.captions import STAGES as STEPS
from flows.captions import captions_flow, ingest_task, stage_flow, task_runner
from flows.io import write_json
from tasks.params import PARAMS_FILE, EngineParams, load_section, parse_overrides, read_params

app = typer.Typer(help="Counterfactual image-text dataset engine.", no_args_is_help=True, add_completion=False)
console = Console(stderr=True)

ParamOption = Annotated[list[str] | None, typer.Option("--param", "-p", help="key=value override, e.g. "
                                                        "similarity.upper=0.9 (repeatable)")]
ParamsFile = Annotated[Path, typer.Option("--params-file", help="the params file to read")]
MetricsOption = Annotated[Path | None, typer.Option("--metrics", help="also write the step's metrics here (JSON)")]


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s",
                        handlers=[RichHandler(console=console, show_path=False)])
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Prefect API call otherwise


def _raw(params_file: Path, param: list[str] | None) -> dict[str, Any]:
    return read_params(params_file, parse_overrides(param or []))


def _report(metrics: list[dict], path: Path | None) -> None:
    table = Table("step", "rows in", "rows out", "rejects", "counters")
    for m in metrics:
        rejects = ", ".join(f"{k}={v}" for k, v in m["rejects"].items()) or "-"
        counters = ", ".join(f"{k}={v}" for k, v in m.items() if k not in {"stage", "rows_in", "rows_out", "rejects"})
        table.add_row(m["stage"], str(m["rows_in"]), str(m["rows_out"]), rejects, counters or "-")
    console.print(table)
    if path:
        write_json(metrics[0] if len(metrics) == 1 else {m["stage"]: m for m in metrics}, path)


def _with_runner(flow_fn, raw: dict[str, Any]):
    return flow_fn.with_options(task_runner=task_runner(load_section(EngineParams, "engine", raw)))


@app.command()
def captions(source: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
             metrics: MetricsOption = None) -> None:
    """Steps 1-5 (ingest, nouns, candidates, similarity, perplexity) on a COCO JSON or TSV caption file."""
    raw = _raw(params_file, param)
    _report(_with_runner(captions_flow, raw)(source, output, raw), metrics)


@app.command()
def ingest(source: Path, output: Path, metrics: MetricsOption = None) -> None:
    """Step 1: COCO caption JSON or `caption_id<TAB>caption` TSV -> captions parquet (+ rejects)."""
    _report([ingest_task.fn(source, output)], metrics)


def _step_command(stage: str):
    def command(source: Path, output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
                metrics: MetricsOption = None) -> None:
        raw = _raw(params_file, param)
        _report([_with_runner(stage_flow, raw)(stage, source, output, raw)], metrics)

    command.__doc__ = f"Run the {stage} step alone on a parquet of the previous step's schema."
    return command


for _stage in STEPS:
    app.command(_stage)(_step_command(_stage))


ImagesOption = Annotated[Path, typer.Option("--images", help="content-addressed image store (PNG)")]


@app.command()
def images(pairs: Path, output: Path, image_root: ImagesOption = Path("data/images"), param: ParamOption = None,
           params_file: ParamsFile = PARAMS_FILE, metrics: MetricsOption = None) -> None:
    """Over-generate scored image pairs for a counterfactual_captions parquet (one cached task per pair)."""
    from flows.images import generate_flow

    raw = _raw(params_file, param)
    _report([_with_runner(generate_flow, raw)(pairs, output, image_root, raw)], metrics)


@app.command("filter")
def filter_command(scores: Path, output: Path, image_root: ImagesOption = Path("data/images"),
                   selected_images: Annotated[Path, typer.Option(help="where the winners' PNGs are copied")] =
                   Path("data/processed/images"), param: ParamOption = None,
                   params_file: ParamsFile = PARAMS_FILE, metrics: MetricsOption = None) -> None:
    """CLIP thresholds + best-CLIP_dir selection on a score table (never regenerates, except unstored winners)."""
    from flows.images import filter_flow

    raw = _raw(params_file, param)
    _report([filter_flow(scores, output, image_root, selected_images, raw)], metrics)


@app.command("tiny-models")
def tiny_models(source: Path, output: Path, param: ParamOption = None,
                params_file: ParamsFile = PARAMS_FILE) -> None:
    """Build the demo profile's tiny random models from a caption file (offline, seeded, deterministic)."""
    from flows.pipeline import tiny_models_task

    tiny_models_task.fn(source, output, _raw(params_file, param))
    console.print(f"tiny models written to {output}")


@app.command()
def report(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """reports/metrics.json, figures and plot data for the current run (paths from params.yaml)."""
    from flows.publish import report_flow

    console.print_json(data=report_flow(_raw(params_file, param))["funnel"])


@app.command()
def export(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Write the selected pairs as a Hugging Face `datasets` folder (parquet shards, images embedded)."""
    from flows.publish import export_flow

    console.print(f"{export_flow(_raw(params_file, param))} rows exported")


@app.command()
def datasheet(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Generate the datasheet and the dataset card that embeds it."""
    from flows.publish import datasheet_flow

    datasheet_flow(_raw(params_file, param))


@app.command()
def publish(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Push the export folder to the Hub when `export.repo_id` is set and HF_TOKEN is in the environment."""
    from tasks.export import push_if_configured
    from tasks.params import ExportParams

    raw = _raw(params_file, param)
    url = push_if_configured(Path(raw["paths"]["export"]), load_section(ExportParams, "export", raw))
    console.print(f"pushed to {url}" if url else "not pushed: set export.repo_id and HF_TOKEN to publish")


@app.command()
def run(source: Annotated[str | None, typer.Option(help="caption file (default: paths.captions_source)")] = None,
        profile: Annotated[str | None, typer.Option(help="demo | paper (default: params.yaml)")] = None,
        params_file: ParamsFile = PARAMS_FILE) -> None:
    """The whole DAG as one Prefect flow (what the scheduled deployment runs)."""
    from flows.pipeline import dataset_flow

    console.print_json(data=dataset_flow(source, profile, str(params_file)))


@app.command()
def serve(name: Annotated[str, typer.Option(help="deployment name")] = "refresh",
          cron: Annotated[str, typer.Option(help="schedule")] = "0 3 * * *",
          source: Annotated[str | None, typer.Option(help="caption file the refresh reads")] = None,
          profile: Annotated[str | None, typer.Option(help="demo | paper")] = None,
          params_file: ParamsFile = PARAMS_FILE) -> None:
    """Register the cron-scheduled `cfgen-dataset` deployment on PREFECT_API_URL and serve its runs."""
    from flows.pipeline import serve as serve_deployment

    serve_deployment(name, cron, source, profile, str(params_file))


@app.command()
def diff(rev_a: str, rev_b: str, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Compare the dataset at two git revisions or DVC experiments; writes markdown + HTML under paths.diff."""
    from flows.versions import write_diff

    for kind, path in write_diff(rev_a, rev_b, _raw(params_file, None)["paths"]).items():
        console.print(f"{kind}: {path}")


if __name__ == "__main__":
    app()
