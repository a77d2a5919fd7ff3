"""The gallery's files: images copied and thumbnailed once by content (a rerun rewrites nothing), pruned when no card
shows them, the edit span of every edit type, and equal bytes for equal inputs."""

from __future__ import annotations

import numpy as np
import polars as pl

from tasks.core.schemas import COUNTERFACTUALS, SELECTED
from tasks.image import store
from tasks.release.gallery import THUMB, build, edit_span
from tests.conftest import project_params


def test_the_edit_span_of_every_edit_type():
    cases = {("a dog on a couch", "a cat on a couch"): ([2, 5], [2, 5]),  # noun / lexical
             ("two dogs on a couch", "three dogs on a couch"): ([0, 3], [0, 5]),  # quantifier
             ("a dog on a couch", "a small dog on a couch"): ([2, 2], [2, 7]),  # insert: empty in C_o
             ("a dog on a red couch", "a dog on a couch"): ([11, 14], [11, 11]),  # delete
             ("two dogs", "two cats"): ([4, 8], [4, 8]),  # whole words, though "s" is shared
             ("a bike on the street.", "a bike."): ([7, 20], [6, 6])}  # not the period both keep
    for (c_o, c_c), spans in cases.items():
        assert (edit_span(c_o, c_c), edit_span(c_c, c_o)) == spans


def write_run(root, rows: int) -> dict[str, str]:
    """A selection of `rows` pairs with 256-px PNGs in a pixel-addressed store; the paths overrides naming it."""
    rng = np.random.default_rng(0)
    images = root / "images"
    selected = []
    for i in range(rows):
        pngs = [store.write_png(images, rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)) for _ in range(2)]
        selected.append({"caption_id": f"c{i}", "image_id": str(i), "caption": f"a dog number {i}",
                         "counterfactual": f"a cat number {i}", "edit_type": "noun", "original_word": "dog",
                         "substitute": "cat", "clip_dir": 0.1 * i, "tried": 4, "image_o": pngs[0],
                         "image_c": pngs[1]})
    pl.DataFrame(selected, schema=SELECTED).write_parquet(root / "selected.parquet")
    pl.DataFrame([{k: r[k] for k in r if k in COUNTERFACTUALS} | {"similarity": 0.85, "perplexity": 40.0}
                  for r in selected], schema=COUNTERFACTUALS).write_parquet(root / "counterfactuals.parquet")
    return {"paths.selected": root / "selected.parquet", "paths.selected_images": images,
            "paths.counterfactual_captions": root / "counterfactuals.parquet", "paths.gallery": root / "gallery",
            "paths.validated": root / "none", "paths.removal_pairs": root / "none", "paths.run_metrics": root / "none",
            "paths.figures": root / "none"}


def files(site) -> dict[str, tuple[int, bytes]]:
    return {p.relative_to(site).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(site.rglob("*")) if p.is_file()}


def test_a_rerun_rewrites_no_image_and_a_new_selection_prunes_the_old_ones(tmp_path):
    paths = write_run(tmp_path, 3)
    params = project_params(*(f"{k}={v}" for k, v in paths.items()))
    assert build(params)["pairs"] == 3
    site = paths["paths.gallery"]
    first = files(site)
    assert len([f for f in first if f.startswith("images/")]) == len([f for f in first if f.startswith("thumbs/")]) == 6
    from PIL import Image

    assert max(Image.open(site / next(f for f in first if f.startswith("thumbs/"))).size) == THUMB

    build(params)
    again = files(site)
    assert again == first  # same bytes, and no image written again (same mtimes)

    pl.read_parquet(paths["paths.selected"]).head(1).write_parquet(paths["paths.selected"])
    build(params)
    kept = files(site)
    assert {f for f in kept if f.startswith(("images/", "thumbs/"))} < {f for f in first}
    assert len([f for f in kept if f.startswith("images/")]) == 2
    assert b'"caption_id":"c0"' in kept["data.js"][1] and b'"c1"' not in kept["data.js"][1]


def test_the_diff_gallery_shows_each_version_of_every_pair_they_do_not_share(tmp_path):
    import json

    from tasks.release import diff, gallery

    paths = write_run(tmp_path, 4)
    counterfactuals, selected = (pl.read_parquet(paths[f"paths.{k}"]) for k in ("counterfactual_captions", "selected"))
    moved = store.write_png(paths["paths.selected_images"], np.zeros((256, 256, 3), dtype=np.uint8))
    a = (counterfactuals, selected.filter(pl.col("caption_id") != "c3"), {})
    b = (counterfactuals, selected.filter(pl.col("caption_id") != "c1")
         .with_columns(image_o=pl.when(pl.col("caption_id") == "c0").then(pl.lit(moved)).otherwise("image_o")), {})
    changes = diff.pair_changes(a, b)
    assert changes == {"c0": "image changed", "c1": "removed", "c3": "added"}
    read = gallery.from_store(paths["paths.selected_images"])
    site = tmp_path / "diff"
    assert gallery.compare(site, "a → b", {"a": (*a[:2], read), "b": (*b[:2], read)}, changes) == 4
    data = json.loads((site / "data.js").read_text().removeprefix("window.GALLERY = ").rstrip(";\n"))
    assert [(c["caption_id"], c["label"], c["change"]) for c in data["pairs"]] == [
        ("c0", "a", "image changed"), ("c0", "b", "image changed"), ("c1", "a", "removed"), ("c3", "b", "added")]
    assert data["pairs"][1]["image_o"]["full"] == f"images/{moved}" and (site / "images" / moved).is_file()
