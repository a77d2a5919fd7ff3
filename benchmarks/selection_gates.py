"""Selection's CLIP gates on the toy world, calibrated on scenes the demo never captions: how often the sample
selection keeps is a real counterfactual (truth's `accurate`), per `selection.min_clip_dir` x `min_image_image`.

    python benchmarks/selection_gates.py --scenes 60
    python benchmarks/selection_gates.py --scenes 60 --clip-weights models/arms/clip4k   # another CLIP's weights

The world's own edits of `--scenes` random scenes (`toy_world.edits`: a shape, a colour, a count, the phrases
swapped, a phrase deleted; each as the edit type the text stages give it), each pair rendered `generate.n_samples`
times by the generate stage's own loader, sampler and measurement at the demo profile's settings (its seeds, guidance
and p2p fraction drawn by `plan_sample`), read back by truth's judge, then picked by selection's own rule
(`thresholds.ranked`: the demo's subject margins and `rank_by`) under each pair of gates. Prints, per gate pair, the
pairs selected and the share that are real counterfactuals (95% interval), beside a random sample's and an oracle's
(any sample of the pair); then the same for the demo's own gates by edit type.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from bench import ROOT, console, start, table
from toy_world import WEIGHTS, edits

from tasks.config import load_params
from tasks.core.specs import ClipSpec, ModelSpec
from tasks.image.render import caption_texts, load_models, measure
from tasks.image.sampling import plan_sample, render
from tasks.image.thresholds import ranked
from tasks.tiny.images import TINY_CLIP_NAME
from tasks.toyworld import stats, truth, world
from tasks.toyworld.assemble import assemble

KINDS = {"noun (shape)": ("noun", "shape"), "lexical (colour)": ("lexical", "colour"),
         "quantifier": ("quantifier", "count"), "swap (phrases)": ("swap", None), "delete (phrase)": ("delete", None)}


def pair(name: str, spec_o: world.Spec, spec_c: world.Spec, kind: str) -> dict:
    """The pair as the image stage reads it: the edited attribute's two values as its spans (a swap or a delete:
    both captions whole)."""
    edit_type, attribute = KINDS[kind]
    caption, counterfactual = world.caption(spec_o), world.caption(spec_c)
    spans = ((str(getattr(spec_o.phrases[0], attribute)), str(getattr(spec_c.phrases[0], attribute))) if attribute
             else (caption, counterfactual))
    return {"caption_id": name, "caption": caption, "counterfactual": counterfactual, "edit_type": edit_type,
            "original_word": spans[0], "substitute": spans[1]}


def judged_samples(scenes: int, seed: int, clip_weights: Path) -> pl.DataFrame:
    """One row per sample: the pair, its scores and margins (`render.measure`), truth's accurate and minimal."""
    params = load_params(ROOT / "params.yaml", sections=("generate", "selection"))
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        assemble(WEIGHTS, out)
        if clip_weights != WEIGHTS:
            assemble(clip_weights, out / "other")
        clip = out / ("other" if clip_weights != WEIGHTS else "") / "clip"
        gp = params.generate.model_copy(update={
            "diffusion": ModelSpec(id=str(out / "diffusion")), "vae": None,
            "clip": ClipSpec(id=TINY_CLIP_NAME, pretrained=str(clip / "tiny_clip.safetensors"),
                             config=str(clip / f"{TINY_CLIP_NAME}.json"))})
        models, rng, rows = load_models(gp), random.Random(f"selection-gates:{seed}"), []
        for i in range(scenes):
            found = edits(rng)
            original = found.pop("original")
            for kind, spec_c in found.items():
                p = pair(f"{seed}:{i}:{kind}", original, spec_c, kind)
                samples = [plan_sample(gp, p["caption_id"], k) for k in range(gp.n_samples)]
                rendered = render(models.diffusion, models.diffusion.encode(p["caption"], p["counterfactual"]),
                                  samples, gp.steps, gp.size)
                scores = measure(rendered, caption_texts(models, p, gp), models, gp.clip_batch_size)
                for k, measured in enumerate(scores):
                    verdict = truth.judge_pair(*rendered.images[k], p["caption"], p["counterfactual"])
                    rows.append({"caption_id": p["caption_id"], "kind": kind, "sample": k, "reject_reason": None,
                                 **{c: v for c, v in measured.items() if c not in ("nan", "max_pixel_o",
                                                                                    "max_pixel_c")},
                                 "accurate": verdict["accurate"], "minimal": verdict["minimal"]})
    return pl.DataFrame(rows, infer_schema_length=None).with_columns(pl.col("reject_reason").cast(pl.String))


