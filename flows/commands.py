"""The `cfgen` commands whose inputs and outputs all come from `paths` (evaluation, validation, release, object
removal: each declared beside its flow as a `PathsCommand`, whose module only its own command imports), and the
tools' commands (plan, tiny-models, synthetic-coco, toy-world)."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.engine.console import OneLineUsage, console, user_errors
from tasks.config import PARAMS_FILE, load_params
from tasks.core.errors import UserError
from tasks.core.io import check_folder, check_outputs, write_json, write_text
from tasks.core.source import read_module
from tasks.params import Params
from tasks.stages import registered

ParamOption = Annotated[list[str] | None, typer.Option("--param", "-p", help="key=value override, e.g. "
                                                        "similarity.upper=0.9 (repeatable)")]
ParamsFile = Annotated[Path, typer.Option("--params-file", help="the params file to read")]
SEEDS = typer.Option(min=0, max=2**32 - 1, help="what every seeded generator takes (0 to 2**32-1)")
Positive = Annotated[int | None, typer.Option(min=1)]


def check_models(*sections: Any) -> None:
    """Every model of the params sections is on this machine, before any is loaded (as `cfgen plan` checks): a missing
    folder, or a hub model not in the cache at its pinned revision, is one line naming the command that fetches it; a
    local folder without the processor config its loader reads first, one line naming the folder."""
    from tasks.core.fingerprints import model_fingerprints
    from tasks.plan.preflight import incomplete, missing

    if absent := [line for section in sections for line in missing(section)]:
        raise UserError(f"these models are not on this machine: {'; '.join(absent)}")
    for section in sections:
        model_fingerprints(section)
    if lacking := [line for section in sections for line in incomplete(section)]:
        raise UserError("; ".join(lacking))


def check_run_models(params: Params) -> None:
    """`check_models` before a whole run (`cfgen run`, `cfgen serve`) over every section with a model it loads
    (`Params.running_models`); the demo profile's are built by its first stage, so nothing is looked for there."""
    from tasks.plan.preflight import running_sections

    if params.profile != "demo":
        check_models(*running_sections(params))


def on_engine(params: Params) -> contextlib.AbstractContextManager:
    """The engine a run's flows go through, checked before the Prefect API starts (no server for a dead address):
    PREFECT_HOME and the result store can take files (else one line: a run that persists nothing would recompute it
    all after a kill); with `engine.dask_address`, its scheduler answers now (else one line) and a scheduler lost
    mid-run becomes one line (`flows.engine.cluster`)."""
    from flows.engine.server import check_home
    from flows.engine.workspace import result_store

    check_home()
    check_folder(result_store(params))
    if not params.engine.dask_address:
        return contextlib.nullcontext()
    from flows.engine.cluster import check_scheduler, scheduler_loss_is_one_line

    check_scheduler(params.engine.dask_address)
    return scheduler_loss_is_one_line(params.engine.dask_address)


def show_json(result: Any) -> None:
    console.print_json(data=result)


def check_source(source: Path) -> None:
    if not source.is_file():
        raise UserError(f"caption file {source} does not exist")


@dataclass(frozen=True)
class PathsCommand:
    """A command whose inputs and outputs all come from `paths`, declared beside its flow and registered under the
    `cfgen.commands` entry-point group: `check(params)` raises a UserError for a missing model or a bad input before
    any server starts, then `flow(params)` runs under one Prefect API and `show` prints its result."""

    flow: Callable[[Params], Any]
    help: str
    show: Callable[[Any], None] = show_json
    check: Callable[[Params], None] | None = None


COMMANDS = "cfgen.commands"


def command_names() -> list[str]:
    """The registered paths commands' names (read from the package metadata: nothing is imported)."""
    return [point.name for point in entry_points(group=COMMANDS)]


def command_help(name: str) -> str:
    """The `help` of registered paths command `name`, read from its declaration's source (nothing is imported)."""
    point = next(iter(entry_points(group=COMMANDS, name=name)))
    declared = read_module(point.module).definitions[point.attr][-1].value  # NAME = PathsCommand(flow, help, ...)
    return ast.literal_eval(next((k.value for k in declared.keywords if k.arg == "help"), None) or declared.args[1])


