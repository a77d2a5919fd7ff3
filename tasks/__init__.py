"""Stage logic: plain functions over polars frames and typed params, models loaded once and passed in.

One sub-package per concern: `core` (params, schemas, stage contracts, model identity and loading, cache keys, I/O),
`text` (caption edits: ingest -> sites -> saliency -> candidates -> relations -> similarity -> perplexity), `image`
(paired generation and selection), `evaluation` (R@k, ITM score differences, ODmAP@k), `validation` (Label Studio,
agreement), `removal` (the object-removal strategy), `release` (report, export, mixtures, datasheet, diff), `demo`
(the tiny offline models and synthetic COCO set). Nothing here imports `flows` or Prefect; `tests/test_layering.py`
holds every package to the imports its docstring allows.
"""

from tasks.core.source import record_imports

record_imports()  # code identities are of the code this process runs (`tasks.core.source`)
