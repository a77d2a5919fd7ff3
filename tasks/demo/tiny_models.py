"""The demo profile's tiny random models, built from a caption file's vocabulary (offline, seeded, deterministic)."""

from __future__ import annotations

from pathlib import Path

from tasks.core.params import TinyModelsParams
from tasks.demo import tiny_images, tiny_text
from tasks.text import ingest


def build(source: Path, output: Path, params: TinyModelsParams) -> None:
    """`output/{mlm,clm,vocab}` (text) and `output/{diffusion,clip}` (image) from the captions of `source`."""
    captions, _ = ingest.read_captions(source)
    tiny_text.build(captions["caption"].to_list(), output, params)
    tiny_images.build_tiny_diffusion(output / "diffusion", params.seed)
    tiny_images.build_tiny_clip(output / "clip", params.seed)
