"""Candidates on the tiny RoBERTa: minimal edits, filter reasons in order, accounting, batching, long captions;
every edit type's rewrites."""

from __future__ import annotations

import nltk
import polars as pl
import pytest
import torch

from tasks.core.errors import UserError
from tasks.core.specs import ModelSpec
from tasks.text import candidates, tagging
from tasks.text import sites as site_stage
from tasks.text.ingest import read_captions
from tasks.text.params import CandidatesParams, SitesParams
from tasks.toyworld import world
from tests.conftest import DEMO_CAPTIONS, WORLD_CAPTIONS, requires_nltk

pytestmark = requires_nltk
TOP_K = 10
KEYS = ["caption_id", "position"]


def site_frame(captions: list[str], prefix: str = "t") -> pl.DataFrame:
    caps = pl.DataFrame({"caption_id": [f"{prefix}{i}_0" for i in range(len(captions))],
                         "image_id": [f"{prefix}{i}" for i in range(len(captions))], "caption": captions})
    return site_stage.run(caps, SitesParams(max_tokens=1_000))[0]  # past the sites' bound: the MLM's limit is tested


def site(caption: str, word: str) -> dict:
    rows = site_frame([caption]).filter(pl.col("original_word") == word).to_dicts()
    assert rows, f"{word!r} is not a noun site of {caption!r}"
    return rows[0]


@pytest.fixture(scope="module")
def params(tiny_text_models) -> CandidatesParams:
    return CandidatesParams(model=ModelSpec(id=str(tiny_text_models["mlm"])), top_k=TOP_K, batch_size=16)


@pytest.fixture(scope="module")
def mlm(params):
    return candidates.load_models(params)


@pytest.fixture(scope="module")
def demo_sites() -> pl.DataFrame:
    return site_stage.run(read_captions(DEMO_CAPTIONS)[0], SitesParams())[0]


@pytest.fixture(scope="module")
def demo_run(demo_sites, params, mlm):
    return candidates.run(demo_sites, params, mlm)


def with_params(params: CandidatesParams, **changes) -> CandidatesParams:
    return params.model_copy(update=changes)


def fixed_fills(monkeypatch, fills: list[tuple[str, float]]) -> None:
    """Every masked sentence gets these (token, probability) fills."""
    monkeypatch.setattr(candidates, "top_fills",
                        lambda mlm, masked, lengths, top_k, batch_size: [list(fills) for _ in masked])


# --- the tiny model end to end -------------------------------------------------------------------------------------


def test_model_is_what_the_tests_assume(mlm):
    assert mlm.max_length == 128
    assert mlm.marks_word_start
    assert mlm.is_word_start("Ġdog") and not mlm.is_word_start("dog")


def test_minimal_edit_invariant_on_every_row(demo_run):
    kept, rejects = demo_run
    assert dict(kept.schema) == candidates.SCHEMA and dict(rejects.schema) == candidates.REJECTS_SCHEMA
    assert kept.height > 0
    rows = kept.to_dicts() + rejects.filter(pl.col("substitute").is_not_null()).to_dicts()
    for r in rows:
        cap, s, e, sub = r["caption"], r["start"], r["end"], r["substitute"]
        assert r["candidate"] == cap[:s] + sub + cap[e:]
        assert r["candidate"][:s] == cap[:s]
        assert r["candidate"][s + len(sub):] == cap[e:]
        assert cap[s:e] == r["original_word"]


def test_every_site_fill_is_kept_or_rejected(demo_sites, demo_run):
    kept, rejects = demo_run
    assert kept.height + rejects.height == demo_sites.height * TOP_K
    counts = pl.concat([kept.select(KEYS), rejects.select(KEYS)]).group_by(KEYS).len()
    assert counts.height == demo_sites.height
    assert set(counts["len"]) == {TOP_K}
    assert set(rejects["stage"]) == {"candidates"}
    assert set(rejects["reason"]) <= {"subword", "not_a_word", "same_word", "token_count_changed", "not_a_noun",
                                      "duplicate_fill", "repeated_word", "article_disagreement"}


