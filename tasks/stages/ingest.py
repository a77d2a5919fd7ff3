"""Declaration of `ingest`: caption files -> the captions table (its logic: `tasks.text.ingest`)."""

from tasks.core import schemas
from tasks.stages import Stage

STAGE = Stage("ingest", "captions", schemas.CAPTIONS, schemas.CAPTIONS_REJECTS, "tasks.text.ingest",
              code=("tasks.text.ingest:read_captions",), reads=())
