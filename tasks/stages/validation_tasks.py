"""Declaration of `validation_tasks`: the Label Studio tasks of the selected pairs (its flow: `flows.validation`)."""

from tasks.stages import TableStage

HELP = "Label Studio tasks (one per generated image) and labeling config."

STAGE = TableStage(
    "validation_tasks",
    "flows.validation:validation_tasks_flow",
    HELP,
    after=("selection",),
    reads=("validation",),
    show="flows.validation:show_tasks",
)
