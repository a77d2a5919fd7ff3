"""Params sections of the demo profile's inputs: the tiny random models and the synthetic COCO set."""

from __future__ import annotations

from pydantic import Field

from tasks.core.fields import Seed
from tasks.core.params import Section


class TinyModelsParams(Section):
    """The demo profile's tiny random text and image models (`tasks.demo.tiny_models`)."""

    seed: Seed = 0
    vocab_size: int = Field(1000, ge=300)
    max_length: int = Field(128, ge=16)
    toy_world: str | None = Field(None, description="trained toy-world weights (`cfgen toy-world train`; a folder "
                                                    "or pkg:module/dir): the diffusion, CLIP and text LMs come from "
                                                    "them; None: random")


class SyntheticCocoParams(Section):
    """The demo's stand-in for COCO: images of coloured shapes with COCO-format instances and captions."""

    seed: Seed = 0
    images: int = Field(24, ge=1)
    size: int = Field(64, ge=16, description="image width in pixels (heights vary, for the aspect handling)")
