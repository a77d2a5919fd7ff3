"""ITM scorers against each model's own forward pass: `scorer.pairs` (and a bi-encoder's score matrix) equal the
score computed here straight from the model, loaded afresh with its class and processor, on hand-made captions and
images, for each family of the fixtures: open_clip (`clip`), Hugging Face CLIP (`hf_clip`), ViLT and BridgeTower.

The expectations follow the models' documentation, never scorers.py: CLIP's `logits_per_text` (= logit_scale.exp() x
the cosine of `text_embeds` and `image_embeds`); open_clip's `encode_text` / `encode_image`, L2-normalised here, times
`logit_scale.exp()`; ViLT's retrieval head `logits[:, 0]` (its only column); BridgeTower's `logits[:, 1]` (the
"match" class, as in its docstring example). The pixels and token ids the scorer feeds the model are recorded and
must be the processor's, whose image size and normalisation are checked by hand on images already at model size.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch
import transformers
from PIL import Image

from tasks.evaluation.scorers import BiEncoder, Images, load_scorer
from tests.evaluation.fixtures import CAPTIONS

pytest_plugins = ["tests.evaluation.fixtures"]

OPENAI_MEAN, OPENAI_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
# family -> (transformers class, documented matching-logit column or None for a bi-encoder, pixel mean, pixel std,
# the processor's output side when it differs from the fixtures' 32-pixel model size)
HF = {"hf_clip": (transformers.CLIPModel, None, OPENAI_MEAN, OPENAI_STD, None),
      "vilt": (transformers.ViltForImageAndTextRetrieval, 0, (0.5,) * 3, (0.5,) * 3, None),
      "bridgetower": (transformers.BridgeTowerForImageAndTextRetrieval, 1, OPENAI_MEAN, OPENAI_STD, 288)}
TEXTS = [CAPTIONS[0], CAPTIONS[3], CAPTIONS[5]]
# float32 round-off only (the scorer batches and pads differently from the reference): 1e-5 of the largest score
TOLERANCE = 1e-5
AT_MODEL_SIZE = 3  # the first three images are 32 x 32 (model size); the last one is resized and cropped


def hand_made_images() -> dict[str, np.ndarray]:
    """Deterministic HxWx3 uint8 images: noise, a colour ramp, a flat colour, and a non-square one (40 x 24)."""
    rng = np.random.default_rng(11)
    y, x = np.mgrid[0:32, 0:32]
    ramp = np.stack([8 * x, 8 * y, 255 - 4 * (x + y)], axis=-1).astype(np.uint8)
    return {"noise": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8), "ramp": ramp,
            "flat": np.broadcast_to(np.array([200, 30, 90], np.uint8), (32, 32, 3)).copy(),
            "tall": rng.integers(0, 256, (40, 24, 3), dtype=np.uint8)}


PIXELS = hand_made_images()
KEYS = tuple(PIXELS)
# every (caption, image) combination, caption-major: each caption meets each image
PAIR_TEXT = [t for t in TEXTS for _ in KEYS]
PAIR_KEY = [k for _ in TEXTS for k in KEYS]


def by_hand(images: list[np.ndarray], mean, std) -> torch.Tensor:
    """(N, 3, H, W) float pixels as the model cards define them: x / 255, minus the mean, over the std, per channel."""
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).double() / 255
    return ((x - torch.tensor(mean, dtype=torch.double)[:, None, None])
            / torch.tensor(std, dtype=torch.double)[:, None, None]).float()


def on_cpu(spec):
    """The spec pinned to the CPU, where the reference runs: same device, same kernels (no TF32 convolutions)."""
    return spec.model_copy(update={"device": "cpu"})


def assert_scores(actual, expected, what: str) -> None:
    expected = np.asarray(expected, dtype=np.float64)
    tolerance = TOLERANCE * np.abs(expected).max()
    assert np.ptp(expected) > 100 * tolerance, f"{what}: the hand-made inputs do not tell the pairs apart"
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=0, atol=tolerance,
                               err_msg=f"{what}: the scorer differs from the model's own forward output")


@contextmanager
def recording(monkeypatch, cls: type, names: tuple[str, ...]):
    """Record the keyword inputs of every call the scorer makes to `cls.<name>` (the instance it loaded)."""
    calls: dict[str, list[dict]] = {name: [] for name in names}
    with monkeypatch.context() as patch:
        for name in names:
            def spy(self, *args, _name=name, _original=getattr(cls, name), **kwargs):
                calls[_name].append({k: v.detach().cpu() for k, v in kwargs.items() if torch.is_tensor(v)})
                return _original(self, *args, **kwargs)
            patch.setattr(cls, name, spy)
        yield calls


def assert_same_inputs(recorded: dict, expected, what: str) -> None:
    """The tensors the scorer passed (input ids, masks, pixels) are the processor's, exactly."""
    assert {"input_ids", "pixel_values"} & recorded.keys() & expected.keys(), f"{what}: no model inputs recorded"
    for name, value in recorded.items():
        if name in expected:
            torch.testing.assert_close(value, expected[name].cpu(), rtol=0, atol=0,
                                       msg=lambda m: f"{what}: the scorer fed {name} unlike the processor. {m}")