def fill_of(row: dict, site: dict) -> str:
    """The masked-LM fill of a noun candidate row, less the article an edit widened to (`an apple` -> `a pear`)."""
    return row["substitute"] if row["start"] == site["start"] else row["substitute"].split(maxsplit=1)[1]


def test_kept_rows_pass_every_filter_independently(demo_sites, demo_run, params):
    kept, _ = demo_run
    by_site = {(r["caption_id"], r["position"]): r for r in demo_sites.iter_rows(named=True)}
    for r in kept.iter_rows(named=True):
        site = by_site[(r["caption_id"], r["position"])]
        assert fill_of(r, site).casefold() != site["original_word"].casefold()
        assert tagging.WORD.fullmatch(fill_of(r, site))
        tokens = nltk.word_tokenize(r["candidate"])
        assert len(tokens) == site["n_tokens"]
        assert nltk.pos_tag(tokens)[r["position"]][1] in params.keep_tags
        assert 0.0 < r["mlm_score"] <= 1.0
    # One candidate per (site, substitute).
    assert kept.select(*KEYS, "substitute").is_duplicated().sum() == 0


def test_string_reasons_are_reproducible(demo_sites, demo_run, params):
    """Rejects whose reason depends on the fill string alone are what `reject_reason` says for that string."""
    _, rejects = demo_run
    by_site = {(r["caption_id"], r["position"]): r for r in demo_sites.iter_rows(named=True)}
    checked = rejects.filter(pl.col("reason").is_in(["not_a_word", "same_word", "token_count_changed", "not_a_noun"]))
    assert checked.height > 0
    for r in checked.iter_rows(named=True):
        s = by_site[(r["caption_id"], r["position"])]
        assert candidates.reject_reason(True, fill_of(r, s), s, params) == r["reason"]


def test_batched_equals_unbatched_to_the_bit(demo_sites, params, mlm):
    """A site's fills and scores never depend on its batch-mates or the batch size (`invariant_map`)."""
    sites = demo_sites.gather(list(range(0, demo_sites.height, 8)))  # ~40 sites of mixed caption lengths
    one = candidates.run(sites, with_params(params, batch_size=1), mlm)
    many = candidates.run(sites, with_params(params, batch_size=64), mlm)
    some = candidates.run(sites.head(7), with_params(params, batch_size=5), mlm)
    assert one[0].height > 0 and some[0].height > 0
    assert all(a.equals(b) for a, b in zip(one, many))
    site = ["caption_id", "edit_type", "start"]
    assert some[0].equals(one[0].join(sites.head(7).select(site), on=site, how="semi"))


def test_a_top_k_over_the_vocabulary_takes_every_token(demo_sites, params, mlm):
    """top_k past the MLM's vocabulary means all of it (a paper-shape roberta has 50,265 tokens; torch refuses more)."""
    sites = demo_sites.head(10)
    vocabulary = len(mlm.tokenizer)
    every, beyond = (candidates.run(sites, with_params(params, top_k=k), mlm) for k in (vocabulary, 2**31))
    assert every[0].height > 0 and all(a.equals(b) for a, b in zip(every, beyond))


def test_an_unreadable_chunk_grammar_is_a_one_line_user_error():
    with pytest.raises(UserError, match="chunk grammar 'garbage': Illegal chunk pattern"):
        tagging.chunker("garbage")


def test_deterministic_rerun(demo_sites, params, mlm):
    sites = demo_sites.head(60)
    first, again = candidates.run(sites, params, mlm), candidates.run(sites, params, mlm)
    assert first[0].height > 0
    assert again[0].equals(first[0]) and again[1].equals(first[1])


