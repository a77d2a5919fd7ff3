"""Batch-invariant forward passes: an item's result depends on the item alone, never on its batch-mates, the batch
size, the order items arrive in or which of them a cache already held.

Two things move a row's float result on CPU (and GPU) kernels while leaving its math unchanged:
- the padded length of a sequence: masked softmaxes and reductions run over the padded length, so a text padded to
  its batch's longest is scored differently in every batch. Items are therefore batched only with items of their
  own shape (a text's token count: no padding at all);
- the row count of a matrix product: CPU GEMM kernels compute rows in blocks of 4, and the rows of a partial block
  round differently, how differently depending on the thread count too (measured with torch 2.15 on AVX2, 1–16
  threads: products of fewer than 4 rows, and of 5–7, 9–11, 17–19 … rows when threads split them, moved rows in the
  last bit; every multiple of 4 gave every row the same bits). Every batch is therefore filled to a multiple of
  `ROW_BLOCK` rows by repeating its last item, whose copies are dropped: the row count of every product of the pass
  (B × tokens, B × patches, the pooled B) is then a multiple of 4.

Batches cut this way keep `batch_size` a pure speed knob: it never enters a cache key, and it need not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
ROW_BLOCK = 4


def invariant_batches(shapes: Sequence[Hashable], batch_size: int) -> Iterator[tuple[list[int], int]]:
    """(indices, n) per batch: items of one shape together, at most `batch_size` real items (`n`), `indices` padded
    to a multiple of `ROW_BLOCK` by repeating the last."""
    groups = defaultdict(list)
    for i, shape in enumerate(shapes):
        groups[shape].append(i)
    for members in groups.values():
        for at in range(0, len(members), batch_size):
            batch = members[at:at + batch_size]
            yield batch + batch[-1:] * (-len(batch) % ROW_BLOCK), len(batch)


def invariant_map(forward: Callable[[list[T]], Iterable[R]], items: Sequence[T], batch_size: int,
                  shapes: Sequence[Hashable] | None = None) -> list[R]:
    """`forward` (a batch of items -> one result per item, by position) over invariant batches; results in item
    order, each the one its item gets in any batch. `shapes`: each item's (None: all of one shape)."""
    out: list = [None] * len(items)
    for indices, n in invariant_batches([None] * len(items) if shapes is None else shapes, batch_size):
        results = forward([items[i] for i in indices])
        for i, result in zip(indices[:n], results):
            out[i] = result
    return out
