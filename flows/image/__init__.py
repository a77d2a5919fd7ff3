"""Image flows: `generate` screens many samples per caption pair, `selection` picks one canonically rendered winner
per pair. Each stage's flow is its own module, so an edit of one stage's code stales that stage alone. Both keep
their renders in the pair records returned here.
"""

from __future__ import annotations

from flows.engine.workspace import result_store
from tasks.image.records import PairRecords
from tasks.stages import Params


def sample_records(params: Params) -> PairRecords:
    """The image stage's pair records: `samples/` in the result store (an absolute path: a Dask worker on a shared
    filesystem appends where a later local run reads)."""
    return PairRecords(result_store(params) / "samples")