def test_too_long_caption_is_rejected_and_others_unaffected(demo_sites, params, mlm):
    long_caption = "A dog sits on a mat" + ", and a cat sits on a mat" * 25 + "."
    long_sites = site_frame([long_caption], prefix="long")
    assert long_sites.height > 0
    assert len(mlm.tokenizer(long_caption)["input_ids"]) > mlm.max_length
    normal = demo_sites.head(20)
    mixed = pl.concat([normal.head(7), long_sites, normal.tail(13)])

    kept, rejects = candidates.run(mixed, params, mlm)
    base_kept, base_rejects = candidates.run(normal, params, mlm)

    too_long = rejects.filter(pl.col("reason") == "too_long_for_mlm")
    assert too_long.height == long_sites.height  # one reject per long site, no fills
    assert too_long.select(KEYS).sort(KEYS).equals(long_sites.select(KEYS).sort(KEYS))
    assert too_long["substitute"].null_count() == too_long.height
    assert too_long["candidate"].null_count() == too_long.height
    assert not kept.filter(pl.col("caption_id").str.starts_with("long")).height
    for got, want in ((kept, base_kept), (rejects.filter(pl.col("reason") != "too_long_for_mlm"), base_rejects)):
        assert got.drop("mlm_score").equals(want.drop("mlm_score"))
        diff = (got["mlm_score"] - want["mlm_score"]).abs().max()
        assert diff is None or diff <= 1e-5


def test_mlm_length_limit_is_exact(params, mlm):
    """A masked caption of exactly max_length tokens (specials included) is filled; one more token is too long."""
    by_length = {}
    for k in range(110, 135):
        s = site("A dog" + " a" * k + ".", "dog")
        n = len(mlm.tokenizer(candidates.masked_caption(s, "<mask>"))["input_ids"])
        by_length.setdefault(n, s)
    assert {128, 129} <= set(by_length)
    fits, over = by_length[128], by_length[129]
    kept, rejects = candidates.run(pl.DataFrame([fits, over], schema=site_stage.SCHEMA), params, mlm)
    fit_rows = pl.concat([kept.select("caption", "substitute"), rejects.select("caption", "substitute")]).filter(
        pl.col("caption") == fits["caption"])
    assert fit_rows.height == TOP_K and fit_rows["substitute"].null_count() == 0
    assert rejects.filter(pl.col("caption") == over["caption"])["reason"].to_list() == ["too_long_for_mlm"]


def test_only_too_long_sites(params, mlm):
    long_sites = site_frame(["A dog sits on a mat" + ", and a cat sits on a mat" * 25 + "."])
    kept, rejects = candidates.run(long_sites, params, mlm)
    assert kept.is_empty() and set(rejects["reason"]) == {"too_long_for_mlm"}
    assert rejects.height == long_sites.height


# --- reject_reason: each filter, in order ---------------------------------------------------------------------------

DOG = "A dog runs in the park."
KEEP = CandidatesParams(model=ModelSpec(id="unused"), keep_tags=("NN", "NNS", "NNP"))


@pytest.mark.parametrize(("word_start", "fill", "reason"), [
    (True, "cat", None),
    (True, "John", None),                      # NNP is a keep tag
    (False, "cat", "subword"),                 # a continuation piece after a space
    (False, ",", "subword"),                   # subword is checked first
    (True, ",", "not_a_word"),
    (True, "123", "not_a_word"),
    (True, "", "not_a_word"),
    (True, "cat1", "not_a_word"),
    (True, "_", "not_a_word"),
    (True, "dog", "same_word"),
    (True, "DOG", "same_word"),
    (True, "Dog", "same_word"),
    (True, "cat's", "token_count_changed"),   # word-shaped, but word_tokenize splits it
    (True, "can't", "token_count_changed"),
    (True, "the", "not_a_noun"),
    (True, "quickly", "not_a_noun"),
])
def test_reject_reason(word_start, fill, reason):
    assert candidates.reject_reason(word_start, fill, site(DOG, "dog"), KEEP) == reason


def test_reject_reason_keep_tags():
    nouns_only = with_params(KEEP, keep_tags=("NN", "NNS"))
    assert candidates.reject_reason(True, "John", site(DOG, "dog"), nouns_only) == "not_a_noun"


