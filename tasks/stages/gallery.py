"""Declaration of `gallery`: the static pair gallery (its build: `flows.release.gallery`)."""

from tasks.stages import TableStage

HELP = ("The static pair gallery (paths.gallery): every accepted pair, the rejects of every stage, the object-removal "
        "pairs and the run's funnel; open its index.html from the file system or any static host.")

STAGE = TableStage("gallery", "flows.release.gallery:gallery", HELP,
                   after=("inpaint", "judge", "removal_captions", "removal_masks", "removal_selection", "report",
                          "truth", "validation"), after_steps=True,
                   reads=("gallery",), check="flows.release.gallery:check", show="flows.release.gallery:show")
