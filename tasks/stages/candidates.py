"""Declaration of `candidates`: edit sites -> candidate rewrites (its logic: `tasks.text.candidates`)."""

from tasks.core import schemas
from tasks.stages import Stage

STAGE = Stage("candidates", "candidates", schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES),
              "tasks.text.candidates", schemas.SITES, "saliency")