def test_no_subword_check_at_caption_start():
    s = site("Dogs run in the park.", "Dogs")
    assert s["start"] == 0
    assert candidates.reject_reason(False, "Cats", s, KEEP) is None
    assert candidates.reject_reason(False, "Dogs", s, KEEP) == "same_word"


# --- run with controlled fills -------------------------------------------------------------------------------------


def test_run_assigns_every_reason(monkeypatch, params, mlm):
    fixed_fills(monkeypatch, [
        ("Ġcat", 0.20), ("cat", 0.15), ("Ġ,", 0.12), ("ĠDog", 0.11), ("Ġthe", 0.10),
        ("Ġcat's", 0.09), ("Ġ", 0.08), ("Ġ123", 0.07), ("bird", 0.06), ("ĠJohn", 0.05),
    ])
    sites = site_frame([DOG]).filter(pl.col("original_word") == "dog")
    kept, rejects = candidates.run(sites, params, mlm)
    assert kept.select("substitute", "mlm_score", "candidate").rows() == [
        ("cat", 0.20, "A cat runs in the park."), ("John", 0.05, "A John runs in the park.")]
    assert rejects.select("substitute", "reason").rows() == [
        ("cat", "duplicate_fill"), (",", "not_a_word"), ("Dog", "same_word"), ("the", "not_a_noun"),
        ("cat's", "token_count_changed"), ("", "not_a_word"), ("123", "not_a_word"), ("bird", "subword"),
    ]
    assert rejects.filter(pl.col("substitute") == "cat's")["candidate"].to_list() == ["A cat's runs in the park."]


def test_run_word_start_not_needed_at_caption_start(monkeypatch, params, mlm):
    fixed_fills(monkeypatch, [("Cats", 0.5), ("ĠBirds", 0.4)])
    kept, rejects = candidates.run(site_frame(["Dogs run in the park."]).filter(pl.col("start") == 0), params, mlm)
    assert kept["candidate"].to_list() == ["Cats run in the park.", "Birds run in the park."]
    assert rejects.is_empty()


def test_fill_after_a_rejected_subword_twin_is_not_a_duplicate(monkeypatch, params, mlm):
    """`cat` (a continuation piece: "Acat") is rejected as subword; the word-start `Ġcat` that follows is the first
    usable fill with that text and must be kept, not dropped as `duplicate_fill` of a fill that was never kept."""
    fixed_fills(monkeypatch, [("cat", 0.5), ("Ġcat", 0.3)])
    sites = site_frame([DOG]).filter(pl.col("original_word") == "dog")
    kept, rejects = candidates.run(sites, params, mlm)
    assert kept.select("substitute", "mlm_score").rows() == [("cat", 0.3)]
    assert rejects.select("substitute", "reason").rows() == [("cat", "subword")]


def test_no_sites_no_candidates(params, mlm):
    kept, rejects = candidates.run(site_frame([]), params, mlm)
    assert kept.is_empty() and rejects.is_empty()
    assert kept.schema == candidates.SCHEMA


def test_head_at_masked_positions_equals_full_logits(mlm, demo_sites):
    masked = [candidates.masked_caption(r, mlm.tokenizer.mask_token)
              for r in demo_sites.head(6).iter_rows(named=True)]
    enc = mlm.tokenizer(masked, padding=True, return_tensors="pt")
    rows, cols = (enc["input_ids"] == mlm.tokenizer.mask_token_id).nonzero(as_tuple=True)
    with torch.no_grad():
        full = mlm.model(**enc).logits[rows, cols]
        torch.testing.assert_close(mlm.masked_logits(enc, rows, cols), full, rtol=1e-5, atol=1e-5)
    assert rows.tolist() == list(range(6))


# --- edit types beyond nouns ---------------------------------------------------------------------------------------

ALL_TYPES = SitesParams(types=("noun", "lexical", "quantifier", "insert", "delete", "swap"))