@pytest.mark.parametrize("family", list(HF))
def test_processor_resizes_and_normalises_as_documented(eval_specs, family):
    """What the expectations below feed the model: the processor's pixels, checked by hand (model size, mean/std)."""
    cls, _, mean, std, side = HF[family]
    processor = transformers.AutoProcessor.from_pretrained(eval_specs[family].id)
    at_model_size = list(PIXELS.values())[:AT_MODEL_SIZE]
    pixels = processor(images=at_model_size, return_tensors="pt")["pixel_values"]
    if side is None:  # nothing to resize or crop: the values are the normalised pixels
        torch.testing.assert_close(pixels, by_hand(at_model_size, mean, std), rtol=0, atol=1e-5)
    else:  # resized to `side` (BridgeTower: 288, its vision tower's size): a flat image stays flat, normalised
        vision = cls.config_class.from_pretrained(eval_specs[family].id).vision_config
        assert pixels.shape[-2:] == (side, side) == (vision.image_size, vision.image_size)
        flat = by_hand([PIXELS["flat"]], mean, std)[0, :, :1, :1]
        torch.testing.assert_close(pixels[KEYS.index("flat")], flat.expand(3, side, side), rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["hf_clip", "vilt", "bridgetower"])
def test_hugging_face_scorer_equals_the_model_forward(eval_specs, family, monkeypatch):
    spec = eval_specs[family]
    cls, column, *_ = HF[family]
    assert (spec.model_class, spec.index) == (cls.__name__, column), f"{family}: {spec} is not the documented head"
    processor = transformers.AutoProcessor.from_pretrained(spec.id)
    model = cls.from_pretrained(spec.id).eval()
    images = Images(KEYS, PIXELS.__getitem__)
    scorer = load_scorer(on_cpu(spec), batch_size=5)  # the reference: one forward over everything
    with torch.inference_mode():
        if column is None:  # bi-encoder: every caption against every image in one forward
            inputs = processor(text=TEXTS, images=list(PIXELS.values()), return_tensors="pt", padding=True,
                               truncation=True)
            out = model(**inputs)
            cosine = (out.text_embeds / out.text_embeds.norm(dim=-1, keepdim=True)) @ \
                     (out.image_embeds / out.image_embeds.norm(dim=-1, keepdim=True)).T
            torch.testing.assert_close(out.logits_per_text, model.logit_scale.exp() * cosine)  # the documented score
            matrix = out.logits_per_text.numpy()  # captions x images
            with recording(monkeypatch, cls, ("get_text_features", "get_image_features")) as calls:
                embedded = scorer.embed(PAIR_TEXT, images)
            lengths = [len(ids) for ids in processor.tokenizer(TEXTS, truncation=True)["input_ids"]]
            # a batch per token count, unpadded, a multiple of 4 rows (its last text repeated); 4 images: one batch
            assert len(calls["get_text_features"]) == len(set(lengths)) and len(calls["get_image_features"]) == 1
            for call in calls["get_text_features"]:
                same = [t for t, n in zip(TEXTS, lengths) if n == call["input_ids"].shape[1]]
                rows = processor(text=same + same[-1:] * (-len(same) % 4), return_tensors="pt", truncation=True)
                assert_same_inputs(call, rows, family)
            assert_same_inputs(calls["get_image_features"][0], inputs, family)
            assert_scores(embedded.rows(TEXTS, KEYS, True)(np.arange(len(TEXTS))), matrix, f"{family} caption rows")
            assert_scores(embedded.rows(TEXTS, KEYS, False)(np.arange(len(KEYS))), matrix.T, f"{family} image rows")
            actual = embedded.pairs(PAIR_TEXT, images.take(KEYS.index(k) for k in PAIR_KEY))
            expected = [matrix[TEXTS.index(t), KEYS.index(k)] for t, k in zip(PAIR_TEXT, PAIR_KEY)]
        else:  # cross-encoder: one forward over every (caption, image) pair at once. ViLT draws a random order of
            # its image patches (after adding their position embeddings): unseeded here, it moves nothing measurable.
            # The fixture's ViLT is text-blind (every word is [UNK]), so its scores tell the images apart only.
            inputs = processor(text=PAIR_TEXT, images=[PIXELS[k] for k in PAIR_KEY], return_tensors="pt",
                               padding=True, truncation=True)
            expected = model(**inputs).logits[:, column].numpy()
            with recording(monkeypatch, cls, ("forward",)) as calls:
                actual = scorer.pairs(PAIR_TEXT, Images(tuple(PAIR_KEY), PIXELS.__getitem__))
            assert len(calls["forward"]) == len(PAIR_TEXT)  # each pair alone, in image-key order
            by_image = sorted(range(len(PAIR_KEY)), key=PAIR_KEY.__getitem__)
            for i, call in zip(by_image, calls["forward"]):
                assert_same_inputs(call, processor(text=[PAIR_TEXT[i]], images=[PIXELS[PAIR_KEY[i]]],
                                                   return_tensors="pt", truncation=True), family)
    assert_scores(actual, expected, f"{family} pairs")


