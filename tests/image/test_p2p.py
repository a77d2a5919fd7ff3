"""Prompt-to-Prompt sharing: the SDPA form equals an explicit map copy; sharing only during the first p·T steps."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from diffusers.models.attention_processor import Attention

from tasks.image import p2p
from tasks.image.backends.sd1 import load_diffusion
from tasks.image.sampling import Sample, render
from tasks.tiny.images import TINY_IMAGE_SIZE

pytest_plugins = ["tests.image.fixtures"]


@pytest.fixture(scope="module")
def diffusion(tiny_specs):
    """The tiny random Stable Diffusion, loaded for real by the image stage's loader (its own VAE)."""
    return load_diffusion(tiny_specs[0], None)


def explicit_attention(attn: Attention, hidden: torch.Tensor, context: torch.Tensor, share: list[bool]):
    """Reference: materialise softmax(q kᵀ/√d) per row, give each shared pair's c row its o row's map, times v."""
    heads = attn.heads
    q, k, v = (x.unflatten(-1, (heads, -1)).transpose(1, 2)
               for x in (attn.to_q(hidden), attn.to_k(context), attn.to_v(context)))
    maps = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).softmax(-1)
    for pair, shared in enumerate(share):
        if shared:
            maps[2 * pair + 1] = maps[2 * pair]
    out = (maps @ v).transpose(1, 2).flatten(2)
    return attn.to_out[0](out)


def test_sdpa_sharing_equals_explicit_map_copy():
    torch.manual_seed(0)
    attn = Attention(query_dim=32, heads=4, dim_head=8).eval()
    attn.set_processor(p2p.P2PAttnProcessor())
    hidden = torch.randn(12, 16, 32)  # 3 samples x [uncond o, uncond c, cond o, cond c]
    shared = p2p.schedule(fractions=[0.5, 0.0, 1.0], steps=10, device=torch.device("cpu"))[2]
    share = [True, True, False, False, True, True]  # per (o, c) row pair: samples 0 and 2 share, 1 does not
    assert shared.tolist() == share
    with torch.no_grad():
        got = attn(hidden, p2p_shared=shared)
        want = explicit_attention(attn, hidden, hidden, share)
        stock = explicit_attention(attn, hidden, hidden, [False] * 6)
    assert ((got - want).norm() / want.norm()).item() < 1e-5
    c_rows_shared = [1, 3, 9, 11]
    assert not torch.allclose(got[c_rows_shared], stock[c_rows_shared], atol=1e-4)  # sharing changed c rows
    unchanged = [0, 2, 4, 5, 6, 7, 8, 10]  # o rows and the rows of the non-sharing sample
    torch.testing.assert_close(got[unchanged], stock[unchanged], rtol=1e-5, atol=1e-6)


def test_cross_attention_layers_run_stock():
    torch.manual_seed(1)
    attn = Attention(query_dim=32, cross_attention_dim=24, heads=4, dim_head=8).eval()
    attn.set_processor(p2p.P2PAttnProcessor())
    hidden, context = torch.randn(4, 16, 32), torch.randn(4, 7, 24)
    with torch.no_grad():
        got = attn(hidden, encoder_hidden_states=context, p2p_shared=torch.tensor([True, True]))
        stock = explicit_attention(attn, hidden, context, [False, False])
    torch.testing.assert_close(got, stock, rtol=1e-5, atol=1e-6)


def test_schedule_shares_while_step_below_fraction_times_steps():
    shared = p2p.schedule(fractions=[0.1, 0.25, 0.5, 0.9], steps=4, device=torch.device("cpu"))
    assert [sum(mask.tolist()[::2]) for mask in shared] == [4, 2, 1, 1]  # i < p*T: 0.4, 1.0, 2.0, 3.6
    assert shared[1].tolist() == [False, False, False, False, True, True, True, True]
    assert shared[3].tolist() == [False] * 6 + [True] * 2  # only the 0.9 sample shares
    assert shared[0].data_ptr() <= shared[3].data_ptr()  # views of one table: one host->device copy per batch
    assert shared[0].untyped_storage().data_ptr() == shared[3].untyped_storage().data_ptr()
    assert p2p.schedule(fractions=[0.1, 0.25], steps=4, device=torch.device("cpu"))[2] is None  # stock UNet


def test_fused_projections_share_exactly_like_separate_ones():
    """`fuse_qkv_projections` (one q·k·v GEMM) changes no shared row: sharing copies q_o, k_o after projection."""
    torch.manual_seed(2)
    attn = Attention(query_dim=32, heads=4, dim_head=8).eval()
    attn.set_processor(p2p.P2PAttnProcessor())
    hidden, shared = torch.randn(8, 16, 32), torch.tensor([True, False, True, True])
    with torch.no_grad():
        separate = attn(hidden, p2p_shared=shared)
        attn.fuse_projections()
        fused = attn(hidden, p2p_shared=shared)
    assert attn.fused_projections
    torch.testing.assert_close(fused, separate, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused, explicit_attention(attn, hidden, hidden, shared.tolist()), rtol=1e-4, atol=1e-5)