def paths_command(name: str):
    """The CLI command of registered paths command `name`: its module is imported when it runs (`--help` reads the
    declaration's help from the source)."""

    def command(param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
        with user_errors():
            params = load_params(params_file, param or [])
            declared: PathsCommand = registered(COMMANDS, name)
            if declared.check is not None:
                declared.check(params)
            from flows.engine.server import prefect_api

            with prefect_api():
                result = declared.flow(params)
        declared.show(result)

    command.__doc__ = command_help(name)
    return command


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
        check_folder(output)
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
        check_folder(output)
        from tasks.demo.synthetic_coco import build

        build(output, params.synthetic_coco)
        console.print(f"synthetic COCO written to {output}")


toy_world = typer.Typer(help="The toy world: its captions, and the training of its miniature models "
                        "(tiny_models.toy_world).", no_args_is_help=True)


@toy_world.command("train", cls=OneLineUsage)
def toy_world_train(output: Annotated[Path, typer.Argument(help="where the compact weights go")] = Path(
                        "tasks/toyworld/weights"),
                    seed: Annotated[int | None, SEEDS] = None,
                    vae_steps: Positive = None, diffusion_steps: Positive = None, clip_steps: Positive = None,
                    lm_steps: Positive = None, batch: Positive = None,
                    lr: Annotated[float | None, typer.Option(min=0.0, max=1.0)] = None,
                    draw: Annotated[str | None, typer.Option(
                        help="stream: scenes drawn in the training process from one seeded stream (the committed "
                             "run); pool: each batch from its own seed, by --workers processes")] = None,
                    attention_heads: Annotated[int | None, typer.Option(
                        min=1, help="heads per UNet attention layer (8: the committed run's)")] = None,
                    min_snr_gamma: Annotated[float | None, typer.Option(
                        min=0.01, help="Min-SNR-γ weighting of the UNet's ε-loss (left out: plain ε-loss)")] = None,
                    ema_decay: Annotated[float | None, typer.Option(min=0.0, max=1.0)] = None,
                    device: Annotated[str | None, typer.Option(
                        help="auto (CUDA when torch sees a GPU, else the CPU), cpu, cuda, cuda:i")] = None,
                    workers: Annotated[int | None, typer.Option(min=0, help="processes drawing a pool's "
                                                                            "batches (0: this one)")] = None,
                    compile_unet: Annotated[bool | None, typer.Option(
                        "--compile/--no-compile", help="torch.compile the UNet's training step (default: off)")] = None,
                    checkpoint_every: Annotated[int | None, typer.Option(
                        min=0, help="steps between checkpoints (OUTPUT/checkpoint.pt; 0: none; default 500)")] = None,
                    resume: Annotated[bool | None, typer.Option(
                        "--resume", help="continue from OUTPUT's checkpoint (if any)")] = None,
                    eval_scenes: Annotated[int | None, typer.Option(
                        min=0, help="fixed scenes the diffusion model draws at each checkpoint and at its end, read "
                                    "back by the checker (train.json: accuracy; default 64)")] = None,
                    only: Annotated[list[str] | None, typer.Option(
                        help="train this model only (vae, diffusion, clip or lms; repeatable): the others are "
                             "copied from --reuse")] = None,
                    reuse: Annotated[Path | None, typer.Option(
                        help="the weights --only leaves untrained come from (default: the committed ones)")] = None
                    ) -> None:
    """Train the diffusion model (VAE, text encoder, UNet), the CLIP model and the two text LMs on toy-world scenes
    (seeded; on a GPU when there is one), with a progress bar and checkpoints. A recipe option left out takes the
    committed run's value (`tasks.toyworld.params.Schedule`: seed 0, 3,000 UNet steps; 39 min on 2 cores), which
    computes the committed weights again on the CPU."""
    given = {k: v for k, v in (locals() | {"only": tuple(only or ()) or None, "progress": True}).items()
             if v is not None}
    with user_errors():
        check_folder(output)
        from dataclasses import fields

        from tasks.toyworld.loop import Run
        from tasks.toyworld.params import Schedule
        from tasks.toyworld.train import train

        schedule, run = (cls(**{f.name: given[f.name] for f in fields(cls) if f.name in given}) for cls in (
            Schedule, Run))
        record = train(output, schedule, run)
        console.print(f"weights written to {output} on {record['device']}: {record['seconds']} s; diffusion "
                      f"accuracy {record.get('accuracy', {}).get('curve', ['not read'])[-1]}")


@toy_world.command("captions", cls=OneLineUsage)
def toy_world_captions(output: Path, count: Annotated[int, typer.Option(min=1)] = 100,
                       seed: Annotated[int, SEEDS] = 0) -> None:
    """`count` toy-world captions, one scene each, as a `caption_id<TAB>caption` TSV (ids `7{scene:05d}_0`)."""
    with user_errors():
        from tasks.toyworld.world import captions

        check_outputs(output)
        write_text(output, "".join(f"7{i:05d}_0\t{text}\n" for i, text in enumerate(captions(count, seed), 1)))
        console.print(f"{count} captions written to {output}")


def register(app: typer.Typer) -> None:
    """Add the tools' commands (plan, tiny-models, synthetic-coco, toy-world) to `app`."""
    for name, command in (("plan", plan), ("tiny-models", tiny_models), ("synthetic-coco", synthetic_coco)):
        app.command(name, cls=OneLineUsage)(command)
    app.add_typer(toy_world, name="toy-world")
