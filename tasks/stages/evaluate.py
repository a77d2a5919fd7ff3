"""Declaration of `evaluate`: zero-shot retrieval and ITM over the pairs (its flow: `flows.evaluation`)."""

from tasks.stages import TableStage

STAGE = TableStage("evaluate", "flows.evaluation:evaluate_flow",
                   "Zero-shot retrieval R@k and ITM score differences of every `evaluate.models` entry on the "
                   "selected pairs (and ODmAP@k on the object-removal pairs).",
                   after=("inpaint", "removal_captions", "removal_selection", "selection", "validation"),
                   reads=("evaluate", "generate"), models=("evaluate",), show="flows.evaluation:show")
