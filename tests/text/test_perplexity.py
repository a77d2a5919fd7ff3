"""Perplexity ranking on the tiny GPT-2: the formula, batching, the winner per caption, ties and accounting."""

from __future__ import annotations

import math

import polars as pl
import pytest
import torch
from transformers import AutoModelForCausalLM

from tasks.core.specs import ModelSpec
from tasks.text import ingest, perplexity, similarity
from tasks.text import sites as site_stage
from tasks.text.params import PerplexityParams, SitesParams
from tests.conftest import COCO_CAPTIONS, requires_coco, requires_nltk

KEY = ["caption_id", "position", "substitute"]


def row(caption_id: str, caption: str, word: str, substitute: str, position: int, sim: float = 0.85,
        candidate: str | None = None) -> dict:
    start = caption.index(word)
    end = start + len(word)
    return {"caption_id": caption_id, "image_id": caption_id.rsplit("_", 1)[0], "caption": caption,
            "edit_type": "noun", "tag": "NN", "position": position, "start": start, "end": end, "original_word": word,
            "substitute": substitute, "mlm_score": 0.01 * position, "candidate": candidate if candidate is not None else
            caption[:start] + substitute + caption[end:], "similarity": sim}


def frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=similarity.SCHEMA)


@pytest.fixture(scope="module")
def params(tiny_text_models) -> PerplexityParams:
    return PerplexityParams(model=ModelSpec(id=str(tiny_text_models["clm"])), batch_tokens=64)


@pytest.fixture(scope="module")
def lm(params):
    return perplexity.load_models(params)


def direct_perplexity(lm, ids: list[int]) -> float:
    """exp(mean NLL of tokens 1..n-1), one unpadded forward pass, no BOS."""
    with torch.no_grad():
        logits = lm.model(input_ids=torch.tensor([ids], device=lm.model.device)).logits[0].double()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    nll = -logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:], device=logp.device)]
    return math.exp(nll.mean().item())


def check_accounting(inp: pl.DataFrame, winners: pl.DataFrame, rejects: pl.DataFrame) -> None:
    assert list(winners.schema.items()) == list(perplexity.SCHEMA.items())
    assert list(rejects.schema.items()) == list(perplexity.REJECTS_SCHEMA.items())
    assert winners.height + rejects.height == inp.height
    out = pl.concat([winners.select(KEY), rejects.select(KEY)]).sort(KEY)
    assert out.equals(inp.select(KEY).sort(KEY))
    assert set(rejects["stage"]) <= {"perplexity"}
    assert set(rejects["reason"]) <= {"outranked", "edit_type_not_drawn", "too_short_for_perplexity",
                                      "too_long_for_perplexity"}
    assert winners["caption_id"].is_duplicated().sum() == 0


# --- the perplexity formula ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_ids(lm, demo_captions) -> list[list[int]]:
    texts = demo_captions[:21] + ["A dog.", "A man", "A man riding a bicycle down a city street with many cars " * 3]
    ids = perplexity.token_ids(lm, texts)
    assert all(len(x) >= 2 for x in ids) and min(len(x) for x in ids) == 2
    assert len({len(x) for x in ids}) >= 8  # mixed lengths: padding inside batches
    return ids


def test_token_ids_add_no_bos(lm):
    ids = perplexity.token_ids(lm, ["A dog runs."])[0]
    assert ids == lm.tokenizer("A dog runs.", add_special_tokens=False)["input_ids"]
    assert lm.tokenizer.bos_token_id not in ids and lm.tokenizer.eos_token_id not in ids
    assert lm.tokenizer.decode(ids) == "A dog runs."


def test_batched_equals_unbatched_equals_direct(lm, mixed_ids):
    alone = range(len(mixed_ids))
    batched = perplexity.perplexities(lm, mixed_ids, alone, batch_tokens=64)  # several tries per pass
    single = perplexity.perplexities(lm, mixed_ids, alone, batch_tokens=1)
    shared = perplexity.perplexities(lm, mixed_ids, [0] * len(mixed_ids), batch_tokens=1)  # one trie for all
    direct = [direct_perplexity(lm, ids) for ids in mixed_ids]
    for got in (batched, single, shared):
        assert got == pytest.approx(direct, rel=1e-5)
    assert all(p > 1.0 for p in batched)


def test_trie_holds_each_distinct_prefix_once():
    trie = perplexity.Trie()
    ends = [trie.add(x) for x in ([5, 6, 7, 8], [5, 6, 9, 8], [5, 6, 7, 8, 1], [5, 6, 7, 8], [4, 6])]
    assert trie.tokens == [5, 6, 7, 8, 9, 8, 1, 4, 6]
    assert trie.parents == [-1, 0, 1, 2, 1, 4, 3, -1, 7]
    assert trie.depths == [0, 1, 2, 3, 2, 3, 4, 0, 1]
    assert ends == [3, 5, 6, 3, 8]


