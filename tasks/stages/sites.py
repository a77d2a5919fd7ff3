"""Declaration of `sites`: captions -> edit sites (its logic: `tasks.text.sites`)."""

from tasks.core import schemas
from tasks.stages import Stage

STAGE = Stage("sites", "sites", schemas.SITES, schemas.SITES_REJECTS, "tasks.text.sites", schemas.CAPTIONS, "ingest")
