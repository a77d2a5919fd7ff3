"""The demo profile's tiny random models, built from a caption file's vocabulary (offline, seeded, deterministic)."""

from __future__ import annotations

import re
from pathlib import Path

from tasks.core.specs import resolve_path
from tasks.demo import tiny_eval, tiny_inpaint, tiny_vlm
from tasks.demo.params import TinyModelsParams
from tasks.text import ingest
from tasks.tiny import images, text
from tasks.toyworld.assemble import RECORD, assemble

WRITES = re.compile(rf"(mlm|clm|vocab|diffusion|clip|hf_clip|vilt|vlm|inpaint)/.+|{re.escape(RECORD)}")
"""Every file `build` may write, as its path in the output folder: a folder holding another is not one it filled."""


def build(source: Path, output: Path, params: TinyModelsParams) -> None:
    """`output/{mlm,clm}` (text), `output/{diffusion,clip}` (image), `output/{hf_clip,vilt}` (evaluation),
    `output/vlm` (the judge) and `output/inpaint` (object removal) from the captions of `source`: the first four
    trained on the toy world when `params.toy_world` names its weights, else random (with `output/vocab`)."""
    captions = ingest.read_captions(source)[0]["caption"].to_list()
    if params.toy_world is not None:
        assemble(Path(resolve_path(params.toy_world)), output)
    else:
        text.build(captions, output, params)
        images.build_tiny_diffusion(output / "diffusion", params.seed)
        images.build_tiny_clip(output / "clip", params.seed)
    tiny_eval.build_tiny_hf_clip(output / "hf_clip", params.seed)
    tiny_eval.build_tiny_vilt(output / "vilt", captions, params.seed)
    tiny_vlm.build_tiny_vlm(output / "vlm", captions, params.seed)
    tiny_inpaint.build_tiny_inpaint(output / "inpaint", params.seed)
