"""The `cfgen` commands over the whole DAG and its versions: `run` (the DAG as one Prefect flow), `serve` (its
scheduled deployment), `with-server` (one Prefect server for a command such as `dvc repro`), `diff` (two dataset
versions) and `publish` (the export to the Hub)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.engine.console import console, user_errors
from flows.cli import ParamOption, ParamsFile
from flows.preflight import check_run_models, on_engine
from tasks.config import PARAMS_FILE, literal_overrides, load_params
from tasks.core.errors import UserError
from tasks.core.io import check_source
from tasks.stages import Params

dag = typer.Typer(add_completion=False)


@dag.command("publish")
def publish(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Push the export folder to the Hub when `export.repo_id` is set and HF_TOKEN is in the environment."""
    with user_errors():
        params = load_params(params_file, param or [], ("export",))
        from tasks.release.export import push_if_configured

        url = push_if_configured(params.paths.export, params.export)
    console.print(f"pushed to {url}" if url else "not pushed: set export.repo_id and HF_TOKEN to publish")


def checked_run(source: str | None, profile: str | None, param: list[str] | None, params_file: Path) -> Params:
    """The params of a whole-DAG run (`run`, `serve`): every section, `source` and `profile` applied, the caption file
    and every model the run loads checked, before any server starts."""
    params = load_params(params_file, [*(param or []), *literal_overrides({"paths.captions_source": source,
                                                                          "profile": profile})])
    check_source(params.paths.captions_source)
    check_run_models(params)
    return params


@dag.command("run")
def run(source: Annotated[str | None, typer.Option(help="caption file (default: paths.captions_source)")] = None,
        profile: Annotated[str | None, typer.Option(help="demo | paper (default: params.yaml)")] = None,
        param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """The whole DAG as one Prefect flow, every model checked first (what the scheduled deployment runs)."""
    with user_errors():
        params = checked_run(source, profile, param, params_file)
        from flows.engine.server import prefect_api
        from flows.pipeline import dataset_flow

        with on_engine(params), prefect_api():
            console.print_json(data=dataset_flow(source, profile, str(params_file), param or []))


@dag.command("serve")
def serve(name: Annotated[str, typer.Option(help="deployment name")] = "refresh",
          cron: Annotated[str, typer.Option(help="schedule")] = "0 3 * * *",
          source: Annotated[str | None, typer.Option(help="caption file the refresh reads")] = None,
          profile: Annotated[str | None, typer.Option(help="demo | paper")] = None,
          param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Register the cron-scheduled `cfgen-dataset` deployment on PREFECT_API_URL and serve its runs (every model
    checked first)."""
    with user_errors():
        checked_run(source, profile, param, params_file)
        from flows.engine.server import lasting_api

        lasting_api()
        from flows.engine.serving import serve as serve_flow
        from flows.pipeline import dataset_flow  # every flow: imported once the checks passed

        serve_flow(dataset_flow, name, cron, {"source": source, "profile": profile, "params_file": str(params_file),
                                              "overrides": param or []})


@dag.command("diff")
def diff(rev_a: str, rev_b: str, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Compare the dataset at two git revisions or DVC experiments; writes markdown + HTML under paths.diff."""
    with user_errors():
        paths = load_params(params_file, sections=()).paths
        from flows.versions import write_diff

        for kind, path in write_diff(rev_a, rev_b, paths).items():
            console.print(f"{kind}: {path}")


@dag.command("with-server", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def with_server(ctx: typer.Context) -> None:
    """`cfgen with-server -- CMD [ARGS...]`: run CMD (e.g. `dvc repro`) with one temporary Prefect server shared by
    all its processes, stopped when CMD ends; exits with CMD's code."""
    from flows.engine.server import run_with_server

    with user_errors():
        if not ctx.args:
            raise UserError("with-server needs a command, e.g. `cfgen with-server -- dvc repro`")
        raise typer.Exit(run_with_server(ctx.args))
