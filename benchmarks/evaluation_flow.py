"""The evaluate flow end to end on generated PNGs with the demo's tiny models, every image read and every real image
hashed counted: the rows `evaluation_scale.py --real-pairs N` runs and their reads table.

Each run is a fresh process (`bench.in_fresh_process`) under a temporary Prefect server (not timed) with the code of
the checkout it is given (`--project`, for before/after): N pairs of 32 px PNGs, every 4th with a real image and every
other one validated, the tiny open_clip, HF CLIP and ViLT (ViLT re-ranks open_clip's top `rerank_k`), loaded before
the clock starts; reads are counted by wrapping the reader's `read_rgb`, hashes the flow's `content_hash`.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import spread, table
from rich.table import Table


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def real_images(n: int) -> int:
    """Real images among n pairs: every 4th pair's."""
    return (n + 3) // 4


def measure_end_to_end(n: int, rerank_k: int, project: str) -> dict:
    """`end_to_end` with the checkout `project`'s code, in a temporary folder of its own."""
    sys.path.insert(0, project)
    with tempfile.TemporaryDirectory(prefix="cfgen-evaluation-scale-") as root:
        return end_to_end(n, rerank_k, Path(root), Path(project))


def end_to_end(n: int, rerank_k: int, out: Path, project: Path) -> dict:
    """`evaluate_flow` on n pairs of 32 px PNGs (every 4th with a real image, every other one validated), the tiny
    models loaded first: wall, RSS, the pairs the cross-encoder scored, every image read and real image hashed."""
    os.environ.update(PREFECT_HOME=f"{out}/prefect-home", PREFECT_RESULTS_LOCAL_STORAGE_PATH=f"{out}/results",
                      PREFECT_LOGGING_LEVEL="WARNING", PREFECT_SERVER_ANALYTICS_ENABLED="false", TQDM_DISABLE="1")
    for folder in ("prefect-home", "real"):
        (out / folder).mkdir()
    import numpy as np
    import polars as pl
    from PIL import Image

    from flows import evaluation as flow
    from flows.engine.server import prefect_api
    from tasks.config import load_params
    from tasks.core.schemas import SELECTED
    from tasks.demo.tiny_eval import build_tiny_hf_clip, build_tiny_vilt
    from tasks.evaluation import evaluate
    from tasks.evaluation.params import EvaluateParams
    from tasks.evaluation.scorers import CrossEncoder, load_scorer
    from tasks.image import store
    from tasks.tiny.images import build_tiny_clip

    words = ["dog", "cat", "car", "bus", "horse", "bike", "couch", "street"]
    rng = np.random.default_rng(0)
    rows = []
    for j in range(n):
        caption = f"a {words[j % 8]} and a {words[(j // 8) % 8]} on the {words[(j // 64) % 8]}"
        rows.append({**dict.fromkeys(SELECTED), "caption_id": f"{j}_0", "image_id": str(j), "caption": caption,
                     "counterfactual": caption.replace("a ", "the ", 1) + f" {j}",
                     "image_o": store.write_png(out / "img", rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)),
                     "image_c": store.write_png(out / "img", rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))})
        if j % 4 == 0:  # real_images(n) of them
            Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(out / "real" / f"{j}.png")
    selected = pl.DataFrame(rows, schema=SELECTED)
    selected.write_parquet(out / "selected.parquet")
    selected.select("caption_id").gather_every(2).write_parquet(out / "validated.parquet")
    captions = sorted({*selected["caption"], *selected["counterfactual"]})
    specs = {"clip": build_tiny_clip(out / "clip", seed=0), "hf_clip": build_tiny_hf_clip(out / "hf_clip", seed=0),
             "vilt": build_tiny_vilt(out / "vilt", captions[:200], seed=0)}
    params = load_params(project / "params.yaml", [])
    params = params.model_copy(update={"evaluate": EvaluateParams(models=specs, rerank_k=rerank_k, batch_size=64),
                                       "paths": params.paths.model_copy(update={
                                           "selected": out / "selected.parquet", "selected_images": out / "img",
                                           "source_images": out / "real", "source_image_name": "{image_id}.png",
                                           "validated": out / "validated.parquet", "evaluation": out / "eval.parquet",
                                           "evaluation_reports": out / "reports", "removal_pairs": out / "none"})})
    base = rss_mib()
    for spec in specs.values():
        load_scorer(spec, params.evaluate.batch_size)  # loaded once per process: what follows is the evaluation alone
    models = rss_mib()
    reads, hashes, scored = [], [], []  # appended from the flow's task threads (list.append is atomic)
    read_rgb, content_hash, pairs = evaluate.read_rgb, flow.content_hash, CrossEncoder.pairs
    evaluate.read_rgb = lambda path: reads.append(str(path)) or read_rgb(path)
    flow.content_hash = lambda path: hashes.append(str(path)) or content_hash(path)
    CrossEncoder.pairs = lambda self, texts, images: scored.append(len(texts)) or pairs(self, texts, images)
    with prefect_api():
        started = time.perf_counter()
        flow.evaluate_flow(params)
        wall = time.perf_counter() - started
    passes = len(specs) + sum(params.evaluate.first_stage(spec) is not None for spec in specs.values())
    return {"wall": wall, "base": base, "models": models, "peak": rss_mib(), "scored": sum(scored),
            "images": len(set(reads)), "reads": len(reads), "most_reads": max(Counter(reads).values()),
            "passes": passes, "real": real_images(n), "hashes": len(hashes)}


LEGEND = (
    "image files: the distinct files the flow read (generated PNGs and real images); model passes: the models plus "
    "the first stage each cross-encoder re-ranks, each needing every image's pixels; reads: calls of the reader's "
    "`read_rgb`; per image per pass: reads / files / passes (1.00: each pass reads each image once); most: the most "
    "reads of one file.",
    "real-image hashes: calls of the flow's `content_hash` (its cache keys) on the real images, in all and per image.",
)


def reads_table(rows: list[dict], config: dict) -> Table:
    """Per N of the saved end-to-end rows: files, passes, reads and hashes, median (min–max) over the runs."""
    reads = table(f"image reads and real-image hashes of evaluate_flow ({config.get('project', 'this checkout')}), "
                  f"median (min–max) of {config.get('repeats', 1)} runs",
                  ("pairs", "image files", "model passes", "reads", "reads / image / pass", "most reads of one file",
                   "real images", "real-image hashes", "hashes / real image", "wall s"), LEGEND)
    for row in rows:
        runs = row["runs"]
        reads.add_row(f"{row['pairs']:,}", f"{runs[0]['images']:,}", str(runs[0]["passes"]),
                      spread([r["reads"] for r in runs], ",.0f"),
                      spread([r["reads"] / r["images"] / r["passes"] for r in runs]),
                      spread([r["most_reads"] for r in runs], ".0f"), f"{runs[0]['real']:,}",
                      spread([r["hashes"] for r in runs], ",.0f"), spread([r["hashes"] / r["real"] for r in runs]),
                      spread([r["wall"] for r in runs]))
    return reads
