"""Edit sites: where each edit type in `types` may change C_o, one row per (caption, type, site).

Output `sites(caption_id, image_id, caption, edit_type, position, start, end, original_word, tag, n_tokens)`. The
span `caption[start:end] == original_word` is all an edit of that site may rewrite; `position` is its anchor token's
index in `word_tokenize(caption)` (the token swapped, the token an insert precedes, the first token deleted), `tag`
that token's Penn Treebank tag and `n_tokens` the caption's token count. Where each type finds its sites is its
`sites` behaviour (`tasks.text.edits.<type>`, looked up by name).
Captions without a site of any type go to the rejects with reason `no_site`; captions of more than `max_tokens`
tokens with reason `too_long`, before any site is sought (one such caption would cost as much as hundreds).
"""

from __future__ import annotations

import polars as pl

from tasks.core import schemas
from tasks.text import edits
from tasks.text.params import SitesParams
from tasks.text.tagging import tag_caption

SCHEMA, REJECTS_SCHEMA = schemas.SITES, schemas.SITES_REJECTS


def run(captions: pl.DataFrame, params: SitesParams, models: None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(sites, rejects) for a `captions(caption_id, image_id, caption)` frame."""
    sites, rejects = [], []
    for row in captions.iter_rows(named=True):
        tokens = tag_caption(row["caption"])
        if len(tokens) > params.max_tokens:
            rejects.append({**row, "reason": "too_long"})
            continue
        found = [{**row, "edit_type": edit_type, "position": i, "start": start, "end": end,
                  "original_word": row["caption"][start:end], "tag": tokens[i].tag, "n_tokens": len(tokens)}
                 for edit_type in params.types for i, start, end in edits.function(edit_type, "sites")(tokens, params)]
        sites.extend(found)
        if not found:
            rejects.append({**row, "reason": "no_site"})
    return pl.DataFrame(sites, schema=SCHEMA), pl.DataFrame(rejects, schema=REJECTS_SCHEMA)


def load_models(params: SitesParams) -> None:
    """Sites needs no model: NLTK data is found through `NLTK_DATA`."""
