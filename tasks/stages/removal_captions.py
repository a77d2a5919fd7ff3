"""Declaration of `removal_captions`: object removal's edited captions (its flow: `flows.removal.captions`)."""

from tasks.stages import TableStage

STAGE = TableStage("removal_captions", "flows.removal.captions:removal_captions_flow",
                   "Object removal: the edited captions and the ODmAP gallery.",
                   after=("removal_masks",), reads=("removal_captions",), show="flows.engine.console:show_json")
