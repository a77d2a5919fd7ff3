"""Benchmark the image stage (generate + filter): throughput, UNet work per accepted pair, peak memory.

    python benchmarks/image_stage.py --profile tiny --pairs 4 --samples 8 --steps 4
    python benchmarks/image_stage.py --profile paper --pairs 2 --samples 10 --steps 100   # weights cached locally

`tiny` builds random 32x32 models in a temporary folder (CPU is fine; its CLIP scores are noise, so use
`--accept-all` to measure selection mechanics). `paper` runs SD v1.5 + CLIP ViT-L/14 from the local Hugging Face /
open_clip caches only (HF_HUB_OFFLINE=1): it stops with a message when the weights are not there.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import polars as pl  # noqa: E402
import torch  # noqa: E402

from tasks import filter as clip_filter  # noqa: E402
from tasks import generate, render  # noqa: E402
from tasks.params import FilterParams, GenerateParams  # noqa: E402
from tasks.tiny_images import TINY_IMAGE_SIZE, build_tiny_clip, build_tiny_diffusion  # noqa: E402

PAIRS = [
    ("a dog sitting on a couch", "a cat sitting on a couch"),
    ("a red car parked on the street", "a red bus parked on the street"),
    ("a man riding a horse on the beach", "a man riding a bicycle on the beach"),
    ("a plate of pizza on a table", "a plate of salad on a table"),
]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=["tiny", "paper"], default="tiny")
    parser.add_argument("--pairs", type=int, default=4, help="caption pairs (cycled from built-ins or --pairs-file)")
    parser.add_argument("--pairs-file", type=Path, help="a counterfactual_captions.parquet to take pairs from")
    parser.add_argument("--samples", type=int, default=8, help="n_samples per pair")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-samples", type=int, default=4)
    parser.add_argument("--adaptive", action="store_true", help="stop a pair once one sample passes the filter")
    parser.add_argument("--round-samples", type=int, default=4)
    parser.add_argument("--accept-all", action="store_true", help="thresholds -1: every unrejected sample passes")
    parser.add_argument("--threads", type=int, help="torch CPU threads (1 is far faster on a busy CPU)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the untimed first pass (kernel selection per batch shape)")
    return parser.parse_args(argv)


def pairs_frame(args: argparse.Namespace) -> pl.DataFrame:
    if args.pairs_file:
        return pl.read_parquet(args.pairs_file).head(args.pairs)
    rows = list(islice(cycle(PAIRS), args.pairs))
    return pl.DataFrame({"caption_id": [f"bench-{i}" for i in range(len(rows))],
                         "image_id": [f"img-{i}" for i in range(len(rows))],
                         "caption": [c for c, _ in rows], "counterfactual": [d for _, d in rows]})


def build_params(args: argparse.Namespace, work: Path) -> GenerateParams:
    common = dict(steps=args.steps, n_samples=args.samples, batch_samples=args.batch_samples,
                  adaptive={"enabled": args.adaptive, "min_accepted": 1, "round_samples": args.round_samples})
    if args.profile == "paper":
        return GenerateParams(**common)
    return GenerateParams(diffusion=build_tiny_diffusion(work / "sd", seed=0), vae=None,
                          clip=build_tiny_clip(work / "clip", seed=0), size=TINY_IMAGE_SIZE, **common)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="cfgen-bench-") as tmp:
        work = Path(tmp)
        params = build_params(args, work)
        try:
            models = render.load_models(params)
        except (OSError, RuntimeError, ValueError) as error:
            print(f"cannot load the {args.profile} models from local files: {error}", file=sys.stderr)
            return 2
        filter_params = FilterParams(min_text_image_o=-1, min_text_image_c=-1, min_image_image=-1,
                                     min_clip_dir=-1) if args.accept_all else FilterParams()
        pairs = pairs_frame(args)
        if not args.no_warmup:
            warm = params.model_copy(update={"n_samples": params.batch_samples + 1})
            generate.run(pairs.head(1), generate.Screening(warm, {}, models=models))
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        scores, _ = generate.run(pairs, generate.Screening(params, {}, models=models), filter_params)
        seconds = time.perf_counter() - start
        selected = clip_filter.ranked(scores, filter_params).filter(pl.col("rank") == 0)
    evals = scores["unet_evals"].sum()
    cuda_peak = f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB" if torch.cuda.is_available() else "n/a"
    metrics = {
        "profile / device": f"{args.profile} / {models.diffusion.device} {models.diffusion.dtype}"
                            f" ({torch.get_num_threads()} CPU threads)",
        "pairs / samples rendered": f"{pairs.height} / {scores.height}",
        "seconds": f"{seconds:.2f}",
        "samples/s": f"{scores.height / seconds:.2f}",
        "accepted pairs": f"{selected.height}",
        "UNet batch-item evals / accepted pair": f"{evals / selected.height:.0f}" if selected.height else "n/a",
        "UNet batch-item evals / pair": f"{evals / max(pairs.height, 1):.0f}",
        "peak RSS": f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB",
        "peak CUDA memory": cuda_peak,
    }
    width = max(map(len, metrics))
    print("\n".join(f"{name:<{width}}  {value}" for name, value in metrics.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