def typed_sites(caption: str, edit_type: str) -> pl.DataFrame:
    caps = pl.DataFrame({"caption_id": ["t0_0"], "image_id": ["t0"], "caption": [caption]})
    return site_stage.run(caps, ALL_TYPES)[0].filter(pl.col("edit_type") == edit_type)


@pytest.mark.parametrize(("caption", "rewrites"), [
    ("A dog runs.", ["Two dogs runs."]),
    ("An apple and two brown horses.", ["Two apples and two brown horses.", "An apple and a brown horse.",
                                        "An apple and three brown horses."]),
    ("Ten dogs.", ["Nine dogs."]),                           # the top of `numbers` moves down only
    ("Two women and a child.", ["A woman and a child.", "Three women and a child.", "Two women and two children."]),
    ("Two old apples.", ["An old apple.", "Three old apples."]),  # a / an agrees with the word after it
    # The head is the noun counted, not a participle the tagger read as a noun (issue 35).
    ("A small compact car driving past a furniture store", ["Two small compact cars driving past a furniture store",
                                                            "A small compact car driving past two furniture stores"]),
    ("A cat pausing as it's walking.", ["Two cats pausing as it's walking."]),
    ("A stone building near a river.", ["Two stone buildings near a river.", "A stone building near two rivers."]),
    ("The two airplanes are in the air.", ["The three airplanes are in the air."]),  # no `the an airplane`
    ("A couple sitting on a bench.", ["Two couples sitting on a bench.", "A couple sitting on two benches."]),
])
def test_quantifier_rewrites_move_the_count_and_inflect_the_noun(params, mlm, caption, rewrites):
    kept, rejects = candidates.run(typed_sites(caption, "quantifier"), params, mlm)
    assert kept["candidate"].to_list() == rewrites and rejects.is_empty()
    assert kept["mlm_score"].null_count() == kept.height
    for r in kept.iter_rows(named=True):
        assert r["candidate"] == r["caption"][:r["start"]] + r["substitute"] + r["caption"][r["end"]:]


def test_a_number_off_the_list_is_a_reject(params, mlm):
    kept, rejects = candidates.run(typed_sites("A dog and 12 cats.", "quantifier"), params, mlm)
    assert kept["candidate"].to_list() == ["Two dogs and 12 cats."]
    assert rejects.select("original_word", "reason").rows() == [("12 cats", "not_a_count")]


@pytest.mark.parametrize(("caption", "rejected"), [
    ("a lot of computer screens", "a lot"),
    ("A bunch of bananas.", "A bunch"),
    ("A number of people walk by.", "A number"),
    ("A couple of dogs.", "A couple"),
])
def test_a_quantity_is_a_reject_not_a_count(params, mlm, caption, rejected):
    kept, rejects = candidates.run(typed_sites(caption, "quantifier"), params, mlm)
    assert kept.filter(pl.col("original_word") == rejected).is_empty()
    assert rejects.select("original_word", "reason").rows() == [(rejected, "quantity_noun")]


def test_an_ing_word_wordnet_knows_only_in_untagged_senses_is_an_ambiguous_head(params, mlm):
    kept, rejects = candidates.run(typed_sites("A railroad crossing.", "quantifier"), params, mlm)
    assert kept.is_empty() and rejects.select("original_word", "reason").rows() == [
        ("A railroad crossing", "ambiguous_head")]


def rewrites(caption: str, edit_type: str, params, mlm) -> list[tuple[int, str, str, str]]:
    kept, _ = candidates.run(typed_sites(caption, edit_type), params, mlm)
    for r in kept.iter_rows(named=True):
        assert r["candidate"] == r["caption"][:r["start"]] + r["substitute"] + r["caption"][r["end"]:]
        assert r["caption"][r["start"]:r["end"]] == r["original_word"]
    return kept.select("start", "original_word", "substitute", "candidate").rows()


