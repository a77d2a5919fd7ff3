"""The evaluate stage at the dataset's size: wall time and peak RSS of R@k, ODmAP@k and a cross-encoder's re-rank at
N pairs (2N captions × 2N images), and of the evaluate flow end to end on generated PNGs with the demo's tiny models,
with every image read and every real image hashed counted.

    python benchmarks/evaluation_scale.py                                  # N = 35,000, 2,000 PNG pairs
    python benchmarks/evaluation_scale.py --pairs 3500 --pairs 35000       # how each measure grows with N
    python benchmarks/evaluation_scale.py --pairs 0 --real-pairs 100 --real-pairs 1000   # the flow alone
    python benchmarks/evaluation_scale.py --project /tmp/before            # another checkout's code
    python benchmarks/evaluation_scale.py --report OUT.json                # print a saved run's tables again

Every measure runs in a fresh process through the real `tasks.evaluation` code, CPU:
- bi-encoder R@k: random unit embeddings (`--dim`) as an `Embedded`, both directions ranked in blocks (`recall`);
- ODmAP@k: N / 5 edited images query a gallery of 2N captions of random classes (`ranked`, `odmap`);
- cross-encoder R@k: a stand-in cross-encoder whose score is a fixed function of caption and pixels (read by a
  reader that makes a 1×1 image from the key, no disk) re-ranks the random bi-encoder's top `--rerank-k`; "re-rank"
  is the time inside `retrieval.rerank` (the pairs scored, ~4N·k, and their ordering), the rest is the first stage;
- end to end (`evaluation_flow`): `evaluate_flow` on `--real-pairs` pairs of generated PNGs with the tiny open_clip,
  HF CLIP and ViLT (re-ranking open_clip's top `--rerank-k`), every image read and real image hashed counted.
RSS: at the start (imports done), after the models (the embeddings, or the loaded tiny models) and the peak
(`ru_maxrss`); "beyond models" = peak − after models. Every row runs `--repeats` times, the rows alternating (each
round runs every row once); the table prints median (min–max) and a legend of its columns. The dense approach it
replaces is given as computed numbers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from bench import ROOT, Repeats, alternating, console, in_fresh_process, spread, start, table, time_inside
from evaluation_flow import measure_end_to_end, reads_table, real_images, rss_mib

from tasks.core.writing import json_text

GiB = 2**30


def random_embedded(captions: list[str], keys: list[str], dim: int, seed: int):
    """An `Embedded` of random unit vectors: a bi-encoder's output without the model."""
    import torch
    import torch.nn.functional as F

    from tasks.evaluation.scorers import Embedded

    generator = torch.Generator().manual_seed(seed)
    vectors = [F.normalize(torch.randn(len(items), dim, generator=generator), dim=-1) for items in (captions, keys)]
    return Embedded({c: n for n, c in enumerate(captions)}, vectors[0], {k: n for n, k in enumerate(keys)},
                    vectors[1], 100.0)


def synthetic_pairs(n: int) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """(ground-truth pairs, captions, image keys) of n counterfactual pairs: C_o, C_c, I_o, I_c each."""
    pairs = [(f"caption {j}", f"{j:08x}.png") for j in range(2 * n)]
    return pairs, [c for c, _ in pairs], [k for _, k in pairs]


def recall(model, first, pairs: list[tuple[str, str]], read, params) -> dict[str, float]:
    """`evaluate.recall` over ground-truth pairs, its first stage included."""
    from tasks.evaluation import evaluate
    from tasks.evaluation.retrieval import RetrievalSet

    rs = RetrievalSet.of(pairs)
    firsts = evaluate.first_stage(model, first, rs.captions, rs.images, max(params.ks), params.rerank_k, (False, True))
    return evaluate.recall(model, firsts, rs, read, params)


def measure_bi_encoder(n: int, dim: int, ks: tuple[int, ...]) -> dict:
    from tasks.evaluation.params import EvaluateParams

    base = rss_mib()
    pairs, captions, keys = synthetic_pairs(n)
    model = random_embedded(captions, keys, dim, seed=0)
    models = rss_mib()
    started = time.perf_counter()
    recall(model, None, pairs, None, EvaluateParams(models={}, ks=ks))
    return {"wall": time.perf_counter() - started, "base": base, "models": models, "peak": rss_mib(),
            "scored": 0}


