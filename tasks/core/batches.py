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
  (B × tokens, B × patches, the pooled B) is then a multiple of 4;
- a product of few rows: on an Intel Xeon with AVX-512, MKL computes the rows of a product of fewer than `MIN_ROWS`
  (16) rows with other kernels than a larger product's (measured with torch 2.15: rows 1–15 of a 768×768 product
  moved in the last bits, any count from 16 on gave a 128-row product's bits), so the pooled B rows of a small batch
  and a denoiser's per-row time embeddings (4 rows a sample) followed their batch there. `invariant_products`
  therefore gives every CPU matrix product of fewer rows zero rows up to `MIN_ROWS` and drops them again.

Batches cut this way keep `batch_size` a pure speed knob: it never enters a cache key, and it need not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import torch
from torch.overrides import TorchFunctionMode

T = TypeVar("T")
R = TypeVar("R")
ROW_BLOCK = 4
MIN_ROWS = 16
PRODUCTS = frozenset({torch.nn.functional.linear, torch.matmul, torch.Tensor.matmul, torch.mm, torch.Tensor.mm})


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
        with invariant_products():
            results = forward([items[i] for i in indices])
        for i, result in zip(indices[:n], results):
            out[i] = result
    return out


class invariant_products(TorchFunctionMode):  # noqa: N801 - used as a context, like torch's own modes
    """Within it, a CPU product `x @ W` (`PRODUCTS`, W 2-D) of fewer than `MIN_ROWS` rows (x's leading dimensions
    flattened) runs on x padded with zero rows to `MIN_ROWS`; its rows are returned, the same bits at any row count."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in PRODUCTS:
            x, weight = args[0], args[1]
            rows = x.shape[:-1].numel()
            if x.device.type == "cpu" and weight.dim() == 2 and rows < MIN_ROWS:
                flat = x.reshape(rows, x.shape[-1])
                out = func(torch.cat([flat, flat.new_zeros(MIN_ROWS - rows, x.shape[-1])]), *args[1:], **kwargs)
                return out[:rows].reshape(*x.shape[:-1], out.shape[-1])
        return func(*args, **kwargs)
