"""The gallery at the paper's size: a generated N-pair gallery (tiny PNGs) opened from the file system in headless
Chromium (Debian's `chromium`, through Playwright).

    python benchmarks/gallery_scale.py OUT                    # 20,000 pairs, 3 page loads
    python benchmarks/gallery_scale.py OUT --pairs 2000

The gallery is built by `tasks.release.gallery.build` from a selection of N pairs whose I_o and I_c are random 32-px
PNGs in a pixel-addressed store (a fifth of the pairs share each edit type). Each of `--repeats` loads opens
`index.html#tab=pairs` in a fresh browser and reads: time to first render (navigation start to the page's
`gallery-rendered` mark, after data.js is parsed and the first page of cards is in the DOM), then time to apply an
edit-type filter, the JS heap in use (CDP `Performance.getMetrics`), the images the page requested, and data.js's
size. Prints median (min–max).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Annotated

import typer
from bench import ROOT, Repeats, console, spread, start, table

EDIT_TYPES = ("noun", "lexical", "quantifier", "insert", "delete")


def build(out: Path, pairs: int) -> Path:
    """OUT/gallery of `pairs` generated pairs; returns its index.html."""
    import numpy as np
    import polars as pl

    from tasks.config import load_params
    from tasks.core.schemas import COUNTERFACTUALS, SELECTED
    from tasks.image import store
    from tasks.release.gallery import build as build_gallery

    shutil.rmtree(out, ignore_errors=True)
    rng, images = np.random.default_rng(0), out / "images"
    rows = []
    for i in range(pairs):
        pngs = [store.write_png(images, rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)) for _ in range(2)]
        rows.append({"caption_id": f"{i:06d}", "image_id": str(i), "caption": f"a dog sitting on couch number {i}",
                     "counterfactual": f"a cat sitting on couch number {i}", "edit_type": EDIT_TYPES[i % 5],
                     "original_word": "dog", "substitute": "cat", "clip_dir": float(rng.uniform(0.2, 0.6)),
                     **{k: float(rng.uniform(0.2, 0.4)) for k in ("sim_text_image_o", "sim_text_image_c")},
                     "sim_image_image": float(rng.uniform(0.7, 0.95)), "tried": 100, "image_o": pngs[0],
                     "image_c": pngs[1]})
    pl.DataFrame(rows, schema=SELECTED).write_parquet(out / "selected.parquet")
    pl.DataFrame([{k: r[k] for k in r if k in COUNTERFACTUALS} | {"similarity": 0.85, "perplexity": 40.0}
                  for r in rows], schema=COUNTERFACTUALS).write_parquet(out / "counterfactuals.parquet")
    paths = {"selected": out / "selected.parquet", "selected_images": images, "gallery": out / "gallery",
             "counterfactual_captions": out / "counterfactuals.parquet", **{k: out / "none" for k in (
                 "validated", "removal_pairs", "run_metrics", "figures", "captions", "sites", "salient_sites",
                 "candidates", "relations", "similarity", "samples", "removal_masks", "removal_captions",
                 "removal_gallery", "inpainted", "judged")}}
    build_gallery(load_params(ROOT / "params.yaml", [f"paths.{k}={v}" for k, v in paths.items()]))
    return out / "gallery" / "index.html"


def load(index: Path) -> dict:
    """One page load in a fresh headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        requested: list[str] = []
        page.on("request", lambda r: r.url.endswith(".png") and requested.append(r.url))
        page.goto(index.as_uri() + "#tab=pairs")
        page.wait_for_function("performance.getEntriesByName('gallery-rendered').length > 0")
        first = page.evaluate("performance.getEntriesByName('gallery-rendered')[0].startTime")
        began = time.perf_counter()
        page.select_option("select[name=edit_type]", "noun")
        page.wait_for_function("document.querySelector('#count').textContent.startsWith(String("
                               "window.GALLERY.pairs.filter(p => p.edit_type === 'noun').length))")
        filtered = (time.perf_counter() - began) * 1000
        session = page.context.new_cdp_session(page)
        session.send("Performance.enable")
        metrics = {m["name"]: m["value"] for m in session.send("Performance.getMetrics")["metrics"]}
        cards = page.locator("article.card").count()
        browser.close()
    return {"first_ms": first, "filter_ms": filtered, "heap_mib": metrics["JSHeapUsedSize"] / 2**20,
            "images": len(requested), "cards": cards}


def main(out: Path, pairs: Annotated[int, typer.Option(help="pairs in the gallery")] = 20_000,
         repeats: Repeats = 3) -> None:
    """Build an N-pair gallery and time its page loads (see the module docstring)."""
    began = time.perf_counter()
    index = build(out.resolve(), pairs)
    built = time.perf_counter() - began
    runs = [load(index) for _ in range(repeats)]
    data_mb = (index.parent / "data.js").stat().st_size / 1e6
    shown = table(f"gallery of {pairs:,} pairs (built in {built:.0f} s; data.js {data_mb:.1f} MB)",
                  ["first render ms", "filter ms", "JS heap MiB", "images requested", "cards in the DOM"],
                  ["first render: navigation start to the first page of cards in the DOM (data.js parsed)",
                   "filter: selecting an edit type until the count shows its pairs",
                   "JS heap: Chromium's JSHeapUsedSize after the filter; images: PNG requests of the page (lazy)"])
    shown.add_row(*(spread([r[k] for r in runs], ".0f") for k in ("first_ms", "filter_ms", "heap_mib", "images",
                                                                   "cards")))
    console.print(shown)


if __name__ == "__main__":
    start(main)
