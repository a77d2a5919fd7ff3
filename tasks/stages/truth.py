"""Declaration of `truth`: the toy world's truth of every sample and selected pair (its flow: `flows.truth`)."""

from tasks.stages import TableStage

STAGE = TableStage("truth", "flows.truth:truth_flow",
                   "The toy world's truth of a demo run: every generated sample re-rendered (with and without "
                   "attention sharing) and every selected pair read back by the checker (paths.metrics/truth.json: "
                   "pair_accuracy, minimality, p2p_gain, filter_lift).",
                   after=("generate", "judge", "selection"),
                   reads=("truth", "generate", "selection", "judge", "tiny_models"), check="flows.truth:check",
                   show="flows.truth:show", sharded=True)
