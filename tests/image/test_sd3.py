"""SD3 with joint-attention sharing on a tiny random SD3 folder (saved by `StableDiffusion3Pipeline`, no T5; CPU fp32,
32x32, 3 steps): it conditions and samples as the pipeline does, its flow-matching step is the scheduler's, and
sharing (in the blocks `generate.p2p_layers` lists) changes I_c only. Its pair through generate -> selection is
`test_backends.test_a_pair_of_each_backend_goes_through_generate_and_selection`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline
from diffusers.models.attention_processor import Attention, JointAttnProcessor2_0

from tasks.image import joint_p2p, render
from tasks.image.params import GenerateParams
from tasks.image.sampling import Sample, flow_steps
from tests.image.fixtures import make_params

pytest_plugins = ["tests.image.fixtures"]
SAMPLES = [Sample(101, 1.0, 7.5), Sample(202, 1.0, 12.0), Sample(303, 1.0, 10.0)]
CAPTION, COUNTERFACTUAL = "a dog sitting on a couch", "a cat sitting on a couch"


@pytest.fixture(scope="module")
def sd3(tiny_sd3) -> render.ImageModels:
    return render.load_models(make_params(tiny_sd3, backend="sd3"))


def test_it_conditions_and_samples_as_the_pipeline_does(tiny_sd3, sd3):
    """CLIP-L's and CLIP-G's penultimate states, zero-padded, then T5's zeros (no text_encoder_3/); both pooled
    projections; "" unconditional: I_o is the pipeline's image for the seed and guidance (its flow-matching steps)."""
    pipe = StableDiffusion3Pipeline.from_pretrained(tiny_sd3[0].id, text_encoder_3=None, tokenizer_3=None,
                                                    image_encoder=None, feature_extractor=None)
    diffusion = sd3.diffusion
    assert diffusion.t5 is None and diffusion.scheduler.config.shift == 3.0
    prompts = diffusion.encode(CAPTION, COUNTERFACTUAL)
    embeds, negative, pooled, negative_pooled = pipe.encode_prompt(CAPTION, None, None, device="cpu",
                                                                   do_classifier_free_guidance=True)
    torch.testing.assert_close(prompts.states[:2], torch.cat([negative, embeds]))  # batches of 3 vs 1: rounding
    torch.testing.assert_close(prompts.pooled[:2], torch.cat([negative_pooled, pooled]))
    assert prompts.states.shape == (3, 77 + 256, 32) and not prompts.states[:, 77:].any() and negative.any()
    want = pipe(CAPTION, height=32, width=32, num_inference_steps=3, guidance_scale=7.5, output_type="np",
                generator=torch.Generator().manual_seed(101)).images[0]
    got = render.render(diffusion, prompts, [Sample(101, 0.0, 7.5)], 3, 32).images[0, 0]
    assert np.abs(got.astype(int) - np.round(want * 255).astype(int)).max() <= 1  # batch of 4 rows vs 2: rounding


def test_the_flow_step_is_the_schedulers_bit_for_bit():
    """`FlowStep` after `set_timesteps` (SD3's shift 3) equals `FlowMatchEulerDiscreteScheduler.step`, exactly."""
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    scheduler.set_timesteps(5)
    steps = flow_steps(scheduler)
    assert len(steps) == 5 and steps[0].sigma == 1.0 and steps[-1].sigma_to == 0.0
    assert steps[2].sigma > 0.5  # shift 3 keeps mid-run σ high (unshifted: 0.6 at step 2 of 5)
    generator = torch.Generator().manual_seed(0)
    ours = theirs = torch.randn(2, 16, 4, 4, generator=generator)
    for t, step in zip(scheduler.timesteps, steps):
        velocity = torch.randn(ours.shape, generator=generator)
        assert step.scale_input(ours) is ours
        ours, theirs = step(velocity, ours), scheduler.step(velocity, t, theirs, return_dict=False)[0]
        assert torch.equal(ours, theirs)
    with pytest.raises(ValueError, match="stochastically"):
        flow_steps(FlowMatchEulerDiscreteScheduler(stochastic_sampling=True))


