"""The demo profile's tiny models: the same captions and seed give byte-identical folders (so their fingerprints and
every cache key built on them are stable across machines); another seed gives other weights."""

from __future__ import annotations

from tasks.core.fingerprints import content_hash
from tasks.demo import tiny_models
from tasks.demo.params import TinyModelsParams
from tests.conftest import DEMO_CAPTIONS, WORLD_CAPTIONS

FOLDERS = ("vocab", "mlm", "clm", "diffusion", "clip", "hf_clip", "vilt", "vlm")
TOY_WORLD = "pkg:tasks.toyworld/weights"


def test_same_captions_and_seed_build_identical_folders(tmp_path):
    builds = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        tiny_models.build(DEMO_CAPTIONS, tmp_path / name, TinyModelsParams(seed=seed))
        builds[name] = {folder: content_hash(tmp_path / name / folder) for folder in FOLDERS}
    assert builds["a"] == builds["b"]
    assert sorted(f for f in FOLDERS if builds["c"][f] != builds["a"][f]) == [
        "clip", "clm", "diffusion", "hf_clip", "mlm", "vilt", "vlm"]


def test_every_text_model_knows_the_caption_words(tmp_path):
    """No tokenizer of the tiny models falls back to unknown tokens for a demo caption (a silently ignored vocabulary
    argument once left the tiny ViLT with only its special tokens, blind to every word)."""
    from transformers import AutoTokenizer

    tiny_models.build(DEMO_CAPTIONS, tmp_path, TinyModelsParams())
    caption = "a man riding a bicycle down a city street"
    for folder in ("mlm", "clm", "hf_clip", "vilt", "vlm"):
        tokenizer = AutoTokenizer.from_pretrained(tmp_path / folder)
        tokens = tokenizer.tokenize(caption)
        assert tokenizer.unk_token not in tokens and len(set(tokens)) > 5, (folder, tokens)


def test_the_toy_world_weights_assemble_into_identical_folders(tmp_path):
    """With `toy_world` the trained models replace the random ones, byte-identical build after build; the other
    models stay random and follow the seed."""
    builds = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        tiny_models.build(WORLD_CAPTIONS, tmp_path / name, TinyModelsParams(seed=seed, toy_world=TOY_WORLD))
        builds[name] = {folder: content_hash(tmp_path / name / folder) for folder in FOLDERS if folder != "vocab"}
    assert builds["a"] == builds["b"]
    assert sorted(f for f in builds["a"] if builds["c"][f] != builds["a"][f]) == ["hf_clip", "vilt", "vlm"]
