"""Declaration of `mixtures`: the training mixtures (its flow: `flows.release.mixtures`)."""

from tasks.stages import TableStage

HELP = "Build the base / medium / all training mixtures as `datasets` configs."

STAGE = TableStage(
    "mixtures",
    "flows.release.mixtures:mixtures_flow",
    HELP,
    after=("selection",),
    reads=("mixtures",),
    show="flows.release.mixtures:show",
)
