"""Declaration of `candidates`: edit sites -> candidate rewrites (its logic: `tasks.text.candidates`, each edit type's
fill check or rewrite and the defects that reject)."""

from tasks.core import schemas
from tasks.core.edits import behaviours
from tasks.stages import Stage

STAGE = Stage("candidates", "candidates", schemas.CANDIDATES, schemas.rejects(schemas.CANDIDATES),
              "tasks.text.candidates", schemas.SITES, "saliency",
              ("tasks.text.candidates:run", "tasks.text.candidates:load_models",
               *(entry for function in ("check_fill", "rewrite", "defects") for entry in behaviours(function))))