@pytest.mark.parametrize(("caption", "rows"), [
    ("This is an advanced toilet.", [(8, "an advanced ", "a ", "This is a toilet.")]),
    ("An old hat.", [(0, "An old ", "A ", "A hat.")]),
    ("A large area.", [(0, "A large ", "An ", "An area.")]),
    ("A man in an big hat.", [(9, "an big ", "a ", "A man in a hat.")]),  # C_o disagreed: re-chosen all the same
])
def test_a_delete_makes_the_article_agree_and_widens_the_edit_to_it(params, mlm, caption, rows):
    assert [r for r in rewrites(caption, "delete", params, mlm) if not r[1].startswith(" ")] == rows  # adjectives


@pytest.mark.parametrize(("caption", "fill", "row"), [
    ("A man rides a bike.", "umbrella", (12, "a bike", "an umbrella", "A man rides an umbrella.")),
    ("A man rides a bike.", "SUV", (12, "a bike", "an SUV", "A man rides an SUV.")),
    ("A man waits an minute.", "hour", (15, "minute", "hour", "A man waits an hour.")),  # C_o disagreed
    ("A man waits an minute.", "day", (12, "an minute", "a day", "A man waits a day.")),  # ... re-chosen for C_c
    ("A man waits a minute.", "hour", (12, "a minute", "an hour", "A man waits an hour.")),
    ("A man sees an animal.", "unicorn", (11, "an animal", "a unicorn", "A man sees a unicorn.")),
])
def test_a_noun_fill_makes_the_article_agree(monkeypatch, params, mlm, caption, fill, row):
    fixed_fills(monkeypatch, [("Ġ" + fill, 0.5)])
    sites = typed_sites(caption, "noun").tail(1)
    kept, rejects = candidates.run(sites, params, mlm)
    assert kept.select("start", "original_word", "substitute", "candidate").rows() == [row], rejects.rows()


def test_a_lexical_fill_makes_the_article_agree(monkeypatch, params, mlm):
    fixed_fills(monkeypatch, [("Ġbig", 0.5)])
    kept, _ = candidates.run(typed_sites("A man in an old hat.", "lexical"), params, mlm)
    assert kept.select("start", "original_word", "substitute", "candidate").rows() == [
        (9, "an old", "a big", "A man in a big hat.")]


@pytest.mark.parametrize(("fill", "row"), [
    ("old", (0, "A ", "An old ", "An old dog on a mat.")),
    ("one-way", (2, "", "one-way ", "A one-way dog on a mat.")),
])
def test_an_insert_makes_the_article_agree(monkeypatch, params, mlm, fill, row):
    fixed_fills(monkeypatch, [("Ġ" + fill, 0.5)])
    sites = typed_sites("A dog on a mat.", "insert").head(1)
    kept, _ = candidates.run(sites, params, mlm)
    assert kept.select("start", "original_word", "substitute", "candidate").rows() == [row]


def test_delete_rewrites_remove_the_span(params, mlm):
    kept, _ = candidates.run(typed_sites("A brown dog sleeps on the couch.", "delete"), params, mlm)
    assert kept["candidate"].to_list() == ["A dog sleeps on the couch.", "A brown dog sleeps."]


def test_insert_fills_must_be_adjectives_and_add_one_token(monkeypatch, params, mlm):
    fixed_fills(monkeypatch, [("Ġbig", 0.3), ("Ġruns", 0.2), ("Ġbig", 0.1), ("Ġred", 0.05)])
    sites = typed_sites("A dog on a mat.", "insert").head(1)
    kept, rejects = candidates.run(sites, params, mlm)
    assert kept.select("substitute", "candidate").rows() == [("big ", "A big dog on a mat."),
                                                           ("red ", "A red dog on a mat.")]
    assert rejects.select("substitute", "reason").rows() == [("runs ", "not_an_adjective"), ("big ", "duplicate_fill")]


