"""The `cfgen` commands built from a table: those whose inputs and outputs all come from `paths` (evaluation,
validation, release, object removal). Each imports its flow module only when it runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.engine.console import console, user_errors
from tasks.core.config import PARAMS_FILE, load_params
from tasks.core.errors import UserError
from tasks.core.io import check_outputs, write_json
from tasks.core.params import Params

ParamOption = Annotated[list[str] | None, typer.Option("--param", "-p", help="key=value override, e.g. "
                                                        "similarity.upper=0.9 (repeatable)")]
ParamsFile = Annotated[Path, typer.Option("--params-file", help="the params file to read")]


def check_models(section: Any) -> None:
    """Every model of a params section is identifiable (a missing folder fails here, before any work)."""
    from tasks.core.fingerprints import model_fingerprints

    model_fingerprints(section)


def check_source(source: Path) -> None:
    if not source.is_file():
        raise UserError(f"caption file {source} does not exist")


def _load(target: str) -> Callable:
    """`module:name`, imported the way an import statement does (unlike `importlib.import_module`, which bypasses it),
    so `-X importtime`, which traces each DVC stage's code deps, sees the module."""
    module, _, name = target.partition(":")
    return getattr(__import__(module, fromlist=[name]), name)


def paths_command(flow: str, doc: str, show: Callable[[Any], None], check: Callable[[Params], None] | None = None):
    """A command whose inputs and outputs all come from `paths`: it runs `module:flow(params)` under one Prefect API
    (after `check(params)`, which raises a UserError for a missing model or a bad input before any server starts)
    and shows the result with `show`."""

    def command(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
        with user_errors():
            params = load_params(params_file, param or [])
            if check is not None:
                check(params)
            from flows.engine.server import prefect_api

            with prefect_api():
                result = _load(flow)(params)
        show(result)

    command.__doc__ = doc
    return command


def _show_json(result: Any) -> None:
    console.print_json(data=result)


def _check_inpaint(params: Params) -> None:
    if params.inpaint.fill == "inpaint":
        check_models(params.inpaint)


def plan(source: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE,
         workers: Annotated[int, typer.Option(min=1, help="GPU workers the run will have")] = 1,
         sample: Annotated[int, typer.Option(min=1, help="captions run through the caption stages")] = 200,
         pass_rate: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="share of screening samples that "
                                                         "pass selection (default: measured on paths.samples)")] = None,
         bench_steps: Annotated[int, typer.Option(min=1, help="denoising steps each benchmark render takes")] = 2,
         output: Annotated[Path, typer.Option(help="the plan as JSON")] = Path("reports/plan.json")) -> None:
    """Pre-flight before GPU spend: models present offline, devices, a micro-benchmark on this device, and the run's
    caption pairs, UNet rows, GPU-hours, disk and wall time on K workers. When the run may not start (a model
    missing, disk short): the plan, then one `error:` line and exit code 2."""
    with user_errors():
        params = load_params(params_file, param or [])
        check_source(source)
        check_outputs(output)
        from flows.plan import make_plan, show_plan

        report = make_plan(source, params, params_file, param or [], workers, sample, pass_rate, bench_steps)
        write_json(report, output)
    show_plan(report)
    with user_errors():
        if report["missing"]:
            raise UserError(f"{len(report['missing'])} models are not on this machine ({', '.join(report['missing'])}):"
                            " fetch each with its line above, then plan again")
        if not report["ready"]:
            raise UserError(f"not enough free disk for the run: {'; '.join(report['disk_short'])}")


def tiny_models(source: Path, output: Path, param: ParamOption = None,
                params_file: ParamsFile = PARAMS_FILE) -> None:
    """Build the demo profile's tiny random models from a caption file (offline, seeded, deterministic)."""
    with user_errors():
        params = load_params(params_file, param or [])
        check_source(source)
        from tasks.demo.tiny_models import build

        build(source, output, params.tiny_models)
        console.print(f"tiny models written to {output}")


def synthetic_coco(output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Build the demo's COCO-format object-removal input (offline, seeded, deterministic)."""
    with user_errors():
        params = load_params(params_file, param or [])
        if params.profile != "demo":
            raise UserError(f"profile {params.profile} reads the demo's synthetic COCO: point paths.removal_instances, "
                            "removal_captions_source and removal_images at COCO val2017")
        from tasks.demo.synthetic_coco import build

        build(output, params.synthetic_coco)
        console.print(f"synthetic COCO written to {output}")


PATHS_COMMANDS = {  # name: (module:flow, help, show the result, check(params) run before any server starts)
    "evaluate": ("flows.evaluation:evaluate_flow", "Zero-shot retrieval R@k and ITM score differences of every "
                 "`evaluate.models` entry on the selected pairs (and ODmAP@k on the object-removal pairs).",
                 lambda m: _show_json({k: v["all"] for k, v in m["models"].items()}),
                 lambda p: check_models(p.evaluate)),
    "validation-tasks": ("flows.validation:validation_tasks_flow", "Label Studio tasks (one per generated image) and "
                         "labeling config.", lambda n: console.print(f"{n} tasks written"), None),
    "validation": ("flows.validation:validation_flow", "Read Label Studio's export: Table 1, Fleiss' kappa, the "
                   "validated subset.", lambda r: _show_json({k: v for k, v in r.items() if k != "disagreements"}),
                   lambda p: _load("flows.validation:check_export")(p)),
    "report": ("flows.release:report_flow", "reports/metrics.json, figures and plot data for the current run.",
               lambda metrics: _show_json(metrics["funnel"]), None),
    "export": ("flows.release:export_flow", "Write the selected pairs as a Hugging Face `datasets` folder (images "
               "embedded).", lambda rows: console.print(f"{rows} rows exported"), None),
    "mixtures": ("flows.release:mixtures_flow", "Build the base / medium / all training mixtures as `datasets` "
                 "configs.", lambda result: _show_json(result["sizes"]), None),
    "removal-masks": ("flows.removal.masks:removal_masks_flow", "Object removal: which (image, class) pairs to "
                      "remove, from the COCO instances file.", _show_json, None),
    "removal-captions": ("flows.removal.captions:removal_captions_flow", "Object removal: the edited captions and "
                         "the ODmAP gallery.", _show_json, None),
    "inpaint": ("flows.removal.inpaint:inpaint_flow", "Object removal: fill each removed region (cached per edit).",
                _show_json, _check_inpaint),
    "removal-selection": ("flows.removal.selection:removal_selection_flow", "Object removal: the CLIP check and the "
                          "splits.", _show_json, lambda p: check_models(p.removal_selection)),
    "removal-export": ("flows.removal.export:removal_export_flow", "Object removal: the pairs as a `datasets` "
                       "folder with its card.", _show_json, None),
    "datasheet": ("flows.release:datasheet_flow", "Generate the datasheet and the dataset card that embeds it.",
                  lambda _: None, None),
}


def register(app: typer.Typer) -> None:
    """Add the tables' commands and the tools' (plan, tiny-models, synthetic-coco) to `app`."""
    for name, (flow, doc, show, check) in PATHS_COMMANDS.items():
        app.command(name)(paths_command(flow, doc, show, check))
    for name, command in (("plan", plan), ("tiny-models", tiny_models), ("synthetic-coco", synthetic_coco)):
        app.command(name)(command)
