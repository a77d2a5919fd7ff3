"""The stage contracts: one typed entry per data stage, read by the CLI, the flows, the cache keys and the tests.

A stage's name is its CLI command, its DVC stage, its `params.yaml` section and its module's name. `logic` names
that module, whose `run` (and `load_models`) the stage executes; its DVC code deps are `code.closure(logic)`, its
cache keys hold `code.identity(*entries)`: what its cached unit executes (default: the logic's `run` and
`load_models`; the image stages: a sample's render and measurement). `input`
is what the stage reads from the output of `after`; `data` is the `paths` entry it writes (a data name, which may
differ from the stage's: perplexity writes `counterfactual_captions`). Which params change its output is declared on
the params model (`unkeyed` fields never enter a cache key). Importing this module imports no model library.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.core import schemas
from tasks.core.schemas import Schema


@dataclass(frozen=True)
class Stage:
    name: str
    logic: str
    data: str
    output: Schema
    rejects: Schema
    input: Schema | None = None
    after: str | None = None
    description: str = ""
    code: tuple[str, ...] = ()

    @property
    def entries(self) -> tuple[str, ...]:
        """`"module:name"` entry points of the code the stage's cached unit executes."""
        return self.code or (f"{self.logic}:run", f"{self.logic}:load_models")

    def section(self, params):
        """This stage's typed params section of a whole `Params`."""
        return getattr(params, self.name)


SAMPLE_CODE = tuple(f"tasks.image.render:{name}" for name in ("load_models", "canonical", "Batcher"))
STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("ingest", "tasks.text.ingest", "captions", schemas.CAPTIONS, schemas.CAPTIONS_REJECTS,
          description="COCO caption JSON or `caption_id<TAB>caption` TSV -> captions"),
    Stage("sites", "tasks.text.sites", "sites", schemas.SITES, schemas.SITES_REJECTS, schemas.CAPTIONS, "ingest",
          "where each edit type may change C_o (the paper: every NN/NNS token)"),
    Stage("saliency", "tasks.text.saliency", "salient_sites", schemas.SITES, schemas.SITES_REJECTS, schemas.SITES,
          "sites", "keep the sites on the words an image-text model relies on (AutoCAD); off: all pass"),
    Stage("candidates", "tasks.text.candidates", "candidates", schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES),
          schemas.SITES, "saliency", "each site's rewrites: masked-LM fills, recounts, deletions"),
    Stage("relations", "tasks.text.relations", "relations", schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES),
          schemas.CANDIDATES, "candidates", "drop substitutes that are WordNet synonyms, hyponyms or hypernyms"),
    Stage("similarity", "tasks.text.similarity", "similarity", schemas.SIMILARITY, schemas.rejects(schemas.SIMILARITY),
          schemas.CANDIDATES, "relations", "keep candidates with lower < cos(C_o, C_c) <= upper"),
    Stage("perplexity", "tasks.text.perplexity", "counterfactual_captions", schemas.COUNTERFACTUALS,
          schemas.COUNTERFACTUALS_REJECTS, schemas.SIMILARITY, "similarity",
          "the lowest-perplexity survivor per caption is C_c"),
    Stage("generate", "tasks.image.generate", "samples", schemas.SAMPLES, schemas.SAMPLES_REJECTS, schemas.PAIR,
          "perplexity", "render and CLIP-score n_samples image pairs per caption pair", SAMPLE_CODE),
    Stage("selection", "tasks.image.selection", "selected", schemas.SELECTED, schemas.SELECTED_REJECTS,
          schemas.SAMPLES, "generate", "thresholds, then the best passing sample rendered canonically", SAMPLE_CODE),
)}
CAPTION_STEPS = ("sites", "saliency", "candidates", "relations", "similarity", "perplexity")


def skip_reason(name: str, params) -> str | None:
    """Why stage `name` passes its input through unchanged, loading no model, or None when it runs: saliency needs
    to be enabled and to have real images."""
    if name != "saliency":
        return None
    if not params.saliency.enabled:
        return "saliency.enabled is false"
    return None if params.paths.source_images else "paths.source_images is not set: no real images to rank with"