def measure_odmap(n: int, dim: int, ks: tuple[int, ...]) -> dict:
    import numpy as np

    from tasks.evaluation import evaluate, odmap
    from tasks.evaluation.scorers import Images

    base = rss_mib()
    rng = np.random.default_rng(0)
    classes = [f"class{c}" for c in range(20)]
    gallery = [set(rng.choice(classes, 3)) for _ in range(2 * n)]
    queries = [f"{j:08x}.png" for j in range(n // 5)]
    removed = [set(rng.choice(classes, 1)) for _ in queries]
    remaining = [set(rng.choice(classes, 2)) for _ in queries]
    captions = [f"caption {j}" for j in range(2 * n)]
    model = random_embedded(captions, queries, dim, seed=1)
    models = rss_mib()
    started = time.perf_counter()
    firsts = evaluate.first_stage(model, None, captions, queries, max(ks), None, (False,))
    (ranked,) = evaluate.ranked(model, firsts, captions, Images(tuple(queries), None), max(ks), None)
    odmap.od_map(odmap.relevance(removed, remaining, gallery, ranked), ks, "relevant")
    return {"wall": time.perf_counter() - started, "base": base, "models": models, "peak": rss_mib(),
            "scored": 0}


def measure_rerank(n: int, dim: int, ks: tuple[int, ...], rerank_k: int) -> dict:
    import numpy as np
    import torch

    from tasks.evaluation import evaluate
    from tasks.evaluation.params import EvaluateParams
    from tasks.evaluation.scorers import CrossEncoder

    base = rss_mib()
    pairs, captions, keys = synthetic_pairs(n)
    first = random_embedded(captions, keys, dim, seed=0)
    models = rss_mib()
    spent, scored = [0.0], [0]

    def score(texts: list[str], images: list[np.ndarray]) -> torch.Tensor:
        scored[0] += len(texts)
        return torch.tensor([len(t) + float(x[0, 0, 0]) for t, x in zip(texts, images)])

    def read(key: str) -> np.ndarray:
        return np.full((1, 1, 3), int(key[:8], 16) % 251, dtype=np.uint8)

    time_inside(evaluate, "rerank", spent)
    started = time.perf_counter()
    recall(CrossEncoder(score), first, pairs, read, EvaluateParams(models={}, ks=ks, rerank_k=rerank_k))
    return {"wall": time.perf_counter() - started, "rerank": spent[0], "base": base, "models": models,
            "peak": rss_mib(), "scored": scored[0]}


def dense_needs(n: int, size: int) -> dict[str, float]:
    """What the dense evaluation needed at n pairs of size² images: GiB held at once, cross-encoder passes."""
    captions = images = 2 * n
    return {"pixels": images * size * size * 3 / GiB, "scores": captions * images * 4 / GiB,
            "argsort": captions * images * 8 / GiB, "truth": captions * images / GiB,
            "cross_pairs": captions * images}


LEGEND = (
    "Each run: a fresh process; the runs alternate between the rows (each round runs every row once).",
    "wall s: seconds of the measured call in that process, a total over all queries: `evaluate.recall` (R@k rows), "
    "`evaluate.ranked` + `odmap.od_map` (ODmAP@k), `evaluate_flow` (end to end); data and models are made before the "
    "clock starts.",
    "re-rank s: seconds inside `rerank` (as `evaluate` calls it) during that same call; the rest of wall s is the "
    "first stage. pairs scored: (caption, image) pairs the cross-encoder scored in that call.",
    "RSS start / after models / peak MiB: the process's peak RSS so far (ru_maxrss) once imports are done, once the "
    "embeddings are made or the tiny models loaded, and at the end; beyond models: peak − after models of each run.",
)


def report(saved: dict) -> None:
    """Per measure and N: each quantity's median (min–max) over the runs (a row of a run saved before repeats: its
    one run); then the dense approach's computed needs."""
    config = saved["config"]
    result = table(f"evaluate at scale (CPU, dim {config['dim']}, ks {config['ks']}, rerank_k {config['rerank_k']}); "
                   f"median (min–max) of {config.get('repeats', 1)} runs",
                   ("measure", "pairs", "captions × images", "wall s", "re-rank s", "pairs scored", "RSS start MiB",
                    "after models MiB", "peak MiB", "beyond models MiB"), LEGEND)
    for row in saved["rows"]:
        runs = row.get("runs", [row])
        result.add_row(row["measure"], f"{row['pairs']:,}", row["shape"], spread([r["wall"] for r in runs]),
                       spread([r["rerank"] for r in runs]) if "rerank" in runs[0] else "–",
                       spread([r["scored"] for r in runs], ",.0f") if runs[0]["scored"] else "–",
                       *(spread([r[k] for r in runs], ".0f") for k in ("base", "models", "peak")),
                       spread([r["peak"] - r["models"] for r in runs], ".0f"))
    console.print(result)
    if flows := [row for row in saved["rows"] if "reads" in row["runs"][0]]:
        console.print(reads_table(flows, config))
    dense = table(f"the dense evaluation it replaces ({config['image_size']} px images), computed",
                  ("pairs", "pixels in memory GiB", "score matrix GiB", "argsort GiB", "truth matrix GiB",
                   "cross-encoder passes", f"re-rank passes (k={config['rerank_k']}, ≤)"),
                  ("Computed from N, not measured: what the dense evaluation held at once (GiB) and the cross-encoder "
                   "passes it and a top-k re-rank need (2N captions × 2N images).",))
    for n in filter(None, config["pairs"]):
        need = dense_needs(n, config["image_size"])
        dense.add_row(f"{n:,}", f"{need['pixels']:.1f}", f"{need['scores']:.1f}", f"{need['argsort']:.1f}",
                      f"{need['truth']:.1f}", f"{need['cross_pairs']:,}", f"{2 * 2 * n * config['rerank_k']:,}")
    if dense.rows:
        console.print(dense)


def logged(fn: Callable[..., dict], *args: Any) -> dict:
    """`fn(*args)` in a fresh process; its result printed as a line of JSON."""
    result = in_fresh_process(fn, *args)
    console.print(json.dumps(result))
    return result


def main(pairs: Annotated[list[int], typer.Option(help="pairs N of the synthetic measures (0: none)")] = [35000],
         real_pairs: Annotated[list[int], typer.Option(help="pairs of the end-to-end runs on PNGs (0: none)")] = [2000],
         rerank_k: Annotated[int, typer.Option(help="candidates a cross-encoder re-ranks per query")] = 20,
         dim: Annotated[int, typer.Option(help="embedding width of the random bi-encoder")] = 512,
         image_size: Annotated[int, typer.Option(help="image side for the dense approach's numbers")] = 512,
         repeats: Repeats = 3,
         project: Annotated[Path, typer.Option(help="the checkout whose code runs the end-to-end flow")] = ROOT,
         saved: Annotated[Path | None, typer.Option("--report", help="print a saved run instead")] = None,
         out: Annotated[Path | None, typer.Option(help="write the run's JSON here")] = None) -> None:
    if saved:
        return report(json.loads(saved.read_text()))
    ks = (1, 5, 10)
    rows = {}  # (measure, pairs) -> (captions × images, the fresh-process call that measures it)
    for n in filter(None, pairs):
        rows["bi-encoder R@k", n] = (f"{2 * n:,} × {2 * n:,}", partial(logged, measure_bi_encoder, n, dim, ks))
        rows["ODmAP@k", n] = (f"{n // 5:,} × {2 * n:,}", partial(logged, measure_odmap, n, dim, ks))
        rows["cross-encoder R@k", n] = (f"{2 * n:,} × {2 * n:,}",
                                        partial(logged, measure_rerank, n, dim, ks, rerank_k))
    for n in filter(None, real_pairs):
        rows["evaluate_flow (PNGs, 3 tiny models)", n] = (f"{2 * n + real_images(n):,} images", partial(
            logged, measure_end_to_end, n, rerank_k, str(project.resolve())))
    runs = alternating({key: call for key, (_, call) in rows.items()}, repeats)
    saved = {"config": {"pairs": pairs, "real_pairs": real_pairs, "rerank_k": rerank_k, "dim": dim, "ks": ks,
                        "image_size": image_size, "repeats": repeats, "project": str(project.resolve())},
             "rows": [{"measure": measure, "pairs": n, "shape": shape, "runs": runs[measure, n]}
                      for (measure, n), (shape, _) in rows.items()]}
    if out:
        out.write_text(json_text(saved, indent=1))
    report(saved)


if __name__ == "__main__":
    start(main)
