"""CLIP scoring through the real open_clip loader on a tiny registered architecture + local checkpoint."""

from __future__ import annotations

import numpy as np
import open_clip
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from tasks.image.scoring import load_clip, pair_scores

pytest_plugins = ["tests.image.fixtures"]


@pytest.fixture(scope="module")
def scorer(tiny_specs):
    return load_clip(tiny_specs[1])


def test_loader_registers_the_config_and_loads_the_checkpoint(tiny_specs, scorer):
    spec = tiny_specs[1]
    assert open_clip.get_model_config(spec.id)["embed_dim"] == 16
    saved = load_file(spec.pretrained)
    state = scorer.model.state_dict()
    assert saved.keys() == state.keys()
    assert all(torch.equal(saved[k], state[k].cpu()) for k in saved)  # weights from the file, not a fresh init


def test_scores_match_a_direct_computation(scorer):
    rng = np.random.default_rng(0)
    images_o, images_c = rng.integers(0, 256, (2, 3, 32, 32, 3), dtype=np.uint8)
    captions = ["a dog on a couch", "a cat on a couch"]
    texts = scorer.embed_texts(captions, 8)
    emb_o, emb_c = scorer.embed_images([*images_o, *images_c], batch_size=2).split(3)
    got = pair_scores(texts[:1], texts[1:], emb_o, emb_c)

    with torch.no_grad():  # by hand: open_clip's own encoders, explicit normalisation and cosines
        def image_embedding(images):
            pixels = torch.stack([scorer.preprocess(Image.fromarray(x)) for x in images])
            features = scorer.model.encode_image(pixels).numpy()
            return features / np.linalg.norm(features, axis=-1, keepdims=True)
        text = scorer.model.encode_text(open_clip.get_tokenizer("cfgen-tiny-clip")(captions)).numpy()
        t_o, t_c = text / np.linalg.norm(text, axis=-1, keepdims=True)
        i_o, i_c = image_embedding(images_o), image_embedding(images_c)
    d_img, d_txt = i_c - i_o, t_c - t_o
    want = {
        "sim_text_image_o": i_o @ t_o, "sim_text_image_c": i_c @ t_c, "sim_image_image": (i_o * i_c).sum(-1),
        "clip_dir": d_img @ d_txt / (np.linalg.norm(d_img, axis=-1) * np.linalg.norm(d_txt)),
    }
    for name, values in want.items():
        np.testing.assert_allclose(got[name], values, rtol=1e-4, atol=1e-5, err_msg=name)
    assert len(set(np.round(got["clip_dir"], 6))) == 3  # distinct images, distinct scores: the test can tell


def test_identical_images_have_image_similarity_one_and_zero_direction(scorer):
    image = np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    texts = scorer.embed_texts(["a dog", "a cat"], 8)
    emb = scorer.embed_images([image, image], batch_size=1)
    got = pair_scores(texts[:1], texts[1:], emb[:1], emb[1:])
    assert got["sim_image_image"][0] == pytest.approx(1.0, abs=1e-5)
    assert got["clip_dir"] == [0.0]
