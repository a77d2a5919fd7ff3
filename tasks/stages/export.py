"""Declaration of `export`: the selected pairs as a `datasets` folder (its flow: `flows.release.export`)."""

from tasks.stages import TableStage

STAGE = TableStage("export", "flows.release.export:export_flow",
                   "Write the selected pairs as a Hugging Face `datasets` folder (images embedded).",
                   after=("judge", "perplexity", "selection", "validation"),
                   reads=("export", "candidates", "similarity", "perplexity", "generate", "judge"),
                   show="flows.release.export:show")
