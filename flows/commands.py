"""The tools' `cfgen` commands (plan, tiny-models, synthetic-coco, toy-world), one group `flows.cli` loads when one
of them runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast

import typer

from flows.cli import ParamOption, ParamsFile
from flows.engine.console import OneLineUsage, console, user_errors
from tasks.config import PARAMS_FILE, load_params
from tasks.core.errors import UserError
from tasks.core.io import check_distinct, check_folder, check_outputs, check_source
from tasks.core.publication import check_filled
from tasks.core.writing import write_json, write_text

SEEDS = typer.Option(min=0, max=2**32 - 1, help="what every seeded generator takes (0 to 2**32-1)")
Positive = Annotated[int | None, typer.Option(min=1)]


tools = typer.Typer(add_completion=False)


@tools.command("plan", cls=OneLineUsage)
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
        check_distinct(source, output, params_file=params_file)
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


@tools.command("tiny-models", cls=OneLineUsage)
def tiny_models(source: Path, output: Path, param: ParamOption = None,
                params_file: ParamsFile = PARAMS_FILE) -> None:
    """Build the demo profile's tiny random models from a caption file (offline, seeded, deterministic)."""
    with user_errors():
        params = load_params(params_file, param or [], ("tiny_models",))
        check_source(source)
        check_folder(output)
        from tasks.demo.tiny_models import WRITES, build

        check_filled(output, WRITES)
        build(source, output, params.tiny_models)
        console.print(f"tiny models written to {output}")


@tools.command("synthetic-coco", cls=OneLineUsage)
def synthetic_coco(output: Path, param: ParamOption = None, params_file: ParamsFile = PARAMS_FILE) -> None:
    """Build the demo's COCO-format object-removal input (offline, seeded, deterministic)."""
    with user_errors():
        params = load_params(params_file, param or [], ("synthetic_coco",))
        if params.profile != "demo":
            raise UserError(f"profile {params.profile} reads the demo's synthetic COCO: point paths.removal_instances, "
                            "removal_captions_source and removal_images at COCO val2017")
        check_folder(output)
        from tasks.demo.synthetic_coco import WRITES, build

        check_filled(output, WRITES)
        build(output, params.synthetic_coco)
        console.print(f"synthetic COCO written to {output}")


toy_world = typer.Typer(help="The toy world: its captions, and the training of its miniature models "
                        "(tiny_models.toy_world).", no_args_is_help=True)


Rate = Annotated[float | None, typer.Option(min=0.0, max=1.0)]
Draw = Annotated[str | None, typer.Option(
    help="stream: scenes drawn in the training process from one seeded stream (the committed run); pool: each batch "
         "from its own seed, by --workers processes")]
Heads = Annotated[int | None, typer.Option(min=1, help="heads per UNet attention layer")]
MinSnrGamma = Annotated[float | None, typer.Option(
    min=0.01, help="Min-SNR-γ weighting of the UNet's ε-loss")]
ParseSteps = Annotated[int | None, typer.Option(
    min=0, help="pre-train the text encoder to parse captions for this many steps, then freeze it (0: trained with "
                "the UNet)")]
Grounding = Annotated[float | None, typer.Option(
    min=0.0, max=100.0, help="weight of the cross-attention grounding loss (0: off)")]
LowSnr = Annotated[float | None, typer.Option(
    min=0.0, max=1.0, help="share of timesteps drawn from SNR ≤ 1 in the first half")]
Spacing = Annotated[str | None, typer.Option(help="the sampler's timestep spacing: leading (SD v1's) or trailing")]
Device = Annotated[str | None, typer.Option(help="auto (CUDA when torch sees a GPU, else the CPU), cpu, cuda, cuda:i")]
Workers = Annotated[int | None, typer.Option(min=0, help="processes drawing a pool's batches (0: this one)")]
Compile = Annotated[bool | None, typer.Option(
    "--compile/--no-compile", help="torch.compile the UNet's training step (default: off)")]
CheckpointEvery = Annotated[int | None, typer.Option(
    min=0, help="steps between checkpoints (in the staging folder .OUTPUT.training; 0: none; default 500)")]
Resume = Annotated[bool | None, typer.Option(
    "--resume", help="continue from the staging folder's checkpoint (if any)")]
EvalScenes = Annotated[int | None, typer.Option(
    min=0, help="fixed scenes the diffusion model draws at each checkpoint and at its end, read back by the checker "
                "(train.json: accuracy; default 64)")]
Only = Annotated[list[str] | None, typer.Option(
    help="train this model only (vae, diffusion, clip or lms; repeatable): the others are copied from --reuse")]
Reuse = Annotated[Path | None, typer.Option(
    help="the weights --only leaves untrained come from (default: the committed ones)")]
ReplaceCommitted = Annotated[bool | None, typer.Option(
    "--replace-committed", help="OUTPUT may be the committed weights folder")]


@toy_world.command("train", cls=OneLineUsage)
def toy_world_train(output: Annotated[Path, typer.Argument(help="where the compact weights go (a new or empty folder, "
                                                                 "or earlier weights to replace)")],
                    seed: Annotated[int | None, SEEDS] = None,
                    vae_steps: Positive = None, diffusion_steps: Positive = None, clip_steps: Positive = None,
                    lm_steps: Positive = None, batch: Positive = None, lr: Rate = None, draw: Draw = None,
                    attention_heads: Heads = None, min_snr_gamma: MinSnrGamma = None, ema_decay: Rate = None,
                    parse_steps: ParseSteps = None, grounding: Grounding = None, low_snr: LowSnr = None,
                    spacing: Spacing = None, device: Device = None, workers: Workers = None,
                    compile_unet: Compile = None, checkpoint_every: CheckpointEvery = None, resume: Resume = None,
                    eval_scenes: EvalScenes = None, only: Only = None, reuse: Reuse = None,
                    replace_committed: ReplaceCommitted = None) -> None:
    """Train the diffusion model (VAE, text encoder, UNet), the CLIP model and the two text LMs on toy-world scenes
    (seeded; on a GPU when there is one), with a progress bar and checkpoints. A recipe option left out takes the
    committed run's value (`tasks.toyworld.params.Schedule`), which computes the committed weights again on the CPU.
    OUTPUT is built in a staging folder beside it and replaces it whole once the run ends."""
    given = {k: v for k, v in (locals() | {"only": tuple(only or ()) or None, "progress": True}).items()
             if v is not None}
    with user_errors():
        check_folder(output)
        from tasks.toyworld.folders import check_output

        check_output(output, bool(replace_committed))
        from dataclasses import fields

        from tasks.toyworld.loop import Run
        from tasks.toyworld.params import Schedule
        from tasks.toyworld.train import train

        schedule, run = (cls(**{f.name: given[f.name] for f in fields(cls) if f.name in given}) for cls in (
            Schedule, Run))
        record = train(output, cast(Schedule, schedule), cast(Run, run))
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


tools.add_typer(toy_world, name="toy-world")
