"""Declaration of `removal_export`: the object-removal pairs as a `datasets` folder (its flow:
`flows.removal.export`)."""

from tasks.stages import TableStage

STAGE = TableStage("removal_export", "flows.removal.export:removal_export_flow",
                   "Object removal: the pairs as a `datasets` folder with its card.",
                   after=("inpaint", "removal_captions", "removal_masks", "removal_selection"),
                   reads=("export", "removal_masks", "removal_captions", "inpaint", "removal_selection"),
                   show="flows.engine.console:show_json")
