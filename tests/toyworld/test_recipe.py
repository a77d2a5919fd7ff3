"""Issue 63's recipe parts: the parse targets label each token with its phrase or the scene, the grounding loss is zero for
maps inside their masks and positive for swapped ones, the recording processor attends as diffusers' own, a
parse-trained encoder stays frozen while the UNet trains, and the sampler's spacing reaches the assembled folder."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
import torch
from diffusers.models.attention_processor import AttnProcessor2_0
from safetensors.torch import load_file

from tasks.toyworld import grounding, models, parse, world
from tasks.toyworld.assemble import assemble
from tasks.toyworld.loop import Run
from tasks.toyworld.params import Schedule
from tasks.toyworld.train import train

CAPTION = "Two small red triangles above a blue square."
RECIPE = Schedule(vae_steps=2, diffusion_steps=4, clip_steps=2, lm_steps=3, batch=2, parse_steps=4, grounding=0.5,
                  low_snr=0.5, min_snr_gamma=5.0, attention_heads=2, spacing="trailing")
ONLY_DIFFUSION = Run(device="cpu", checkpoint_every=0, eval_scenes=0, only=("diffusion",))


def test_every_bpe_piece_of_a_phrase_is_the_phrases():
    phrases = parse.token_phrases(CAPTION)
    # BOS, two small red tri angles | above | a blue square | . EOS...
    assert phrases[:11] == (-1, 0, 0, 0, 0, 0, -1, 1, 1, 1, -1)
    assert set(phrases[11:]) == {-1}


def test_a_phrase_token_is_asked_its_phrase_and_a_later_token_the_scene():
    labels = parse.targets(world.parse(CAPTION))
    asked = {fact: labels[:, i] != parse.IGNORE for i, fact in enumerate(parse.FACTS)}
    phrase_tokens = torch.tensor(parse.token_phrases(CAPTION)) >= 0
    scene_tokens = ~phrase_tokens & (torch.arange(77) > 0)  # the BOS is never asked
    for fact in parse.FACTS:
        expected = (phrase_tokens & (fact in parse.PHRASE_FACTS)) | (scene_tokens & (fact in parse.SCENE_FACTS))
        assert torch.equal(asked[fact], expected), fact
    column = list(parse.FACTS).index
    assert labels[3, column("shape")] == parse.FACTS["shape"].index("triangle")  # "red": its phrase's noun
    assert labels[9, column("size")] == parse.FACTS["size"].index(parse.UNSAID)
    assert labels[8, column("phrase")] == 1 and labels[2, column("count")] == parse.FACTS["count"].index(2)
    assert labels[20, column("shape_1")] == parse.FACTS["shape_1"].index("square")


def _placed(probs_for: dict[int, list[int]], side: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hard phrase masks (phrase 0: the top-left quadrant, phrase 1: the bottom-right) and a (1, side², 77) map in
    which every pixel of phrase p's mask attends to `probs_for[p]`'s tokens evenly, every other pixel to the BOS."""
    phrases = torch.tensor(parse.token_phrases(CAPTION)).unsqueeze(0)
    masks = torch.zeros(1, grounding.PHRASES, 16, 16)
    masks[0, 0, :8, :8], masks[0, 1, 8:, 8:] = 1, 1
    probs = torch.zeros(1, side * side, 77)
    probs[0, :, 0] = 1
    quadrant = torch.nn.functional.adaptive_avg_pool2d(masks, side).flatten(2)[0]
    for p, tokens in probs_for.items():
        inside = quadrant[p] > 0
        probs[0, inside] = 0
        probs[0, inside.nonzero(), tokens] = 1 / len(tokens)
    return probs, phrases, masks


@pytest.mark.parametrize("side", [16, 8, 4])
def test_the_grounding_loss_is_zero_inside_the_masks_and_positive_when_swapped(side):
    own = {0: [1, 2, 3, 4, 5], 1: [7, 8, 9]}
    probs, phrases, masks = _placed(own, side)
    assert float(grounding.loss([probs], phrases, masks)) < 1e-4
    swapped, _, _ = _placed({0: own[1], 1: own[0]}, side)
    assert float(grounding.loss([swapped], phrases, masks)) > 1
    dropped = torch.full_like(phrases, -1)  # a caption dropped for guidance is not supervised
    assert float(grounding.loss([swapped], dropped, masks)) == 0


def test_the_grounding_targets_are_the_phrases_objects():
    rng = random.Random(3)
    spec, scene = next((s, o) for s, o in iter(lambda: world.sample(rng), None) if s.relation)
    phrases, masks = grounding.targets(world.caption(spec), scene, 16)
    assert phrases.tolist() == list(parse.token_phrases(world.caption(spec)))
    count = spec.phrases[0].count
    for p, objects in enumerate((scene[:count], scene[count:])):
        for obj in objects:  # each object's centre pixel lies in its own phrase's mask, not the other's
            x, y = int(obj.x * 16), int(obj.y * 16)
            assert masks[p, y, x] > 0.5 and masks[1 - p, y, x] == 0


def test_the_recorder_attends_as_diffusers_own_and_records_every_cross_attention_map():
    torch.manual_seed(0)
    unet = models.diffusion_modules(2)[0].eval()
    latents, states, steps = torch.randn(2, 4, 16, 16), torch.randn(2, 77, models.TEXT_WIDTH), torch.tensor([5, 900])
    with torch.no_grad():
        unet.set_attn_processor(AttnProcessor2_0())
        stock = unet(latents, steps, encoder_hidden_states=states).sample
        maps = grounding.record(unet)
        recorded = unet(latents, steps, encoder_hidden_states=states).sample
    torch.testing.assert_close(recorded, stock, rtol=1e-4, atol=1e-5)
    assert len(maps) == sum(name.endswith("attn2.processor") for name in unet.attn_processors)
    assert {m.shape[1] for m in maps} == {256, 64, 16} and all(torch.allclose(m.sum(-1), torch.ones(())) for m in maps)


def test_a_parse_trained_encoder_does_not_move_while_the_unet_trains_and_the_spacing_is_assembled(tmp_path):
    """The encoder saved is the parse loop's alone (the same whether the UNet trains 4 or 6 steps), while the UNet
    differs; the assembled sampler has the spacing trained with."""
    states = {}
    for steps in (4, 6):
        record = train(tmp_path / str(steps), replace(RECIPE, diffusion_steps=steps), ONLY_DIFFUSION)
        states[steps] = load_file(tmp_path / str(steps) / "diffusion.safetensors")
        assert 0 <= record["parse_accuracy"] <= 1
    text = [k for k in states[4] if k.startswith("text_encoder.")]
    assert text and all(torch.equal(states[4][k], states[6][k]) for k in text)
    assert not torch.equal(states[4]["unet.conv_in.weight"], states[6]["unet.conv_in.weight"])
    record = json.loads((tmp_path / "4" / "train.json").read_text())
    assert set(record["losses_per_50_steps"]) == {"parse", "diffusion", "grounding"}
    assert Schedule.from_record(record["schedule"]) == RECIPE
    assemble(tmp_path / "4", tmp_path / "assembled")
    config = json.loads((tmp_path / "assembled" / "diffusion" / "scheduler" / "scheduler_config.json").read_text())
    assert config["timestep_spacing"] == "trailing"
