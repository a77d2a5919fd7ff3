"""Declaration of `datasheet`: the datasheet and dataset card (its flow: `flows.release.datasheet`); it reads every
params section (`reads` left out)."""

from tasks.stages import TableStage

STAGE = TableStage("datasheet", "flows.release.datasheet:datasheet_flow",
                   "Generate the datasheet and the dataset card that embeds it.",
                   after=("evaluate", "export", "judge", "mixtures", "perplexity", "report", "truth", "validation"))
