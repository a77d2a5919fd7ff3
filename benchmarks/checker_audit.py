"""The toy-world checker against a person: generated images labelled by eye (`tests/toyworld/fixtures/labelled`),
read by the checker as it was before issue 54 (git, `BEFORE`) and as it is now.

    python benchmarks/checker_audit.py                      # the tables: agreement, disagreements, reasons
    python benchmarks/checker_audit.py --sheets-to /tmp/sheets  # contact sheets of the fixture, to label by eye
    python benchmarks/checker_audit.py --generate-images    # re-render images.npz (~10 min on 2 CPU cores); the
                                                            # labels describe the committed images: re-label after

Image i's caption is `world.sample(random.Random(i))`'s; it is drawn alone (C_o = C_c, p2p fraction 0, seed i) by the
committed diffusion model with the steps and guidance of `setting(i)`: every sixth image weak (4–6 steps, guidance
1–1.5), the rest 10–30 steps and guidance 2–7. Deterministic on one software stack (`sampling.render`).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import ModuleType

import numpy as np
from bench import ROOT, console, start, table

from tasks.toyworld import checker, world

FIXTURE = ROOT / "tests" / "toyworld" / "fixtures" / "labelled"
WEIGHTS = ROOT / "tasks" / "toyworld" / "weights"
COUNT = 300
HELD_OUT = 240  # images from here on were labelled after the checker's last change (0-239 guided its design)
BEFORE = "4b58436736327d701592c5693192c82cbb843a48"  # the last commit of the checker before issue 54


def setting(i: int) -> dict:
    """Image i's caption and sampling settings."""
    rng = random.Random(10_000 + i)
    weak = i % 6 == 5
    return {"caption": world.caption(world.sample(random.Random(i))[0]), "seed": i,
            "steps": rng.randint(4, 6) if weak else rng.choice([10, 15, 20, 30]),
            "guidance": round(rng.uniform(1.0, 1.5) if weak else rng.uniform(2.0, 7.0), 2)}


def generate(count: int) -> np.ndarray:
    """(count, 32, 32, 3) uint8: image i drawn by `setting(i)`."""
    from tasks.core.specs import ModelSpec
    from tasks.image.backends.sd1 import load_diffusion
    from tasks.image.sampling import Sample, render
    from tasks.toyworld.assemble import assemble

    with tempfile.TemporaryDirectory() as folder:
        assemble(WEIGHTS, Path(folder))
        diffusion = load_diffusion(ModelSpec(id=str(Path(folder) / "diffusion")), None)
        images = []
        for i in range(count):
            s = setting(i)
            prompts = diffusion.encode(s["caption"], s["caption"])
            images.append(render(diffusion, prompts, [Sample(s["seed"], 0.0, s["guidance"])], s["steps"],
                                 32).images[0, 0])
    return np.stack(images)


def sheets(images: np.ndarray, out: Path, per_row: int = 5, rows: int = 6, scale: int = 6) -> None:
    """PNG contact sheets: each image ×`scale` (nearest neighbour) with its index and caption under it."""
    from PIL import Image, ImageDraw

    out.mkdir(parents=True, exist_ok=True)
    cell_w, cell_h = 32 * scale + 16, 32 * scale + 34
    per_sheet = per_row * rows
    for first in range(0, len(images), per_sheet):
        sheet = Image.new("RGB", (per_row * cell_w, rows * cell_h), (255, 255, 255))
        draw = ImageDraw.Draw(sheet)
        for k, i in enumerate(range(first, min(first + per_sheet, len(images)))):
            x, y = k % per_row * cell_w + 8, k // per_row * cell_h + 4
            sheet.paste(Image.fromarray(images[i]).resize((32 * scale, 32 * scale), Image.NEAREST), (x, y))
            words = f"{i}: {setting(i)['caption']}".split()
            half = (len(words) + 1) // 2 if len(" ".join(words)) > 30 else len(words)
            for line, text in enumerate((" ".join(words[:half]), " ".join(words[half:]))):
                draw.text((x, y + 32 * scale + 2 + 12 * line), text, fill=(0, 0, 0))
        sheet.save(out / f"sheet_{first // per_sheet:02d}.png")