def test_a_tries_perplexities_are_the_same_bytes_in_any_batch(lm, mixed_ids):
    """Batch size and batch-mates never move a score (`invariant_map`), not even in the last bit."""
    alone = range(len(mixed_ids))
    wide = perplexity.perplexities(lm, mixed_ids, alone, batch_tokens=4096)
    assert perplexity.perplexities(lm, mixed_ids, alone, batch_tokens=1) == wide
    assert [perplexity.perplexities(lm, [ids], [0], batch_tokens=4096)[0] for ids in mixed_ids] == wide
    assert perplexity.perplexities(lm, mixed_ids[::-1], alone, batch_tokens=64) == wide[::-1]


def test_shared_prefixes_are_computed_once(lm, monkeypatch):
    """Grouped by caption, the forward passes see each distinct token prefix once; identical sequences in other
    groups are not scored again; and the values equal scoring each sequence alone."""
    texts = ["A dog runs in the park.", "A cat runs in the park.", "A dog runs in the yard.", "A dog sits in the park."]
    ids = perplexity.token_ids(lm, texts)
    seen = []
    path_nll = perplexity.path_nll
    monkeypatch.setattr(perplexity, "path_nll", lambda lm_, rows: seen.extend(t for r in rows for t in r)
                        or path_nll(lm_, rows))
    shared = perplexity.perplexities(lm, ids + ids[:2], ["a"] * 4 + ["b"] * 2, batch_tokens=64)
    assert len({id(t) for t in seen}) == 1  # group "b" holds only sequences already scored (the rest: batch padding)
    assert len(seen[0].tokens) == len({tuple(x[:k]) for x in ids for k in range(1, len(x) + 1)})
    assert len(seen[0].tokens) < sum(map(len, ids))
    alone = perplexity.perplexities(lm, ids, range(4), batch_tokens=1)
    assert shared == pytest.approx(alone + alone[:2], rel=1e-5)


def test_no_bos_is_prepended(lm):
    """The module's value is the formula over the candidate's own tokens, not over `<s>` + tokens."""
    ids = perplexity.token_ids(lm, ["A dog runs in the park."])[0]
    got = perplexity.perplexities(lm, [ids], [0], batch_tokens=1)[0]
    assert got == pytest.approx(direct_perplexity(lm, ids), rel=1e-5)
    with_bos = [lm.tokenizer.bos_token_id] + ids
    assert got != pytest.approx(direct_perplexity(lm, with_bos), rel=1e-3)


# --- run -------------------------------------------------------------------------------------------------------------

DOG = "A dog runs in the park."
MAN = "A man rides a bicycle down the street."
CAT = "Two cats sleep on a sofa."
LONG = "A horse stands in a field" + ", and a cow stands in a field" * 25 + "."


@pytest.fixture
def fake_scores(monkeypatch, lm):
    """Monkeypatch `perplexities` to return chosen values, keyed by candidate text."""
    table: dict[str, float] = {}

    def fake(lm_, ids, groups, batch_tokens):
        assert all(2 <= len(x) <= lm.max_length for x in ids)
        return [table[lm.tokenizer.decode(x)] for x in ids]

    monkeypatch.setattr(perplexity, "perplexities", fake)
    return table


