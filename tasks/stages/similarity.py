"""Declaration of `similarity`: candidates -> those in the similarity window (its logic: `tasks.text.similarity`)."""

from tasks.core import schemas
from tasks.stages import Stage

STAGE = Stage("similarity", "similarity", schemas.SIMILARITY, schemas.rejects(schemas.SIMILARITY),
              "tasks.text.similarity", schemas.CANDIDATES, "relations")