def old_checker() -> ModuleType:
    """The checker as it was before issue 54 (`BEFORE`'s `tasks/toyworld/checker.py`, read from git)."""
    source = subprocess.run(["git", "show", f"{BEFORE}:tasks/toyworld/checker.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = ModuleType("checker_before")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, "checker_before.py", "exec"), module.__dict__)
    return module


def disagreement(label: dict, seen: list[checker.Seen], spec: world.Spec) -> str | None:
    """None when a reading agrees with the label's shows; else `accepted <label's reason>` (a failing image passed),
    or the fact the reading wrongly fails a shown image on."""
    failure = checker.first_failure(seen, spec)
    if (failure is None) == label["shows"]:
        return None
    return f"accepted {label['reason']}" if failure is None else f"rejected: {failure}"


def main(generate_images: bool = False, sheets_to: Path | None = None) -> None:
    if generate_images:
        np.savez_compressed(FIXTURE / "images.npz", images=generate(COUNT))
    images = np.load(FIXTURE / "images.npz")["images"]
    if sheets_to is not None:
        sheets(images, sheets_to)
        return
    labels = json.loads((FIXTURE / "labels.json").read_text())["labels"]
    clear = [x for x in labels if x["shows"] != "ambiguous"]
    readers = {"before": old_checker().objects, "after": checker.objects}
    classes = {name: Counter(disagreement(x, read(images[x["index"]]), world.parse(x["caption"])) for x in clear)
               for name, read in readers.items()}
    out = table(f"Checker vs eye: {len(labels)} generated images labelled, {len(labels) - len(clear)} ambiguous",
                ["", "before", "after"],
                [f"before: the checker at {BEFORE[:7]}; after: tasks/toyworld/checker.py now. A disagreement's class: "
                 "`accepted X` a failing image (first failing fact X by eye) read as shown, `rejected: X` a shown "
                 "image read as failing X"])
    for name in ("before", "after"):
        classes[name].setdefault(None, 0)
    out.add_row("agreement (shows)", *(f"{c[None] / len(clear):.3f} ({c[None]}/{len(clear)})"
                                      for c in classes.values()))
    held = [x for x in clear if x["index"] >= HELD_OUT]
    out.add_row(f"  of it, held out ({HELD_OUT}+)", *(
        f"{sum(disagreement(x, read(images[x['index']]), world.parse(x['caption'])) is None for x in held)}"
        f"/{len(held)}" for read in readers.values()))
    for kind in sorted({k for c in classes.values() for k in c if k is not None}):
        out.add_row(f"  {kind}", *(str(c[kind]) for c in classes.values()))
    console.print(out)

    failing = [x for x in clear if not x["shows"] and x["reason"] != "ambiguous"]
    said = {name: [checker.first_failure(read(images[x["index"]]), world.parse(x["caption"])) for x in failing]
            for name, read in readers.items()}
    reasons = table(f"Reasons: {len(failing)} images failing their caption with a clear first failing fact by eye",
                    ["reason", "by eye", "checker before", "agrees before", "checker after", "agrees after"],
                    ["before: `checker.first_failure` of the old reading"])
    for name in (*checker.REASONS, None):
        reasons.add_row(str(name) if name else "shown", str(sum(x["reason"] == name for x in failing)), *(
            cell for got in said.values() for cell in (str(got.count(name)), str(sum(
                g == name == x["reason"] for g, x in zip(got, failing))))))
    reasons.add_row("all", str(len(failing)), *(cell for got in said.values() for cell in (
        "", f"{sum(g == x['reason'] for g, x in zip(got, failing)) / len(failing):.3f}")))
    console.print(reasons)
    shown = Counter(x["shows"] for x in labels)
    console.print(f"by eye: {shown[True]} show their caption, {shown[False]} do not, {shown['ambiguous']} ambiguous; "
                  f"fixture {sum(f.stat().st_size for f in FIXTURE.iterdir()) / 1024:.0f} KiB")


if __name__ == "__main__":
    start(main)
