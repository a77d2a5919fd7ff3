"""Declaration of `relations`: candidates -> those not lexically related (its logic: `tasks.text.relations`)."""

from tasks.core import schemas
from tasks.stages import Stage

STAGE = Stage("relations", "relations", schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES),
              "tasks.text.relations", schemas.CANDIDATES, "candidates")
