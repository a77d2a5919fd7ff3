"""Declaration of `report`: the run's metrics, figures and plot data (its flow: `flows.release.report`)."""

from tasks.stages import TableStage

STAGE = TableStage("report", "flows.release.report:report_flow",
                   "reports/metrics.json, figures and plot data for the current run.",
                   after=("truth",), after_steps=True, reads=("sites", "similarity", "selection"),
                   show="flows.release.report:show")
