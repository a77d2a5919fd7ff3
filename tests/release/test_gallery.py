"""The gallery's files: images copied and thumbnailed once by content (a rerun rewrites nothing), pruned when no card
shows them, the edit span of every edit type, equal bytes for equal inputs, and the VLM judge's verdict on the cards
with the filter of pairs where it and the people disagree."""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from tasks.core.io import rejects_path
from tasks.core.schemas import COUNTERFACTUALS, JUDGED, JUDGED_REJECTS, PAIR, SELECTED
from tasks.image import store
from tasks.release import gallery, gallery_site
from tasks.release.gallery import build, edit_spans
from tasks.release.gallery_site import THUMB
from tests.conftest import project_params


def test_the_edit_spans_of_every_edit_type():
    cases = {("a dog on a couch", "a cat on a couch"): ([[2, 5]], [[2, 5]]),  # noun / lexical
             ("two dogs on a couch", "three dogs on a couch"): ([[0, 3]], [[0, 5]]),  # quantifier
             ("a dog on a couch", "a small dog on a couch"): ([[2, 2]], [[2, 7]]),  # insert: empty in C_o
             ("a dog on a red couch", "a dog on a couch"): ([[11, 14]], [[11, 11]]),  # delete
             ("two dogs", "two cats"): ([[4, 8]], [[4, 8]]),  # whole words, though "s" is shared
             ("a bike on the street.", "a bike."): ([[7, 20]], [[6, 6]]),  # not the period both keep
             ("a dog on a couch", "a couch on a dog"): ([[2, 5], [11, 16]], [[2, 7], [13, 16]]),  # swap: two
             ("A dog on an ottoman", "An ottoman on a dog"): ([[0, 5], [9, 19]], [[0, 10], [14, 19]])}  # + articles
    for (c_o, c_c), spans in cases.items():
        assert (edit_spans(c_o, c_c), edit_spans(c_c, c_o)) == spans


def write_run(root, rows: int, seed: int = 0) -> dict[str, str]:
    """A selection of `rows` pairs with 256-px PNGs (random, from `seed`) in a pixel-addressed store; the paths
    overrides naming it."""
    rng = np.random.default_rng(seed)
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
            "paths.figures": root / "none", "paths.judged": root / "none"}


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


def test_a_missing_or_corrupt_image_or_thumbnail_is_written_again_and_a_stray_temporary_removed(tmp_path):
    """A truncated thumbnail and a deleted image are each written again with their pair (same bytes); no other file
    is written, and a killed build's temporary is removed."""
    paths = write_run(tmp_path, 2)
    params = project_params(*(f"{k}={v}" for k, v in paths.items()))
    build(params)
    site = paths["paths.gallery"]
    first = files(site)
    thumbs = sorted(f.removeprefix("thumbs/") for f in first if f.startswith("thumbs/"))
    (site / "thumbs" / thumbs[0]).write_bytes(first[f"thumbs/{thumbs[0]}"][1][:100])
    (site / "images" / thumbs[1]).unlink()
    (site / "images" / thumbs[2]).with_name(".stray.png.tmp").write_bytes(b"half an image")
    build(params)
    again = files(site)
    assert {f: content for f, (_, content) in again.items()} == {f: content for f, (_, content) in first.items()}
    assert sorted(f for f in first if again[f][0] != first[f][0]) == sorted(
        f"{folder}/{name}" for folder in ("images", "thumbs") for name in thumbs[:2])


