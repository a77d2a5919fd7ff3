"""The stage contracts: one typed entry per data stage, read by the CLI, the flows, the cache keys and the tests.

A stage's name is its CLI command, its DVC stage and its `params.yaml` section. `logic` names the module whose
`run` (and `load_models`) the stage executes; its code identity is `code.closure(logic)`. `input` is what the stage
reads from the output of `after`. Which params change its output is declared on the params model (`unkeyed` fields
never enter a cache key). Importing this module imports no model library.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks import schemas
from tasks.ingest import REJECTS_SCHEMA as INGEST_REJECTS
from tasks.ingest import SCHEMA as CAPTIONS
from tasks.schemas import Schema


@dataclass(frozen=True)
class Stage:
    name: str
    logic: str
    output: Schema
    rejects: Schema
    input: Schema | None = None
    after: str | None = None
    description: str = ""

    def section(self, params):
        """This stage's typed params section of a whole `Params`."""
        return getattr(params, self.name)


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("ingest", "tasks.ingest", CAPTIONS, INGEST_REJECTS,
          description="COCO caption JSON or `caption_id<TAB>caption` TSV -> captions"),
    Stage("nouns", "tasks.nouns", schemas.NOUNS, schemas.NOUNS_REJECTS, CAPTIONS, "ingest",
          "every NN/NNS token of C_o is a substitution site"),
    Stage("candidates", "tasks.candidates", schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES), schemas.NOUNS,
          "nouns", "top-k masked-LM fills of each site, filtered"),
    Stage("similarity", "tasks.similarity", schemas.SIMILARITY, schemas.rejects(schemas.SIMILARITY),
          schemas.CANDIDATES, "candidates", "keep candidates with lower < cos(C_o, C_c) <= upper"),
    Stage("perplexity", "tasks.perplexity", schemas.COUNTERFACTUALS, schemas.COUNTERFACTUALS_REJECTS,
          schemas.SIMILARITY, "similarity", "the lowest-perplexity survivor per caption is C_c"),
    Stage("generate", "tasks.generate", schemas.SAMPLES, schemas.SAMPLES_REJECTS, schemas.PAIR, "perplexity",
          "render and CLIP-score n_samples image pairs per caption pair"),
    Stage("filter", "tasks.filter", schemas.SELECTED, schemas.SELECTED_REJECTS, schemas.SAMPLES, "generate",
          "thresholds, then the best passing sample rendered canonically"),
)}
CAPTION_STEPS = ("nouns", "candidates", "similarity", "perplexity")
