"""Declaration of `removal_selection`: object removal's CLIP check and splits (its flow: `flows.removal.selection`)."""

from tasks.stages import TableStage

STAGE = TableStage("removal_selection", "flows.removal.selection:removal_selection_flow",
                   "Object removal: the CLIP check and the splits.",
                   after=("inpaint",), reads=("removal_selection",), models=("removal_selection",),
                   show="flows.engine.console:show_json")
