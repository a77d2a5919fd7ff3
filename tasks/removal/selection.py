"""The CLIP check of each edit, and the pairs' split.

`clip_drop` = min over the removed classes of cos(E_T(prompt), E_I(I_0)) − cos(E_T(prompt), E_I(I_1)), the prompt
being `params.prompt` for the class: an edit is kept when every removed class scores lower on I_1 by more than
`min_drop` (reason `removed_class_still_shown` otherwise) and the edited caption matches I_1 with
cos ≥ `min_text_image` (reason `caption_mismatch`). Each kept row gets a split drawn from its image id and the seed
alone, so all pairs of one image share a split and adding images never moves another's.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tasks.core import schemas
from tasks.core.images import read_rgb, stored_files
from tasks.core.keys import digest
from tasks.image.scoring import ClipScorer, load_clip
from tasks.removal.params import RemovalSelectionParams

SCHEMA, REJECTS_SCHEMA = schemas.REMOVAL_PAIRS, schemas.REMOVAL_PAIRS_REJECTS
CLIP_BATCH = 32


def split_of(image_id: str, params: RemovalSelectionParams) -> str:
    u = int(digest(str(params.seed), image_id)[:16], 16) / 16**16
    return "test" if u < params.test_share else "validation" if u < params.test_share + params.validation_share \
        else "train"


def load_models(params: RemovalSelectionParams) -> ClipScorer:
    return load_clip(params.clip)


def run(edits: pl.DataFrame, images_dir: Path, params: RemovalSelectionParams,
        clip: ClipScorer) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(pairs, rejects) of an `inpainted` frame whose image names are stored names inside `images_dir` (all checked,
    `stored_files`, before any is read)."""
    if edits.is_empty():
        return pl.DataFrame(schema=SCHEMA), pl.DataFrame(schema=REJECTS_SCHEMA)
    files = [stored_files(images_dir, edits[column]) for column in ("image_0", "image_1")]
    image_0, image_1 = (clip.embed_images([read_rgb(f) for f in column], CLIP_BATCH) for column in files)
    classes = sorted({c for removed in edits["removed"] for c in removed})
    prompt = dict(zip(classes, clip.embed_texts([params.prompt.format(name=c) for c in classes], CLIP_BATCH)))
    captions = clip.embed_texts(edits["edited_caption"].to_list(), CLIP_BATCH)
    drops = [min(float(prompt[c] @ i0 - prompt[c] @ i1) for c in removed)
             for removed, i0, i1 in zip(edits["removed"], image_0, image_1)]
    scored = edits.with_columns(clip_drop=pl.Series(drops, dtype=pl.Float64),
                                sim_text_image_1=pl.Series((captions * image_1).sum(-1).tolist(), dtype=pl.Float64),
                                split=pl.Series([split_of(i, params) for i in edits["image_id"]], dtype=pl.String))
    reason = (pl.when(pl.col("clip_drop") <= params.min_drop).then(pl.lit("removed_class_still_shown"))
              .when(pl.col("sim_text_image_1") < params.min_text_image).then(pl.lit("caption_mismatch")))
    scored = scored.with_columns(reason=reason)
    kept = scored.filter(pl.col("reason").is_null()).select(list(SCHEMA))
    rejects = scored.filter(pl.col("reason").is_not_null()).with_columns(stage=pl.lit("removal_selection"))
    return kept, rejects.select(list(REJECTS_SCHEMA))