def test_the_processor_projects_with_the_fused_gemms(diffusion):
    """In every attention layer of the loader's UNet, each call projects through its fused weights (`to_qkv` in
    self-attention, `to_q` and `to_kv` in cross-attention); the separate projections they replaced never run."""
    layers = [m for m in diffusion.unet.modules() if isinstance(m, Attention)]
    calls: collections.Counter = collections.Counter()
    handles = [getattr(layer, name).register_forward_hook(
        lambda module, args, output, key=(layer.is_cross_attention, name): calls.update([key]))
        for layer in layers for name in ("to_q", "to_k", "to_v", "to_qkv", "to_kv") if hasattr(layer, name)]
    try:
        prompts = diffusion.encode("a dog on a couch", "a cat on a couch")
        render(diffusion, prompts, [Sample(5, 0.5, 9.0)], 2, TINY_IMAGE_SIZE)
    finally:
        for handle in handles:
            handle.remove()
    cross = sum(layer.is_cross_attention for layer in layers)
    assert 0 < cross < len(layers)
    assert calls == {(False, "to_qkv"): 2 * (len(layers) - cross), (True, "to_q"): 2 * cross,
                     (True, "to_kv"): 2 * cross}  # one UNet call per step


def test_real_unet_shares_per_sample_only_during_first_fraction(diffusion):
    """Every attn1 call of the tiny UNet: c rows equal SDPA(q_o, k_o, v_c) iff step < p·T for their sample."""
    samples = [Sample(11, 0.25, 8.0), Sample(12, 0.6, 12.0)]  # 4 steps: shares at steps {0} and {0, 1, 2}
    step, checked = {"i": -1}, {"shared": 0, "stock": 0}

    def count_steps(module, args):
        step["i"] += 1

    def check(module, args, kwargs, output):
        hidden = args[0] if args else kwargs["hidden_states"]
        share = [step["i"] < p * 4 for s in samples for p in [s.p2p_fraction] * 2]
        want = explicit_attention(module, hidden, hidden, share)
        torch.testing.assert_close(output, want, rtol=1e-4, atol=1e-4)
        checked["shared" if any(share) else "stock"] += 1

    attn1 = [m for name, m in diffusion.unet.named_modules() if name.endswith("attn1")]
    handles = [diffusion.unet.register_forward_pre_hook(count_steps)]
    handles += [m.register_forward_hook(check, with_kwargs=True) for m in attn1]
    try:
        prompts = diffusion.encode("a dog on a couch", "a cat on a couch")
        render(diffusion, prompts, samples, steps=4, size=TINY_IMAGE_SIZE)
    finally:
        for handle in handles:
            handle.remove()
    assert step["i"] == 3
    assert checked == {"shared": 3 * len(attn1), "stock": len(attn1)}


def test_sharing_changes_only_the_counterfactual_image(diffusion):
    prompts = diffusion.encode("a dog on a couch", "a cat on a couch")
    never = render(diffusion, prompts, [Sample(5, 0.0, 9.0)], 3, TINY_IMAGE_SIZE)
    always = render(diffusion, prompts, [Sample(5, 1.0, 9.0)], 3, TINY_IMAGE_SIZE)
    assert np.array_equal(never.images[0, 0], always.images[0, 0])
    assert not np.array_equal(never.images[0, 1], always.images[0, 1])


def test_p2p_tokens_shares_the_shared_tokens_cross_attention_maps_while_a_pair_shares(tiny_specs, diffusion):
    """Under `generate.p2p_tokens` SD v1's prompts carry `p2p.tokens` of C_o's and C_c's ids and every row pair gets
    them: I_c moves away from self-attention sharing alone, I_o never does, and a sample that never shares renders
    as stock."""
    tokens = load_diffusion(tiny_specs[0], None, False, "off", True)  # share_tokens
    caption, counterfactual = "a dog on a red couch", "a cat on a couch"
    prompts, stock = tokens.encode(caption, counterfactual), diffusion.encode(caption, counterfactual)
    ids = tokens.tokenizer([caption, counterfactual], padding="max_length", max_length=77)["input_ids"]
    assert stock.columns is None and prompts.columns.tolist() == p2p.tokens(*ids, prompts.token_counts)
    assert tokens.condition(prompts, 2, TINY_IMAGE_SIZE).columns.tolist() == [list(range(77)),
                                                                               prompts.columns.tolist()] * 2
    for fraction, moves in ((1.0, True), (0.0, False)):
        a, b = (render(model, p, [Sample(5, fraction, 9.0)], 3, TINY_IMAGE_SIZE).images[0]
                for model, p in ((tokens, prompts), (diffusion, stock)))
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) != moves


def test_the_loader_fuses_every_attention_layers_projections(diffusion):
    """One GEMM per fused projection (q·k·v in self-attention, k·v in cross-attention) in every attention layer the
    image stage renders with, each with the P2P processor."""
    layers = [m for m in diffusion.unet.modules() if isinstance(m, Attention)]
    assert layers and all(m.fused_projections and isinstance(m.processor, p2p.P2PAttnProcessor) for m in layers)
    assert all(hasattr(m, "to_qkv" if m.is_cross_attention is False else "to_kv") for m in layers)
