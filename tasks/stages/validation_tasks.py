"""Declaration of `validation_tasks`: the Label Studio tasks of the selected pairs (its flow: `flows.validation`)."""

from tasks.stages import TableStage

STAGE = TableStage("validation_tasks", "flows.validation:validation_tasks_flow",
                   "Label Studio tasks (one per generated image) and labeling config.",
                   after=("selection",), reads=("validation",), show="flows.validation:show_tasks")
