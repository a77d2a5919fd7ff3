"""Declaration of `perplexity`: similar candidates -> one C_c per caption (its logic: `tasks.text.perplexity`)."""

from tasks.core import schemas
from tasks.stages import Stage

STAGE = Stage("perplexity", "counterfactual_captions", schemas.COUNTERFACTUALS, schemas.COUNTERFACTUALS_REJECTS,
              "tasks.text.perplexity", schemas.SIMILARITY, "similarity", reads=("perplexity", "sites"))
