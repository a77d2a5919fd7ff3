"""How well the committed toy-world models draw their captions and keep a pair minimal, by the world's own edits
(no text stage in between): per edit kind, pairs (C_o, C_c) of random scenes rendered by the pipeline's sampler
with attention sharing and without it (p2p fraction 0, same seed), read back by the checker.

    python benchmarks/toy_world.py --pairs 40 --steps 20

Prints, per edit kind: I_o accuracy (C_o shown), pair accuracy, minimality among accurate pairs, with and without
P2P, and the P2P gain; then the training record (steps, wall time per model, final losses) and the weights' size.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from bench import ROOT, console, start, table

from tasks.core.specs import ModelSpec
from tasks.image.sampling import Sample, encode_prompts, load_diffusion, render
from tasks.toyworld import checker, truth, world
from tasks.toyworld.assemble import assemble

WEIGHTS = ROOT / "tasks" / "toyworld" / "weights"


def edits(rng: random.Random) -> dict[str, world.Spec]:
    """One scene's spec and its edits of each kind (a kind its spec has no site for is left out)."""
    spec, _ = world.sample(rng)
    first = spec.phrases[0]
    out = {"original": spec,
           "noun (shape)": world.with_phrase(spec, 0, shape=rng.choice([s for s in world.SHAPES if s != first.shape])),
           "lexical (colour)": world.with_phrase(spec, 0, colour=rng.choice([c for c in world.COLOURS
                                                                            if c != first.colour]))}
    if first.count < 3:
        out["quantifier"] = world.with_phrase(spec, 0, count=first.count + 1, size="small")
    if spec.relation:
        out["swap (phrases)"] = replace(spec, phrases=spec.phrases[::-1])
        out["delete (phrase)"] = world.Spec(spec.phrases[:1])
    return out


def main(pairs: int = 40, steps: int = 20, guidance: float = 7.5, p2p_fraction: float = 0.6, seed: int = 0) -> None:
    with tempfile.TemporaryDirectory() as folder:
        assemble(WEIGHTS, Path(folder))
        diffusion = load_diffusion(ModelSpec(id=str(Path(folder) / "diffusion")), None)
        rng, results = random.Random(seed), {}
        started = time.perf_counter()
        for i in range(pairs):
            found = edits(rng)
            caption = world.caption(found.pop("original"))
            for kind, spec_c in found.items():
                counterfactual = world.caption(spec_c)
                prompts = encode_prompts(diffusion, caption, counterfactual)
                shared, alone = (render(diffusion, prompts, [Sample(seed * 10_000 + i, p, guidance)], steps,
                                        32).images[0] for p in (p2p_fraction, 0.0))
                results.setdefault(kind, []).append(
                    (checker.shows(shared[0], world.parse(caption)),
                     *truth.judge_pair(*shared, caption, counterfactual),
                     *truth.judge_pair(*alone, caption, counterfactual)))
        wall = time.perf_counter() - started
    out = table(f"Toy world, committed weights: {pairs} scenes, {steps} steps, guidance {guidance}, p2p fraction "
                f"{p2p_fraction} vs 0 ({wall:.0f} s)",
                ["edit kind", "pairs", "I_o accuracy", "pair accuracy", "minimality (P2P)", "pair accuracy (no P2P)",
                 "minimality (no P2P)", "P2P gain"])
    for kind, rows in results.items():
        a = np.array(rows, dtype=float)
        with_p2p = a[a[:, 1] == 1, 2].mean() if a[:, 1].any() else float("nan")
        without = a[a[:, 3] == 1, 4].mean() if a[:, 3].any() else float("nan")
        out.add_row(kind, str(len(rows)), f"{a[:, 0].mean():.2f}", f"{a[:, 1].mean():.2f}", f"{with_p2p:.2f}",
                    f"{a[:, 3].mean():.2f}", f"{without:.2f}", f"{with_p2p - without:+.2f}")
    console.print(out)
    record = json.loads((WEIGHTS / "train.json").read_text())
    trained = table("Training (cfgen toy-world train, CPU)", ["model", "steps", "wall s", "final loss"])
    for name, seconds in record["seconds"].items():
        steps_key = {"vae": "vae_steps", "diffusion": "diffusion_steps", "clip": "clip_steps"}.get(name, "lm_steps")
        trained.add_row(name, str(record["schedule"][steps_key]), f"{seconds:.0f}",
                        f"{record['losses_per_50_steps'][name][-1]:.4f}")
    console.print(trained)
    size = sum(p.stat().st_size for p in WEIGHTS.rglob("*") if p.is_file())
    console.print(f"weights: {size / 2 ** 20:.1f} MiB in {WEIGHTS.relative_to(ROOT)}")


if __name__ == "__main__":
    start(main)