def test_lowest_wins_ties_break_on_position_then_substitute(fake_scores, lm, params):
    rows = [
        row("m_0", MAN, "street", "zebra", 7),     # tie at 10.0 ...
        row("m_0", MAN, "man", "yak", 1),
        row("m_0", MAN, "man", "ant", 1),          # ... smallest (position, substitute) wins
        row("m_0", MAN, "bicycle", "bee", 4),
        row("d_0", DOG, "dog", "cat", 1),
        row("d_0", DOG, "dog", "cow", 1),          # lowest
        row("d_0", DOG, "park", "yard", 5),
        row("c_0", CAT, "sofa", "x", 5, candidate="x"),      # too short: c_0 has no survivor
        row("l_0", LONG, "horse", "dog", 1),                  # too long ...
        row("l_0", LONG, "field", "yard", 5, candidate="A yard."),  # ... the other one wins
    ]
    inp = frame(rows)
    fake_scores.update({
        rows[0]["candidate"]: 10.0, rows[1]["candidate"]: 10.0, rows[2]["candidate"]: 10.0,
        rows[3]["candidate"]: 10.5, rows[4]["candidate"]: 30.0, rows[5]["candidate"]: 20.0,
        rows[6]["candidate"]: 25.0, "A yard.": 99.0,
    })
    ids = perplexity.token_ids(lm, inp["candidate"].to_list())
    assert len(ids[7]) < 2 and len(ids[8]) > lm.max_length

    winners, rejects = perplexity.run(inp, params, lm)
    check_accounting(inp, winners, rejects)
    assert winners.select("caption_id", "position", "substitute", "counterfactual", "perplexity").rows() == [
        ("m_0", 1, "ant", rows[2]["candidate"], 10.0),
        ("d_0", 1, "cow", rows[5]["candidate"], 20.0),
        ("l_0", 5, "yard", "A yard.", 99.0),
    ]
    assert "c_0" not in winners["caption_id"].to_list()
    reasons = {(r["caption_id"], r["substitute"]): (r["reason"], r["perplexity"])
               for r in rejects.iter_rows(named=True)}
    assert reasons == {
        ("m_0", "zebra"): ("outranked", 10.0), ("m_0", "yak"): ("outranked", 10.0),
        ("m_0", "bee"): ("outranked", 10.5), ("d_0", "cat"): ("outranked", 30.0),
        ("d_0", "yard"): ("outranked", 25.0), ("c_0", "x"): ("too_short_for_perplexity", None),
        ("l_0", "dog"): ("too_long_for_perplexity", None),
    }
    # Winner rows carry their inputs through unchanged.
    win = winners.row(1, named=True)
    src = rows[5]
    assert {k: win[k] for k in ("caption", "image_id", "start", "end", "original_word", "mlm_score", "similarity")} == \
        {k: src[k] for k in ("caption", "image_id", "start", "end", "original_word", "mlm_score", "similarity")}


def test_tie_on_position_breaks_on_substitute(fake_scores, params, lm):
    rows = [row("d_0", DOG, "dog", s, 1) for s in ("wolf", "cat", "fox")]
    fake_scores.update({r["candidate"]: 7.0 for r in rows})
    winners, rejects = perplexity.run(frame(rows), params, lm)
    assert winners["substitute"].to_list() == ["cat"]
    assert sorted(rejects["substitute"]) == ["fox", "wolf"]


def test_real_tie_from_duplicate_candidate_text(params, lm):
    """Same candidate text under different labels: identical perplexity, winner by (position, substitute)."""
    text = "A cat runs in the park."
    rows = [row("d_0", DOG, "park", "zzz", 5, candidate=text), row("d_0", DOG, "dog", "cat", 1, candidate=text),
            row("d_0", DOG, "dog", "bbb", 1, candidate=text), row("d_0", DOG, "dog", "ccc", 1, candidate=text)]
    inp = frame(rows)
    winners, rejects = perplexity.run(inp, params.model_copy(update={"batch_tokens": 1}), lm)
    check_accounting(inp, winners, rejects)
    assert winners.select("position", "substitute", "counterfactual").rows() == [(1, "bbb", text)]
    assert set(rejects["reason"]) == {"outranked"}
    assert set(rejects["perplexity"]) == {winners["perplexity"][0]}  # a genuine tie


def test_real_model_lowest_perplexity_wins(params, lm, demo_captions):
    subs = ["cat", "car", "tree", "boat", "table"]
    rows = []
    for i, caption in enumerate(demo_captions[:12]):
        word = caption.split()[1].strip(".,")
        rows += [row(f"x{i}_0", caption, word, sub, 1) for sub in subs]
    inp = frame(rows)
    winners, rejects = perplexity.run(inp, params, lm)
    check_accounting(inp, winners, rejects)
    assert winners["caption_id"].to_list() == [f"x{i}_0" for i in range(12)]  # input order of captions
    ids = perplexity.token_ids(lm, inp["candidate"].to_list())
    direct = inp.with_columns(direct=pl.Series([direct_perplexity(lm, x) for x in ids]))
    for win in winners.iter_rows(named=True):
        group = direct.filter(pl.col("caption_id") == win["caption_id"]).sort("direct")
        assert win["substitute"] == group["substitute"][0]
        assert win["counterfactual"] == group["candidate"][0]
        assert win["perplexity"] == pytest.approx(group["direct"][0], rel=1e-4)
    outranked = rejects.filter(pl.col("reason") == "outranked")
    assert outranked.height == inp.height - winners.height
    assert outranked["perplexity"].null_count() == 0