def test_open_clip_scorer_equals_encode_and_logit_scale(eval_specs):
    import open_clip

    spec = eval_specs["clip"]
    open_clip.add_model_config(spec.config)
    model, _, preprocess = open_clip.create_model_and_transforms(spec.id, pretrained=spec.pretrained)
    model.eval()
    pixels = torch.stack([preprocess(Image.fromarray(x)) for x in PIXELS.values()])
    # the model's own transform is the documented one: at model size, just the normalised pixels
    torch.testing.assert_close(pixels[:AT_MODEL_SIZE], by_hand(list(PIXELS.values())[:AT_MODEL_SIZE],
                                                               open_clip.OPENAI_DATASET_MEAN,
                                                               open_clip.OPENAI_DATASET_STD), rtol=0, atol=1e-5)
    with torch.inference_mode():
        text = model.encode_text(open_clip.get_tokenizer(spec.id)(TEXTS))
        image = model.encode_image(pixels)
        matrix = (model.logit_scale.exp() * (text / text.norm(dim=-1, keepdim=True))
                  @ (image / image.norm(dim=-1, keepdim=True)).T).numpy()
    scorer = load_scorer(on_cpu(spec), batch_size=3)
    assert isinstance(scorer, BiEncoder)
    images = Images(KEYS, PIXELS.__getitem__)
    embedded = scorer.embed(PAIR_TEXT, images)
    assert_scores(embedded.rows(TEXTS, KEYS, True)(np.arange(len(TEXTS))), matrix, "clip caption rows")
    assert_scores(embedded.rows(TEXTS, KEYS, False)(np.arange(len(KEYS))), matrix.T, "clip image rows")
    assert_scores(embedded.pairs(PAIR_TEXT, images.take(KEYS.index(k) for k in PAIR_KEY)),
                  [matrix[TEXTS.index(t), KEYS.index(k)] for t, k in zip(PAIR_TEXT, PAIR_KEY)], "clip pairs")



def test_a_seeded_pass_is_not_reseeded_by_another_models_pass_in_another_thread(eval_specs):
    """The evaluate flow runs its models in threads, and ViLT draws its patch order from the process's generator,
    seeded per pass. Forced here with hooks on the real models: a Hugging Face CLIP pass (which also seeds) starts
    first, ViLT's starts, CLIP's ends and restores the generator it found; ViLT's draw must still be seeded (a
    resumed `dvc repro` once differed from the uninterrupted one in evaluation.parquet this way)."""
    import threading

    from tasks.evaluation.scorers import _load_hf
    vilt, clip = (load_scorer(eval_specs[name], 8) for name in ("vilt", "hf_clip"))
    embeddings = _load_hf(eval_specs["vilt"])[1].vilt.embeddings
    drawn = []  # ViLT's embedded tokens per pass: their order is the draw
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(6)]
    clip_inside, vilt_inside, clip_done = threading.Event(), threading.Event(), threading.Event()

    def signal_then_wait(inside: threading.Event, then: threading.Event):
        def hook(*_) -> None:  # a pre-hook that returns None leaves the inputs as they are
            inside.set()
            then.wait(timeout=2)
        return hook

    def clip_pass() -> None:
        clip.embed_texts(CAPTIONS, 8)
        clip_done.set()

    hooks = [embeddings.register_forward_hook(lambda _, __, out: drawn.append(out[0].clone()))]
    try:
        alone = vilt.score(CAPTIONS, images).numpy()
        hooks += [_load_hf(eval_specs["hf_clip"])[1].text_model.register_forward_pre_hook(
                      signal_then_wait(clip_inside, vilt_inside)),  # waits for ViLT's pass to start
                  embeddings.patch_embeddings.register_forward_pre_hook(
                      signal_then_wait(vilt_inside, clip_done))]  # before ViLT's draw: waits for CLIP's pass to end
        torch.manual_seed(1234)  # a generator state unlike the seeded one
        other = threading.Thread(target=clip_pass)
        other.start()
        clip_inside.wait(timeout=10)
        during = vilt.score(CAPTIONS, images).numpy()
        other.join()
    finally:
        for hook in hooks:
            hook.remove()
    assert torch.equal(drawn[0], drawn[1]) and np.array_equal(during, alone)
