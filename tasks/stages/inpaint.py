"""Declaration of `inpaint`: object removal's image edits (its flow: `flows.removal.inpaint`)."""

from tasks.stages import TableStage

HELP = "Object removal: fill each removed region (cached per edit)."

STAGE = TableStage(
    "inpaint",
    "flows.removal.inpaint:inpaint_flow",
    HELP,
    after=("removal_captions",),
    reads=("inpaint",),
    models=("inpaint",),
    show="flows.engine.console:show_json",
)