def test_length_limits_are_exact(params, lm):
    """max_length (128) tokens are scored; 129 are too long; 1 token is too short."""
    by_length = {}
    for k in range(120, 135):
        text = "A" + " a" * k
        by_length.setdefault(len(perplexity.token_ids(lm, [text])[0]), text)
    assert {128, 129} <= set(by_length)
    one = "A"
    assert len(perplexity.token_ids(lm, [one])[0]) == 1
    rows = [row("f_0", DOG, "dog", "fits", 1, candidate=by_length[128]),
            row("o_0", DOG, "dog", "over", 1, candidate=by_length[129]),
            row("s_0", DOG, "dog", "short", 1, candidate=one),
            row("e_0", DOG, "dog", "empty", 1, candidate="")]
    inp = frame(rows)
    winners, rejects = perplexity.run(inp, params, lm)
    check_accounting(inp, winners, rejects)
    assert winners["caption_id"].to_list() == ["f_0"]
    ids = perplexity.token_ids(lm, [by_length[128]])[0]
    assert winners["perplexity"][0] == pytest.approx(direct_perplexity(lm, ids), rel=1e-4)
    assert dict(rejects.select("caption_id", "reason").iter_rows()) == {
        "o_0": "too_long_for_perplexity", "s_0": "too_short_for_perplexity", "e_0": "too_short_for_perplexity"}
    assert rejects["perplexity"].null_count() == 3


def test_no_candidates(params, lm):
    winners, rejects = perplexity.run(frame([]), params, lm)
    check_accounting(frame([]), winners, rejects)
    assert winners.is_empty() and rejects.is_empty()


def test_only_unscorable_rows(params, lm):
    inp = frame([row("s_0", DOG, "dog", "x", 1, candidate="x")])
    winners, rejects = perplexity.run(inp, params, lm)
    check_accounting(inp, winners, rejects)
    assert winners.is_empty()


def test_duplicate_rows_are_all_accounted_for(fake_scores, params, lm):
    """Two identical input rows and one other: one winner, and BOTH other rows must be rejects (row accounting must
    not rely on (caption_id, position, substitute) being unique)."""
    a, b = row("d_0", DOG, "dog", "cat", 1), row("d_0", DOG, "park", "yard", 5)
    fake_scores.update({a["candidate"]: 5.0, b["candidate"]: 9.0})
    inp = frame([a, a, b])
    winners, rejects = perplexity.run(inp, params, lm)
    assert winners.select("substitute").rows() == [("cat",)]
    assert winners.height + rejects.height == 3
    assert sorted(rejects["substitute"]) == ["cat", "yard"]


# --- the paper's model shape -----------------------------------------------------------------------------------------


def scored(winners: pl.DataFrame, rejects: pl.DataFrame) -> pl.DataFrame:
    """(caption_id, candidate, perplexity) of every scored candidate, winners and outranked alike."""
    return pl.concat([winners.rename({"counterfactual": "candidate"}).select("caption_id", "candidate", "perplexity"),
                      rejects.select("caption_id", "candidate", "perplexity")]).sort("caption_id", "candidate")


@pytest.fixture(scope="module")
def coco_candidates() -> pl.DataFrame:
    """Six COCO captions, three substitutes at every noun site: the prefix structure of real candidates."""
    captions = ingest.read_captions(COCO_CAPTIONS)[0].head(6)
    sites, _ = site_stage.run(captions, SitesParams())
    return pl.DataFrame([{**site, "substitute": sub, "mlm_score": 0.5, "similarity": 0.85,
                          "candidate": site["caption"][:site["start"]] + sub + site["caption"][site["end"]:]}
                         for site in sites.iter_rows(named=True) for sub in ("dog", "table", "umbrella")],
                        schema=similarity.SCHEMA)


@pytest.fixture(scope="module")
def paper_shape_params(paper_shape_models) -> PerplexityParams:
    return PerplexityParams(model=ModelSpec(id=str(paper_shape_models / "gpt2-large")), batch_tokens=256)