def test_lexical_fills_keep_the_tag(monkeypatch, params, mlm):
    fixed_fills(monkeypatch, [("Ġsits", 0.3), ("Ġsat", 0.2), ("Ġdog", 0.1)])
    kept, rejects = candidates.run(typed_sites("A dog runs in the park.", "lexical"), params, mlm)
    assert kept["candidate"].to_list() == ["A dog sits in the park."]  # VBZ for VBZ
    assert dict(rejects.select("substitute", "reason").rows()) == {"sat": "tag_changed", "dog": "tag_changed"}


def test_every_type_keeps_the_minimal_edit_invariant_on_the_demo(params, mlm):
    caps = read_captions(DEMO_CAPTIONS)[0].head(30)
    kept, _ = candidates.run(site_stage.run(caps, ALL_TYPES)[0], params, mlm)
    assert set(kept["edit_type"]) == set(ALL_TYPES.types)
    for r in kept.iter_rows(named=True):
        cap, s, e = r["caption"], r["start"], r["end"]
        assert cap[s:e] == r["original_word"] and r["candidate"] == cap[:s] + r["substitute"] + cap[e:]
        assert r["candidate"] != cap


# --- contradictory modifiers (issue 54) ----------------------------------------------------------------------------


@pytest.mark.parametrize(("caption", "edit_type", "fill", "kept_rows", "rejected_rows"), [
    # the toy world: a second size or colour, wherever it goes among the phrase's adjectives
    ("A small red square.", "insert", "large", [], ["A small red large square.", "A large small red square."]),
    ("A small red square.", "insert", "green", [], ["A small red green square.", "A green small red square."]),
    ("A red square.", "insert", "large", ["A red large square.", "A large red square."], []),
    ("A large blue circle.", "lexical", "red", ["A large red circle."], ["A red blue circle."]),
    # COCO-like: a second size of the dog, not of the couch
    ("A small dog on a couch.", "insert", "large", ["A small dog on a large couch."],
     ["A small large dog on a couch.", "A large small dog on a couch."]),
    ("A white dog on a couch.", "insert", "large", ["A white large dog on a couch.", "A large white dog on a couch.",
                                                    "A white dog on a large couch."], []),
    ("A black and white cat.", "insert", "small", ["A black and white small cat.", "A black and small white cat."],
     []),  # colours of its parts, joined by `and`
    ("A brown horse in a field.", "insert", "dark", ["A brown dark horse in a field.", "A dark brown horse in a field.",
                                                     "A brown horse in a dark field."], []),  # dark: no colour
])
def test_a_noun_given_contradictory_modifiers_is_a_reject(monkeypatch, params, mlm, caption, edit_type, fill,
                                                          kept_rows, rejected_rows):
    fixed_fills(monkeypatch, [("Ġ" + fill, 0.5)])
    kept, rejects = candidates.run(typed_sites(caption, edit_type), params, mlm)
    assert sorted(kept["candidate"]) == sorted(kept_rows)
    assert sorted(rejects["candidate"]) == sorted(rejected_rows)
    assert set(rejects["reason"]) <= {"contradictory_adjectives"}


def test_every_kept_insert_and_lexical_edit_of_the_world_captions_is_a_world_caption(monkeypatch, params, mlm):
    """The demo's captions, every world size, colour and shape filled in at every insert and adjective site: what
    the candidates keep the toy world can draw (`world.parse`); second sizes and colours and a shape the noun is not
    are rejects, and so is a word given twice (`repeated_word`: `three small green small triangles`)."""
    fixed_fills(monkeypatch, [("Ġ" + word, 0.1) for word in (*world.SIZES, *world.COLOURS, *world.SHAPES)])
    types = SitesParams(types=("lexical", "insert"))
    kept, rejects = candidates.run(site_stage.run(read_captions(WORLD_CAPTIONS)[0], types)[0], params, mlm)
    assert kept.height > 100
    assert [c for c in kept["candidate"] if world.parse(c) is None] == []
    assert rejects.filter(pl.col("reason") == "contradictory_adjectives").height > 100