def joint_attention() -> Attention:
    """An MM-DiT block's joint attention, as `JointTransformerBlock` builds it (q/k RMS norms)."""
    torch.manual_seed(3)
    return Attention(query_dim=32, cross_attention_dim=None, added_kv_proj_dim=32, dim_head=8, heads=4, out_dim=32,
                     context_pre_only=False, bias=True, processor=JointAttnProcessor2_0(), qk_norm="rms_norm",
                     eps=1e-6).eval()


def test_a_sharing_pair_takes_its_o_rows_image_tokens_and_keeps_its_text_tokens():
    """Stock outputs for o rows and pairs not sharing; a sharing c row's (image and text) outputs are what stock
    attention gives it with its image tokens' inputs replaced by the o row's; `share` False is stock."""
    attn = joint_attention()
    image, text = torch.randn(4, 6, 32), torch.randn(4, 5, 32)
    with torch.no_grad():
        stock = attn(image, encoder_hidden_states=text)
        injected = attn(torch.cat([image[:3], image[2:3]]), encoder_hidden_states=text)
        attn.set_processor(joint_p2p.JointP2PProcessor(share=False))
        off = attn(image, encoder_hidden_states=text, p2p_shared=torch.tensor([True, True]))
        attn.set_processor(joint_p2p.JointP2PProcessor(share=True))
        shared = attn(image, encoder_hidden_states=text, p2p_shared=torch.tensor([False, True]))
    for ours, theirs, want in zip(shared, stock, injected):
        torch.testing.assert_close(ours[:3], theirs[:3], rtol=1e-5, atol=1e-6)  # o rows, the pair not sharing
        torch.testing.assert_close(ours[3], want[3], rtol=1e-5, atol=1e-6)
        assert not torch.allclose(ours[3], theirs[3], atol=1e-4)
    for ours, theirs in zip(off, stock):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_sharing_changes_only_the_counterfactual_image_in_the_listed_blocks(tiny_sd3, sd3):
    prompts = sd3.diffusion.encode(CAPTION, COUNTERFACTUAL)
    stock = render.render(sd3.diffusion, prompts, [dataclasses.replace(s, p2p_fraction=0.0) for s in SAMPLES], 3, 32)
    every = render.render(sd3.diffusion, prompts, SAMPLES, 3, 32)
    last = render.load_models(make_params(tiny_sd3, backend="sd3", p2p_layers=(1,))).diffusion
    one = render.render(last, last.encode(CAPTION, COUNTERFACTUAL), SAMPLES, 3, 32)
    for shared in (every, one):
        assert np.array_equal(stock.images[:, 0], shared.images[:, 0])
        assert all(not np.array_equal(stock.images[i, 1], shared.images[i, 1]) for i in range(len(SAMPLES)))
    assert all(not np.array_equal(every.images[i, 1], one.images[i, 1]) for i in range(len(SAMPLES)))


def test_the_shared_blocks_are_the_transformers_and_sd3s_only(tiny_sd3, sd3):
    with pytest.raises(ValueError, match="names blocks the transformer lacks"):
        joint_p2p.install(sd3.diffusion.transformer, (0, 2))
    with pytest.raises(ValueError, match="p2p_layers is sd3's"):
        GenerateParams(backend="sdxl", p2p_layers=(0,))
    joint_p2p.install(sd3.diffusion.transformer, (1,))
    try:
        flags = {name: processor.share for name, processor in sd3.diffusion.transformer.attn_processors.items()}
        assert flags == {"transformer_blocks.0.attn.processor": False, "transformer_blocks.0.attn2.processor": False,
                         "transformer_blocks.1.attn.processor": True}
    finally:
        joint_p2p.install(sd3.diffusion.transformer, None)
