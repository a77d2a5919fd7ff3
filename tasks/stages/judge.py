"""Declaration of `judge`: the VLM judge over the selected pairs (its flow: `flows.judge`)."""

from tasks.stages import TableStage

STAGE = TableStage("judge", "flows.judge:judge_flow",
                   "The VLM judge: four yes/no questions per selected pair (cached per pair), the verdict from "
                   "judge.thresholds (reject reasons judge_*) and its agreement with the Label Studio labels "
                   "(paths.metrics/judge.json).",
                   after=("selection",), reads=("judge",), models=("judge",), check="flows.judge:check",
                   show="flows.judge:show", sharded=True)