def test_the_diff_gallery_shows_each_version_of_every_pair_they_do_not_share(tmp_path):
    from tasks.release import diff

    paths = write_run(tmp_path, 4)
    counterfactuals, selected = (pl.read_parquet(paths[f"paths.{k}"]) for k in ("counterfactual_captions", "selected"))
    moved = store.write_png(paths["paths.selected_images"], np.zeros((256, 256, 3), dtype=np.uint8))
    a = (counterfactuals, selected.filter(pl.col("caption_id") != "c3"), {})
    b = (counterfactuals, selected.filter(pl.col("caption_id") != "c1")
         .with_columns(image_o=pl.when(pl.col("caption_id") == "c0").then(pl.lit(moved)).otherwise("image_o")), {})
    changes = diff.pair_changes(a, b)
    assert changes == {"c0": "image changed", "c1": "removed", "c3": "added"}
    read = gallery_site.from_store(paths["paths.selected_images"])
    site = tmp_path / "diff"
    assert gallery.compare(site, "a → b", {"a": (*a[:2], read), "b": (*b[:2], read)}, changes) == 4
    data = site_data(site)
    assert [(c["caption_id"], c["label"], c["change"]) for c in data["pairs"]] == [
        ("c0", "a", "image changed"), ("c0", "b", "image changed"), ("c1", "a", "removed"), ("c3", "b", "added")]
    assert data["pairs"][1]["image_o"]["full"] == f"images/{moved}" and (site / "images" / moved).is_file()


def site_data(site) -> dict:
    """`window.GALLERY` of a written site."""
    return json.loads((site / "data.js").read_text().removeprefix("window.GALLERY = ").rstrip(";\n"))


def judge(p_yes: tuple, passed: bool | None, reason: str | None = None, people: bool | None = None) -> dict:
    """A judged row's verdict columns: P(Yes) per question (JUDGE_QUESTIONS order), pass, reason, people's pass."""
    return {"judge_original_o": p_yes[0], "judge_substitute_c": p_yes[1], "judge_substitute_o": p_yes[2],
            "judge_original_c": p_yes[3], "judge_pass": passed, "judge_reason": reason, "people_pass": people}


# c0 judge pass + people reject, c1 judge reject + people pass, c2 both pass, c3 judge pass + not rated by people,
# c4 judge off (null verdict) + people reject, c5 no judged row + people pass
JUDGED_ROWS = {"c0": judge((0.9123456789, 0.8, 0.1, 0.05), True, people=False),
               "c1": judge((0.9, 0.2, 0.1, 0.05), False, "judge_substitute_missing", people=True),
               "c2": judge((0.7, 0.7, 0.3, 0.3), True, people=True), "c3": judge((0.6, 0.6, 0.2, 0.2), True),
               "c4": judge((None,) * 4, None, people=False)}
PEOPLE = {"c0": False, "c1": True, "c2": True, "c4": False, "c5": True}
TRUTH_ROWS = {"c0": {"accurate": True, "minimal": False, "o_shows_o": True, "c_shows_c": True, "o_shows_c": False,
                      "c_shows_o": False, "reason_o": None, "reason_c": None},
              "c1": {"accurate": False, "minimal": False, "o_shows_o": True, "c_shows_c": False, "o_shows_c": False,
                     "c_shows_o": True, "reason_o": None, "reason_c": "colour"}}
DISAGREEMENTS = ["c0", "c1"]


def judged_site(root):
    """The site of a 6-pair run whose cards carry JUDGED_ROWS and PEOPLE; returns the site folder."""
    paths = write_run(root, 6)
    frames = [pl.read_parquet(paths[f"paths.{k}"]) for k in ("selected", "counterfactual_captions")]
    cards = gallery.pair_cards(*frames, paths["paths.selected_images"], root / "site", PEOPLE,
                               {i: {"caption_id": i, **row} for i, row in JUDGED_ROWS.items()},
                               {i: {"caption_id": i, **row} for i, row in TRUTH_ROWS.items()})
    gallery_site.write_site(root / "site", {"pairs": cards, "removal": [], "rejects": [], "funnel": {},
                                            "scores": list(gallery.SCORES)}, [])
    return root / "site"


