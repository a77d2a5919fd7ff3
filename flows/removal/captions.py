"""The removal_captions stage: edited captions and the ODmAP gallery."""

from __future__ import annotations

from prefect import flow

from flows.removal import finish
from tasks.core.io import check_source, read_frame, write_outputs
from tasks.core.schemas import REMOVAL_MASKS
from tasks.removal import captions, mentions
from tasks.stages import Params
from tasks.text.ingest import read_captions


@flow(name="removal-captions")
def removal_captions_flow(params: Params) -> dict:
    """Each removal's edited caption(s); the gallery of every caption with the classes it mentions (its rejects:
    the caption records ingest refused)."""
    paths, section = params.paths, params.removal_captions
    words = mentions.load_class_words(paths.class_words or mentions.CLASS_WORDS)
    check_source(paths.removal_captions_source)
    source, bad = read_captions(paths.removal_captions_source)
    removals = read_frame(paths.removal_masks, REMOVAL_MASKS, "removal_masks")
    kept, rejects = captions.run(removals, source, words, section)
    write_outputs(mentions.gallery(source, section.grammar, words), bad, paths.removal_gallery)
    return finish("removal_captions", removals.height, kept, rejects, paths.removal_captions, params,
                   captions=source.height, caption_rejects=bad.height)
