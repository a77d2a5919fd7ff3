"""Release flows, a module per stage (report, export, mixtures, datasheet): each reads the stage outputs from
`params.yaml` `paths`, like `dataset_flow`, so DVC and Prefect write the same files, and an edit of one stales that
stage alone.
"""