def test_cards_carry_the_judges_verdict_and_whether_it_agrees_with_the_people(tmp_path):
    cards = {card["caption_id"]: card for card in site_data(judged_site(tmp_path))["pairs"]}
    assert cards["c1"]["judge"] == {"pass": False, "reason": "judge_substitute_missing", "p_yes": {
        "original_o": 0.9, "substitute_c": 0.2, "substitute_o": 0.1, "original_c": 0.05}}
    assert cards["c0"]["judge"]["p_yes"]["original_o"] == 0.912346  # rounded like every score
    assert cards["c0"]["judge"]["pass"] is True and cards["c0"]["judge"]["reason"] is None
    assert cards["c4"]["judge"] is None and cards["c5"]["judge"] is None  # judge off, no row: not judged
    assert {i: c["truth"] for i, c in cards.items() if c["truth"]} == TRUTH_ROWS  # the toy world's checker
    assert {i: c["validation"] for i, c in cards.items()} == {
        "c0": "not validated", "c1": "validated", "c2": "validated", "c3": None, "c4": "not validated",
        "c5": "validated"}
    assert {i: c["agreement"] for i, c in cards.items()} == {
        "c0": "disagree", "c1": "disagree", "c2": "agree", "c3": None, "c4": None, "c5": None}


def test_the_build_reads_the_judges_output_and_rejects_only_when_there(tmp_path):
    paths = write_run(tmp_path, 4)
    judged, selected = tmp_path / "judged.parquet", pl.read_parquet(paths["paths.selected"])
    pl.DataFrame([{"caption_id": i, **JUDGED_ROWS[i]} for i in ("c0", "c1", "c2", "c3")],
                 schema=JUDGED).write_parquet(judged)
    pl.DataFrame([{**{k: v for k, v in selected.row(1, named=True).items() if k in PAIR}, **JUDGED_ROWS["c1"],
                   "stage": "judge", "reason": "judge_substitute_missing"}],
                 schema=JUDGED_REJECTS, strict=False).write_parquet(rejects_path(judged))
    pl.DataFrame({"caption_id": ["c1", "c2"]}).write_parquet(tmp_path / "validated.parquet")
    overrides = {**paths, "paths.judged": judged, "paths.validated": tmp_path / "validated.parquet"}
    build(project_params(*(f"{k}={v}" for k, v in overrides.items())))
    data = site_data(paths["paths.gallery"])
    # c3's images are not both labelled (people_pass null), though it is outside the validated subset
    assert {c["caption_id"]: c["agreement"] for c in data["pairs"]} == {
        "c0": "disagree", "c1": "disagree", "c2": "agree", "c3": None}
    assert [c["judge"]["reason"] if c["judge"] else None for c in data["pairs"]] == [
        None, "judge_substitute_missing", None, None]
    [group] = [g for g in data["rejects"] if g["stage"] == "judge"]
    assert (group["reason"], group["count"], group["rows"][0]["caption_id"]) == ("judge_substitute_missing", 1, "c1")
    assert group["rows"][0]["judge_substitute_c"] == 0.2

    build(project_params(*(f"{k}={v}" for k, v in paths.items())))  # a run before the judge: no judge data
    data = site_data(paths["paths.gallery"])
    assert all(c["judge"] is None and c["agreement"] is None for c in data["pairs"])
    assert not [g for g in data["rejects"] if g["stage"] == "judge"]


