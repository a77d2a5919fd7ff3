"""Declaration of `sites`: captions -> edit sites (its logic: `tasks.text.sites`, each edit type's `sites`)."""

from tasks.core import schemas
from tasks.core.edits import behaviours
from tasks.stages import Stage

STAGE = Stage("sites", "sites", schemas.SITES, schemas.SITES_REJECTS, "tasks.text.sites", schemas.CAPTIONS, "ingest",
              ("tasks.text.sites:run", "tasks.text.sites:load_models", *behaviours("sites")))
