"""Prefect flows that chain the `tasks` stages, the `cfgen` CLI that DVC stages call, and deployments."""
