"""Declaration of `mixtures`: the training mixtures (its flow: `flows.release.mixtures`)."""

from tasks.stages import TableStage

STAGE = TableStage("mixtures", "flows.release.mixtures:mixtures_flow",
                   "Build the base / medium / all training mixtures as `datasets` configs.",
                   after=("selection",), reads=("mixtures",), show="flows.release.mixtures:show")
