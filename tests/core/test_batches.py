"""Batch invariance (`tasks.core.batches`): an item's result is the same bytes in any batch, at any batch size and
thread count, through a real transformer layer; the naive cut (pad to the batch's longest, any row count) is not."""

from __future__ import annotations

import pytest
import torch

from tasks.core.batches import ROW_BLOCK, invariant_batches, invariant_map, invariant_products

LENGTHS = [5, 9, 5, 7, 9, 9, 5, 11, 7, 5, 5, 9, 3]


@pytest.fixture(scope="module")
def layer() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(96, 4, 384, dropout=0.0, batch_first=True).eval()


@pytest.fixture(scope="module")
def texts() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(n, 96, generator=generator) for n in LENGTHS]


def pooled(layer: torch.nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """One pass over a batch padded to its longest (masked), then a pooled projection: (B, 96)."""
    padded = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True)
    mask = torch.arange(padded.shape[1])[None] >= torch.tensor([len(x) for x in batch])[:, None]
    with torch.inference_mode():
        return layer.linear1(layer(padded, src_key_padding_mask=mask)[:, 0])


def test_batches_hold_one_shape_at_most_batch_size_padded_to_the_row_block():
    batches = list(invariant_batches(LENGTHS, 3))
    assert sorted(i for indices, n in batches for i in indices[:n]) == list(range(len(LENGTHS)))
    for indices, n in batches:
        assert 0 < n <= 3 and len(indices) % ROW_BLOCK == 0 and len({LENGTHS[i] for i in indices}) == 1
        assert set(indices[n:]) <= {indices[n - 1]}


def test_an_items_result_is_the_same_bytes_in_any_batch_and_thread_count(layer, texts):
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            runs += [invariant_map(lambda batch: pooled(layer, batch), texts, size, LENGTHS) for size in (1, 2, 5, 64)]
        alone = [invariant_map(lambda batch: pooled(layer, batch), [x], 1)[0] for x in texts]
    finally:
        torch.set_num_threads(before)
    for run in runs:
        assert all(torch.equal(a, b) for a, b in zip(run, alone))


def test_the_naive_cut_is_not_invariant(layer, texts):
    """What the helper is for: padding to the batch's longest moves an item's bits (else these tests prove nothing)."""
    together = pooled(layer, texts)
    assert not all(torch.equal(together[i], pooled(layer, [x])[0]) for i, x in enumerate(texts))


@pytest.mark.parametrize("width", [64, 768])
def test_a_products_rows_are_a_large_products_bits_at_any_row_count_and_thread_count(width):
    """`invariant_products`: rows 1–19 of `x @ W`, `F.linear` and `nn.Linear` equal a 128-row product's rows at 1
    and 2 threads; unpadded, some small products do not (the CPU kernels this guards against)."""
    generator = torch.Generator().manual_seed(2)
    x, w = torch.randn(128, width, generator=generator), torch.randn(width, width, generator=generator)
    linear = torch.nn.Linear(width, width)
    before, naive = torch.get_num_threads(), []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.inference_mode():
                big, big_linear = x @ w, linear(x)
                naive += [m for m in range(1, 20) if not torch.equal(x[:m] @ w, big[:m])]
                with invariant_products():
                    assert all(torch.equal(x[:m] @ w, big[:m]) and torch.equal(x[m - 1] @ w, big[m - 1])
                               and torch.equal(torch.nn.functional.linear(x[:m], w.T), big[:m])
                               and torch.equal(linear(x[:m]), big_linear[:m]) for m in range(1, 20))
    finally:
        torch.set_num_threads(before)
    assert naive