@requires_coco
@requires_nltk
def test_shared_prefix_equals_full_computation_on_paper_shape_gpt2_large(paper_shape_params, coco_candidates):
    """gpt2-large shape (36 x 1280, 50,257 outputs): perplexity with shared prefixes equals each candidate's own
    unpadded forward pass within 1e-5 relative, and the selected C_c per caption is the same as with each candidate
    scored alone."""
    inp, params = coco_candidates, paper_shape_params
    lm = perplexity.load_models(params)
    assert lm.model.config.n_layer == 36 and lm.model.config.vocab_size == 50257
    activations = {type(m).__name__ for m in lm.model.modules()}
    assert "GELUTanh" in activations and "NewGELUActivation" not in activations  # fused
    shared, shared_rejects = perplexity.run(inp, params, lm)
    alone, alone_rejects = perplexity.run(inp, params.model_copy(update={"shared_prefix": False}), lm)
    assert shared.height == 6 and inp.height >= 36
    assert shared.drop("perplexity").equals(alone.drop("perplexity"))
    assert shared_rejects.drop("perplexity").equals(alone_rejects.drop("perplexity"))
    every = scored(shared, shared_rejects)
    ids = perplexity.token_ids(lm, every["candidate"].to_list())
    stock = perplexity.CausalLM(lm.tokenizer, AutoModelForCausalLM.from_pretrained(params.model.id).eval())
    assert any(type(m).__name__ == "NewGELUActivation" for m in stock.model.modules())  # as published
    assert every["perplexity"].to_list() == pytest.approx([direct_perplexity(stock, x) for x in ids], rel=1e-5)


@requires_coco
@requires_nltk
def test_bf16_changes_a_winner_only_within_its_error(paper_shape_params, coco_candidates):
    """The opt-in bf16 causal LM (`perplexity.model.dtype: bfloat16`) stays within 5% of fp32 perplexity, and it
    picks another C_c only for a caption whose fp32 runner-up is within twice that error of the winner. How often
    that happens on the caption benchmark set: `benchmarks/caption_stages.py --clm-dtype bfloat16`."""
    fp32 = perplexity.run(coco_candidates, paper_shape_params, perplexity.load_models(paper_shape_params))
    bf16_params = paper_shape_params.model_copy(update={"model": paper_shape_params.model.model_copy(
        update={"dtype": "bfloat16"})})
    lm = perplexity.load_models(bf16_params)
    assert lm.model.dtype == torch.bfloat16
    bf16 = perplexity.run(coco_candidates, bf16_params, lm)
    ratio = (scored(*bf16)["perplexity"] / scored(*fp32)["perplexity"] - 1).abs()
    error = ratio.max()
    assert 0 < error < 0.05
    for ours, theirs in zip(fp32[0].iter_rows(named=True), bf16[0].iter_rows(named=True)):
        if ours["counterfactual"] != theirs["counterfactual"]:
            rival = scored(*fp32).filter(pl.col("candidate") == theirs["counterfactual"])["perplexity"].item()
            assert rival / ours["perplexity"] - 1 <= 2 * error


# --- edit types: one drawn per caption ----------------------------------------------------------------------------


def test_the_drawn_type_is_fixed_by_the_caption_and_follows_the_shares():
    ids = [f"c{i}" for i in range(4000)]
    shares = {"noun": 3.0, "delete": 1.0}
    drawn = [perplexity.drawn_type(c, {"noun", "delete"}, shares) for c in ids]
    assert drawn == [perplexity.drawn_type(c, {"delete", "noun"}, dict(reversed(shares.items()))) for c in ids]
    assert abs(drawn.count("noun") / len(ids) - 0.75) < 0.03
    assert {perplexity.drawn_type(c, {"delete"}, shares) for c in ids} == {"delete"}  # the only type it has
    # Adding a type the caption has no candidates of changes no draw.
    assert drawn == [perplexity.drawn_type(c, {"noun", "delete"}, {**shares, "insert": 5.0}) for c in ids]


def test_only_the_drawn_types_candidates_are_scored_and_compete(lm, params):
    rows = []
    for i in range(12):
        cid, caption = f"i{i}_0", f"A brown dog number {i} on the mat."
        rows += [row(cid, caption, "dog", "cat", 2), row(cid, caption, "dog", "bird", 2),
                 {**row(cid, caption, "brown ", "", 1), "edit_type": "delete", "tag": "JJ"}]
    similar = frame(rows)
    two = params.model_copy(update={"type_shares": {"noun": 1.0, "delete": 1.0}})
    winners, rejects = perplexity.run(similar, two, lm)
    check_accounting(similar, winners, rejects)
    drawn = {c: perplexity.drawn_type(c, {"noun", "delete"}, two.type_shares) for c in similar["caption_id"]}
    assert dict(winners.select("caption_id", "edit_type").rows()) == drawn
    assert set(drawn.values()) == {"noun", "delete"}  # both kinds of draw happen in 12 captions
    not_drawn = rejects.filter(pl.col("reason") == "edit_type_not_drawn")
    assert not_drawn.height == sum(2 if t == "delete" else 1 for t in drawn.values())
    assert not_drawn["perplexity"].null_count() == not_drawn.height  # never scored
    assert all(drawn[c] != t for c, t in not_drawn.select("caption_id", "edit_type").rows())
