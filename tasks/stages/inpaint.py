"""Declaration of `inpaint`: object removal's image edits (its flow: `flows.removal.inpaint`)."""

from tasks.stages import TableStage

STAGE = TableStage("inpaint", "flows.removal.inpaint:inpaint_flow",
                   "Object removal: fill each removed region (cached per edit).",
                   after=("removal_captions",), reads=("inpaint",), models=("inpaint",),
                   show="flows.engine.console:show_json")
