"""Declaration of `datasheet`: the datasheet and dataset card, over every section (its flow: `flows.release.datasheet`)."""

from tasks.stages import TableStage

HELP = "Generate the datasheet and the dataset card that embeds it."

STAGE = TableStage(
    "datasheet",
    "flows.release.datasheet:datasheet_flow",
    HELP,
    after=("evaluate", "export", "judge", "mixtures", "perplexity", "report", "truth", "validation"),
    reads=None,
)
