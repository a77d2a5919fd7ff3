"""What a run publishes: the report (`report`, `figures`), the `datasets` export, the datasheet and card, dataset
diffs, and model provenance (`provenance`: content identities, never a loaded model).

May import: `tasks.core` (never `tasks.core.loading`; the assembled `Params` too), `tasks.stages`, `tasks.release`.
Release reads data, never models.
"""