def picked(samples: pl.DataFrame, selection) -> pl.DataFrame:
    """The sample selection keeps per pair under `selection` (pairs with no passing sample drop out)."""
    return ranked(samples, selection).filter(pl.col("rank") == 0)


def cell(values: pl.Series) -> str:
    found = stats.rate(values)
    if not found["of"]:
        return "-"
    low, high = found["ci95"]
    return f"{found['rate']:.3f} ({low:.2f}–{high:.2f}), {found['count']}/{found['of']}"


def outcome(chosen: pl.DataFrame) -> str:
    """A gate pair's cell: the real counterfactuals among the pairs it selects, and the share of those that are
    also minimal (truth's: what both captions share unchanged and in place)."""
    real = chosen.filter(pl.col("accurate"))
    return f"{cell(chosen['accurate'])}; minimal {real['minimal'].mean() if real.height else 0:.2f}"


def main(scenes: int = 60, seed: int = 1,
         clip_weights: Annotated[Path, typer.Option(help="a weights folder whose clip.safetensors scores")] = WEIGHTS,
         min_clip_dir: Annotated[list[float], typer.Option()] = [-1.0, 0.0, 0.1, 0.2, 0.3],  # noqa: B006
         min_image_image: Annotated[list[float], typer.Option()] = [-1.0, 0.3, 0.5, 0.7]) -> None:  # noqa: B006
    samples = judged_samples(scenes, seed, clip_weights)
    selection = load_params(ROOT / "params.yaml", sections=("selection",)).selection
    pairs = samples.group_by("caption_id").agg(oracle=pl.col("accurate").any(), random=pl.col("accurate").mean())
    grid = table(f"Selected pairs that are real counterfactuals: {pairs.height} world edit pairs of {scenes} scenes "
                 f"(seed {seed}), {samples.height // pairs.height} samples each; random sample "
                 f"{pairs['random'].mean():.3f}, oracle {pairs['oracle'].mean():.3f}; CLIP {clip_weights}",
                 ["min_clip_dir", *(f"min_image_image {g:g}" for g in min_image_image)],
                 ["rate (95% interval), real counterfactuals / pairs selected; minimal: of those real ones; the "
                  "demo's subject margins and rank_by throughout"])
    for clip_dir in min_clip_dir:
        grid.add_row(f"{clip_dir:g}", *(outcome(picked(samples, selection.model_copy(update={
            "min_clip_dir": clip_dir, "min_image_image": gate}))) for gate in min_image_image))
    console.print(grid)
    chosen = picked(samples, selection)
    by_kind = table(f"The demo's gates (min_clip_dir {selection.min_clip_dir:g}, min_image_image "
                    f"{selection.min_image_image:g}) by edit", ["edit", "selected: real", "selected: minimal",
                                                                "random sample", "oracle"])
    for (kind,), group in samples.group_by("kind", maintain_order=True):
        kept = chosen.filter(pl.col("kind") == kind)
        part = pairs.join(group.select("caption_id").unique(), on="caption_id")
        by_kind.add_row(kind, cell(kept["accurate"]), cell(kept["minimal"]), f"{part['random'].mean():.3f}",
                        f"{part['oracle'].mean():.3f}")
    console.print(by_kind)


if __name__ == "__main__":
    start(main)
