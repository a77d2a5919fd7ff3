"""`cfgen plan` as a user runs it: the paper profile's missing models each named with the line that fetches them
(looked up in a real, empty then partly filled Hugging Face cache), and the demo profile measured and scaled to the
input without touching the project's data or caches."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

from tasks.core.fingerprints import is_hub_id
from tasks.core.specs import ClipSpec
from tasks.plan import estimate
from tests.conftest import DEMO_CAPTIONS, ROOT, project_params, requires_nltk
from tests.flows.test_cli import cfgen

VIT_L14_HUB = "timm/vit_large_patch14_clip_224.openai"  # where open_clip fetches ViT-L-14:openai from


def test_the_paper_profile_names_each_missing_model_with_the_line_that_fetches_it(tmp_path):
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    paper = project_params("profile=paper")
    pinned = {key: spec for key, spec in paper.running_models()
              if not isinstance(spec, ClipSpec) and is_hub_id(spec.id)}
    assert "generate.diffusion" in pinned and "perplexity.model" in pinned
    lines = {key: f"hf download {s.id}" + (f" --revision {s.revision}" if s.revision else "") for key, s in
             pinned.items()}
    code, _, err, _ = cfgen(tmp_path, "plan", str(DEMO_CAPTIONS), "-p", "profile=paper",
                            env_extra={"HF_HUB_CACHE": str(cache)})
    report = json.loads((tmp_path / "reports/plan.json").read_text())
    assert code == 2 and report["ready"] is False and "estimates" not in report
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: {len(report['missing'])} models are not on this machine ("), last
    assert all(key in last for key in report["missing"]) and "Traceback" not in err
    fetch = {m["key"]: m["fetch"] for m in report["models"]}
    placed = {m["key"]: (m["device"], m["dtype"]) for m in report["models"]}
    assert placed["generate.vae"] == placed["generate.diffusion"] == ("cpu", "float16")  # runs in the UNet's dtype
    assert {k: fetch[k] for k in lines} == lines
    assert fetch["generate.clip"] == fetch["removal_selection.clip"] == f"hf download {VIT_L14_HUB}"
    clips = {"generate.clip", "removal_selection.clip", "evaluate.models.clip_b32"}
    assert set(report["missing"]) == set(lines) | clips
    for line in {*lines.values(), f"hf download {VIT_L14_HUB}"}:  # whole lines, as a user copies them
        assert f"  {line}\n" in err

    roberta = pinned["candidates.model"]  # now in the cache at its pinned revision, as `hf download` leaves it
    snapshot = cache / f"models--{roberta.id.replace('/', '--')}" / "snapshots" / roberta.revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    code, _, err, _ = cfgen(tmp_path, "plan", str(DEMO_CAPTIONS), "-p", "profile=paper",
                            env_extra={"HF_HUB_CACHE": str(cache)})
    report = json.loads((tmp_path / "reports/plan.json").read_text())
    assert code == 2 and "candidates.model" not in report["missing"] and lines["candidates.model"] not in err
    assert "perplexity.model" in report["missing"]


@requires_nltk
def test_the_demo_plan_measures_each_stage_and_scales_its_sample_to_the_input(tmp_path, prefect_server):
    from prefect.settings import PREFECT_API_URL

    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    built = subprocess.run([sys.executable, "-m", "flows.cli", "tiny-models", str(DEMO_CAPTIONS), "models/demo"],
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    before = sorted(p for p in tmp_path.rglob("*") if "prefect-home" not in p.parts)
    code, _, err, _ = cfgen(tmp_path, "plan", str(DEMO_CAPTIONS), "--sample", "30", "--pass-rate", "0.25",
                            "--workers", "2", "--output", "plan.json", "-p", "generate.adaptive.round_samples=1",
                            env_extra={"PREFECT_API_URL": PREFECT_API_URL.value()})
    assert code == 0, err
    report = json.loads((tmp_path / "plan.json").read_text())
    after = sorted(p for p in tmp_path.rglob("*") if "prefect-home" not in p.parts)
    assert [p for p in after if p not in before] == [tmp_path / "plan.json"]  # no data, cache or store written

    m, off, on = report["measured"], report["estimates"]["off"], report["estimates"]["on"]
    assert report["ready"] and report["missing"] == [] and {d["device"] for d in report["devices"]} == {"cpu"}
    assert m["captions"] == 100 and m["sample_captions"] == 30 and 0 < m["sample_pairs"] <= 30
    assert m["pass_rate"] == 0.25 and m["pass_spread"] == {} and "pilot" not in m  # --pass-rate: no pilot pairs
    assert min(m["sample_seconds"], m["canonical_seconds"], m["caption_seconds"], m["record_bytes"],
               m["png_bytes"], *m["startup_seconds"].values()) > 0
    assert report["unet_rows_per_second"] > 0
    gen = project_params("generate.adaptive.round_samples=1").generate  # demo: 4 samples x 4 steps
    pairs = 100 * m["sample_pairs"] / 30
    assert off["pairs"] == on["pairs"] == pairs and off["samples"] == pairs * gen.n_samples
    assert off["accepted"] == on["accepted"] == pairs * (1 - 0.75**gen.n_samples)
    assert off["unet_rows"] == (off["samples"] + off["accepted"]) * 4 * gen.steps
    assert on["samples"] == pairs * estimate.pair_outlook((), 0.25, gen, adaptive=True)[0] < off["samples"]
    tasks = math.ceil(pairs / gen.pairs_per_task)
    generate_wall = math.ceil(tasks / 2) * pairs / tasks * gen.n_samples * m["sample_seconds"]
    assert off["image_wall_seconds"] > generate_wall + sum(m["startup_seconds"].values())
    for text in ("caption pairs", "UNet rows", "GPU-hours", "H100-hours", "wall time", "free disk",
                 "covers the caption stages, generate and selection"):
        assert text in err
    assert off["h100_hours"] == off["unet_rows"] / gen.needs.h100_rows_per_second / 3600
