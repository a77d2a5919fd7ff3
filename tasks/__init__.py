"""Stage logic: plain functions over polars frames and typed params, models loaded once and passed in.

One sub-package per concern: `core` (params, schemas, stage contracts, model identity and loading, cache keys, I/O),
`text` (caption edits: ingest -> sites -> saliency -> candidates -> relations -> similarity -> perplexity), `image`
(paired generation and selection), `evaluation` (R@k, ITM score differences, ODmAP@k), `validation` (Label Studio,
agreement), `removal` (the object-removal strategy), `release` (report, export, mixtures, datasheet, diff), `demo`
(the tiny offline models and synthetic COCO set). Nothing here imports `flows` or Prefect; `tests/test_layering.py`
holds every package to the imports its docstring allows.

Importing `tasks` pins MKL's CPU matrix products to its AVX2 branch in Conditional Numerical Reproducibility mode
(`MKL_CBWR`, read at MKL's first call, so also after `import torch`; a value the user set is kept): the same bits at
any thread count and on every x86 CPU with AVX2. MKL's default picks its kernels by CPU and its rows per thread by
thread count (`tests/core/test_batches.py`); on an EPYC that moved only partial row blocks, which `tasks.core.batches`
pads away, yet on an AVX-512 Xeon the DAG's 2-thread local run and 1-thread cluster run differed.
"""

import os

from tasks.core.source import record_imports

os.environ.setdefault("MKL_CBWR", "AVX2")
record_imports()  # code identities are of the code this process runs (`tasks.core.source`)
