"""Declaration of `selection`: screening scores -> one canonically rendered pair each (its logic:
`tasks.image.selection`)."""

from tasks.core import schemas
from tasks.stages import Stage
from tasks.stages.generate import SAMPLE_CODE

STAGE = Stage("selection", "selected", schemas.SELECTED, schemas.SELECTED_REJECTS, "tasks.image.selection",
              schemas.SAMPLES, "generate", SAMPLE_CODE, reads=("selection", "generate"))
