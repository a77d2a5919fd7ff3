"""SDXL with Prompt-to-Prompt on a tiny random SDXL folder (saved by `StableDiffusionXLPipeline`; CPU fp32, 32x32, 3
steps): it conditions and samples as the pipeline does, sharing changes I_c only (cross-attention maps of the shared
tokens included), and batches render what a canonical render does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from diffusers import EulerAncestralDiscreteScheduler, StableDiffusionXLPipeline
from diffusers.models.attention_processor import Attention

from tasks.image import p2p, render
from tasks.image.sampling import Sample
from tests.image.fixtures import PAIRS, make_params, screen

pytest_plugins = ["tests.image.fixtures"]
SAMPLES = [Sample(101, 1.0, 7.5), Sample(202, 1.0, 12.0), Sample(303, 1.0, 10.0)]
CAPTION, COUNTERFACTUAL = "a dog sitting on a couch", "a cat sitting on a couch"


@pytest.fixture(scope="module")
def sdxl_params(tiny_sdxl):
    return make_params(tiny_sdxl, backend="sdxl")


@pytest.fixture(scope="module")
def sdxl(sdxl_params) -> render.ImageModels:
    return render.load_models(sdxl_params)


def pixel_gap(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(int) - b.astype(int)).max())


def test_it_conditions_and_samples_as_the_pipeline_does(tiny_sdxl, sdxl):
    """Both encoders' penultimate states, encoder 2's pooled projection, zero unconditional embeddings, the time ids
    of a 32 px square: I_o is the pipeline's image for the seed and guidance (Euler-ancestral, its noise draws)."""
    pipe = StableDiffusionXLPipeline.from_pretrained(tiny_sdxl[0].id, add_watermarker=False)
    pipe.scheduler = EulerAncestralDiscreteScheduler.from_config(pipe.scheduler.config)
    diffusion = sdxl.diffusion
    prompts = diffusion.encode(CAPTION, COUNTERFACTUAL)
    embeds, negative, pooled, negative_pooled = pipe.encode_prompt(CAPTION, device="cpu", num_images_per_prompt=1,
                                                                   do_classifier_free_guidance=True)
    torch.testing.assert_close(prompts.states[:2], torch.cat([negative, embeds]))  # batches of 3 vs 1: rounding
    torch.testing.assert_close(prompts.pooled[:2], torch.cat([negative_pooled, pooled]))
    assert diffusion.zero_uncond and not negative.any()
    added = diffusion.condition(prompts, 1, 32).added
    assert added["time_ids"].tolist() == [[32, 32, 0, 0, 32, 32]] * 4
    want = pipe(CAPTION, height=32, width=32, num_inference_steps=3, guidance_scale=7.5, output_type="np",
                generator=torch.Generator().manual_seed(101)).images[0]
    got = render.render(diffusion, prompts, [Sample(101, 0.0, 7.5)], 3, 32).images[0, 0]
    assert pixel_gap(got, np.round(want * 255)) <= 1  # batch of 4 rows vs 2, fused projections: rounding only


def test_the_tokens_alignment_shares_equal_tokens_and_keeps_edited_ones():
    assert p2p.tokens([1, 5, 6, 7, 2], [1, 5, 9, 7, 2], (5, 5)) == [0, 1, 5 + 2, 3, 5 + 4]  # a swap keeps its own
    assert p2p.tokens([1, 5, 6, 2, 2], [1, 5, 8, 6, 2], (4, 5)) == [0, 1, 5 + 2, 2, 5 + 4]  # an insertion shifts
    # a deletion: the end token and padding keep their own (C_o's cover the deleted phrase), equal ids or not
    assert p2p.tokens([1, 5, 6, 7, 2, 2], [1, 5, 2, 2, 2, 2], (5, 3)) == [0, 1, 6 + 2, 6 + 3, 6 + 4, 6 + 5]
    assert p2p.tokens([1, 5, 6, 7, 2], [1, 5, 6, 7, 2], (9, 9)) == [0, 1, 2, 3, 5 + 4]  # truncated: its end token


