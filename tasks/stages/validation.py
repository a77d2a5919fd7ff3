"""Declaration of `validation`: Label Studio's export read back (its flow: `flows.validation`)."""

from tasks.stages import TableStage

STAGE = TableStage("validation", "flows.validation:validation_flow",
                   "Read Label Studio's export: Table 1, Fleiss' kappa, the validated subset.",
                   after=("selection",), reads=("validation",), check="flows.validation:check_export",
                   show="flows.validation:show_results")
