"""Declaration of `generate`: caption pairs -> screening scores of their samples (its logic: `tasks.image.generate`).
`SAMPLE_CODE` is what a sample's render and measurement execute (both image stages key it)."""

from tasks.core import schemas
from tasks.stages import Stage

SAMPLE_CODE = ("tasks.image.render:load_models", "tasks.image.render:canonical", "tasks.image.render:Batcher")

STAGE = Stage("generate", "samples", schemas.SAMPLES, schemas.SAMPLES_REJECTS, "tasks.image.generate", schemas.PAIR,
              "perplexity", SAMPLE_CODE, reads=("generate", "selection"))
