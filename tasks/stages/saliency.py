"""Declaration of `saliency`: edit sites -> the salient ones (its logic: `tasks.text.saliency`)."""

from tasks.core import schemas
from tasks.stages import Stage

STAGE = Stage("saliency", "salient_sites", schemas.SITES, schemas.SITES_REJECTS, "tasks.text.saliency", schemas.SITES,
              "sites")
