"""Declaration of `removal_masks`: object removal's (image, class) pairs (its flow: `flows.removal.masks`)."""

from tasks.stages import TableStage

STAGE = TableStage("removal_masks", "flows.removal.masks:removal_masks_flow",
                   "Object removal: which (image, class) pairs to remove, from the COCO instances file.",
                   reads=("removal_masks",), show="flows.engine.console:show_json")