def test_encode_shares_the_cross_attention_maps_of_the_tokens_both_captions_hold_only(sdxl):
    """The columns `encode` builds are `p2p.tokens` of C_o's and C_c's ids as the encoders read them (padded to 77):
    an edited token, the end token and the padding keep their own column (77 + j), an equal word takes the o map's;
    `condition` gives each o row every token's own column and each c row those."""
    diffusion = sdxl.diffusion
    prompts = diffusion.encode(CAPTION, COUNTERFACTUAL)
    tokenizer = diffusion.tokenizers[0]
    ids = [tokenizer(text, padding="max_length", truncation=True, max_length=tokenizer.model_max_length).input_ids
           for text in (CAPTION, COUNTERFACTUAL)]
    want = p2p.tokens(*ids, prompts.token_counts)
    assert prompts.columns.tolist() == want and len(want) == 77
    edited = [j for j, (o, c) in enumerate(zip(*ids)) if o != c]
    end = prompts.token_counts[1] - 1
    assert edited and all(want[j] == 77 + j for j in [*edited, *range(end, 77)])  # dog -> cat, end, padding
    assert all(want[j] == j for j in range(end) if j not in edited)
    assert diffusion.condition(prompts, 2, 32).columns.tolist() == [list(range(77)), want] * 2


def explicit_cross(attn: Attention, hidden: torch.Tensor, context: torch.Tensor, columns: list[list[int]] | None):
    """Reference: softmax maps per row; each (o, c) pair's c map takes column j from `[map_o | map_c]` at
    `columns[pair][j]` (None: stock), times the c row's values."""
    q, k, v = (x.unflatten(-1, (attn.heads, -1)).transpose(1, 2)
               for x in (attn.to_q(hidden), attn.to_k(context), attn.to_v(context)))
    maps = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).softmax(-1)
    for pair, index in enumerate(columns or []):
        maps[2 * pair + 1] = torch.cat([maps[2 * pair], maps[2 * pair + 1]], -1)[..., index]
    return attn.to_out[0]((maps @ v).transpose(1, 2).flatten(2))


def test_cross_attention_shares_the_shared_tokens_maps_of_sharing_pairs_only():
    torch.manual_seed(2)
    attn = Attention(query_dim=32, cross_attention_dim=24, heads=4, dim_head=8).eval()
    attn.set_processor(p2p.P2PAttnProcessor())
    hidden, context = torch.randn(4, 16, 32), torch.randn(4, 5, 24)
    columns = [list(range(5)), p2p.tokens([1, 5, 6, 7, 2], [1, 5, 9, 7, 2], (5, 5))]
    with torch.no_grad():
        shared = attn(hidden, encoder_hidden_states=context, p2p_shared=torch.tensor([False, True]),
                      p2p_tokens=torch.tensor(columns))
        stock = explicit_cross(attn, hidden, context, None)
        want = explicit_cross(attn, hidden, context, columns)
    torch.testing.assert_close(shared[:3], stock[:3], rtol=1e-5, atol=1e-6)  # o rows, and the pair not sharing
    torch.testing.assert_close(shared[3], want[3], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(shared[3], stock[3], atol=1e-4)


def test_sharing_changes_only_the_counterfactual_image_cross_attention_included(sdxl):
    diffusion = sdxl.diffusion
    prompts = diffusion.encode(CAPTION, COUNTERFACTUAL)
    stock = render.render(diffusion, prompts, [dataclasses.replace(s, p2p_fraction=0.0) for s in SAMPLES], 3, 32)
    shared = render.render(diffusion, prompts, SAMPLES, 3, 32)
    own = dataclasses.replace(prompts, columns=torch.arange(77, 2 * 77))  # every token keeps its own column
    self_only = render.render(diffusion, own, SAMPLES, 3, 32)
    assert np.array_equal(stock.images[:, 0], shared.images[:, 0])
    assert np.array_equal(self_only.images[:, 0], shared.images[:, 0])
    for other in (stock, self_only):
        assert all(not np.array_equal(other.images[i, 1], shared.images[i, 1]) for i in range(len(SAMPLES)))


def test_batches_render_what_a_canonical_render_does(sdxl_params, sdxl):
    pair = PAIRS.row(0, named=True)
    prompts = sdxl.diffusion.encode(pair["caption"], pair["counterfactual"])
    [(chunk, rendered)] = render.Batcher(3).render(sdxl.diffusion, prompts, SAMPLES, sdxl_params)
    for i, sample in enumerate(chunk):
        assert pixel_gap(rendered.images[i], render.canonical(pair, sample, sdxl_params, sdxl)["images"]) <= 1
    alone, _, _ = screen(PAIRS.head(1), make_params((sdxl_params.diffusion, sdxl_params.clip), backend="sdxl",
                                                    n_samples=2, batch_samples=1), sdxl)
    for row in alone.iter_rows(named=True):  # screening one sample a call == its canonical render, scores too
        canonical = render.canonical(pair, Sample(row["seed"], row["p2p_fraction"], row["guidance_scale"]),
                                     sdxl_params, sdxl)
        assert canonical["clip_dir"] == row["clip_dir"] and canonical["max_pixel_c"] == row["max_pixel_c"]

