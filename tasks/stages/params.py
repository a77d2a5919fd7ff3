"""Declaration of `params`: the whole params file validated, first (its flow: `flows.params`); it reads every params
section (`reads` left out), and every other stage follows it (`tasks.stages.FIRST`)."""

from tasks.stages import TableStage

STAGE = TableStage("params", "flows.params:check_params",
                   "Validate every section of the params file and stamp it (paths.params_checked): every DVC stage "
                   "depends on the stamp, so a typo anywhere stops `dvc repro` before any stage works or loses an "
                   "output.", show="flows.params:show")
