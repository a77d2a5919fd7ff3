"""Orchestration only: Prefect flows over the stage logic in `tasks`, the `cfgen` CLI the DVC stages call, the
temporary Prefect server, progress reporting, the scheduled deployment and dataset-version diffs.
"""