def test_the_judge_filters_in_a_browser(tmp_path):
    """The disagreement filter shows exactly the pairs where judge and people differ, alone, with the judge filter
    and from a shared link; the judge filters are hidden in a gallery without judge data."""
    from tests.browser import page

    index = (judged_site(tmp_path / "judged") / "index.html").as_uri()
    shown = "cs => cs.map(c => c.dataset.captionId)"
    with page() as tab:
        tab.goto(index + "#tab=pairs&agreement=disagree")
        assert tab.locator("article.card").evaluate_all(shown) == DISAGREEMENTS
        assert tab.inner_text("#count") == "2 of 6 pairs"
        c1 = tab.inner_text("article[data-caption-id=c1] .judge")
        assert "judge: substitute missing" in c1 and "sub@I_c 0.2000" in c1
        tab.select_option("select[name=judge]", "reject")
        assert tab.locator("article.card").evaluate_all(shown) == ["c1"]
        assert "judge=reject" in tab.url and "agreement=disagree" in tab.url
        tab.select_option("select[name=agreement]", "agree")
        assert tab.locator("article.card").evaluate_all(shown) == []
        tab.select_option("select[name=judge]", "none")
        tab.select_option("select[name=agreement]", "")
        assert tab.locator("article.card").evaluate_all(shown) == ["c4", "c5"]
        assert tab.locator(".judge-filter").evaluate_all("ls => ls.map(l => l.hidden)") == [False, False]
        errors = list(tab.errors)

        plain = tmp_path / "plain"
        build(project_params(*(f"{k}={v}" for k, v in write_run(plain, 2).items())))
        tab.goto((plain / "gallery" / "index.html").as_uri() + "#tab=pairs")
        assert tab.locator(".judge-filter").evaluate_all("ls => ls.map(l => l.hidden)") == [True, True]
        assert tab.locator("article.card p.judge").count() == 0
        errors += tab.errors
    assert errors == []


def test_an_unknown_tab_or_page_in_a_link_shows_the_default_tab_and_page_1(tmp_path):
    """`#tab=foo` shows the default tab (the overview), `#page=abc` or `#page=-2` page 1, with no page error; a
    fresh load and a changed fragment alike."""
    from tests.browser import page

    paths = write_run(tmp_path, 49)  # two pages of 48
    build(project_params(*(f"{k}={v}" for k, v in paths.items())))
    index = (paths["paths.gallery"] / "index.html").as_uri()
    active = "nodes => nodes.filter(n => n.classList.contains('active')).map(n => n.id || n.dataset.tab)"
    with page() as tab:
        for fragment in ("#tab=foo", "#tab=pairs&page=abc", "#tab=constructor", "#tab=pairs&page=-2"):
            tab.goto(index + fragment)
            shown = "overview" if "pairs" not in fragment else "pairs"
            assert tab.locator("section.tab").evaluate_all(active) == [shown], fragment
            assert tab.locator("#tabs a").evaluate_all(active) == [shown], fragment
        assert tab.inner_text("#page") == "page 1 of 2"
        assert tab.locator("article.card").count() == 48
        tab.click("#next")
        assert tab.inner_text("#page") == "page 2 of 2"
        errors = list(tab.errors)
    assert errors == []


def test_a_swap_shows_both_spans_highlighted_in_a_browser(tmp_path):
    """A swap's card marks both exchanged words of C_o and of C_c; a noun edit's card one word each."""
    from tests.browser import page

    paths = write_run(tmp_path, 2)
    swap = {"caption": "A dog on an ottoman.", "counterfactual": "An ottoman on a dog.", "edit_type": "swap",
            "original_word": "A dog on an ottoman", "substitute": "An ottoman on a dog"}
    for table in ("paths.selected", "paths.counterfactual_captions"):
        frame = pl.read_parquet(paths[table])
        frame.with_columns(**{k: pl.when(pl.col("caption_id") == "c0").then(pl.lit(v)).otherwise(pl.col(k))
                              for k, v in swap.items()}).write_parquet(paths[table])
    build(project_params(*(f"{k}={v}" for k, v in paths.items())))
    marked = "ms => ms.map(m => m.textContent)"
    with page() as tab:
        tab.goto((paths["paths.gallery"] / "index.html").as_uri() + "#tab=pairs")
        assert tab.locator("article[data-caption-id=c0] mark.o").evaluate_all(marked) == ["A dog", "an ottoman"]
        assert tab.locator("article[data-caption-id=c0] mark.c").evaluate_all(marked) == ["An ottoman", "a dog"]
        assert "A dog on an ottoman." in tab.inner_text("article[data-caption-id=c0]")
        assert tab.locator("article[data-caption-id=c1] mark.o").evaluate_all(marked) == ["dog"]
        assert tab.locator("article[data-caption-id=c1] mark.c").evaluate_all(marked) == ["cat"]
        errors = list(tab.errors)
    assert errors == []
