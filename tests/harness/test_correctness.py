"""harness.correctness: the relative error, NaN handling and the tolerance table."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest
import torch

from harness import correctness, environment


def test_relative_error_is_the_l2_ratio_in_float64() -> None:
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    out = torch.tensor([3.0, 4.5], dtype=torch.bfloat16)
    assert correctness.relative_error(out, ref) == pytest.approx(0.5 / 5.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_or_inf_never_passes(bad: float) -> None:
    out = torch.tensor([1.0, bad])
    err = correctness.relative_error(out, torch.tensor([1.0, 1.0]))
    assert math.isnan(err)
    assert not any(correctness.passes(err, dtype) for dtype in correctness.TOLERANCE)


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="shape mismatch"):
        correctness.relative_error(torch.zeros(2), torch.zeros(3))


def test_against_a_zero_reference_only_the_exact_answer_is_right() -> None:
    assert correctness.relative_error(torch.zeros(4), torch.zeros(4)) == 0.0
    error = correctness.relative_error(torch.full((4,), 1e-3), torch.zeros(4))
    assert error == math.inf and not correctness.passes(error, "bfloat16")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("offset", [0, 1, 2])
def test_the_poison_is_nan_in_every_output_dtype(dtype: torch.dtype, offset: int) -> None:
    """An unwritten element of any dtype reads NaN, wherever in the block it starts."""
    block = correctness.poison_block(64, "cpu")[offset:].clone()
    size = dtype.itemsize
    values = block[: (block.numel() // size) * size].view(dtype)
    assert values.numel() > 0 and values.isnan().all()


def test_tolerances_are_the_documented_ones() -> None:
    """Every GPU check imports this table: a loosened limit must fail here, and docs/correctness.md
    must state the limits in force."""
    assert correctness.TOLERANCE == {"bfloat16": 1e-2, "float16": 1e-3, "float32": 5e-3}
    doc = (Path(__file__).parents[2] / "docs" / "correctness.md").read_text()
    for dtype, limit in correctness.TOLERANCE.items():
        (row,) = [line for line in doc.splitlines() if line.startswith(f"| {dtype} ")]
        assert float(row.split("|")[2]) == limit, row


def test_tolerances_order_by_precision() -> None:
    tol = correctness.TOLERANCE
    assert set(tol) == {"float32", "float16", "bfloat16"}
    assert tol["float16"] < tol["bfloat16"] and tol["float32"] < tol["bfloat16"]
    assert correctness.passes(tol["bfloat16"], "bfloat16")
    assert not correctness.passes(tol["bfloat16"] * 1.01, "bfloat16")


class FakeAllocator:
    """The driver allocations the caching allocator reports (num_device_alloc): one per fill,
    and one per `add`."""

    def __init__(self) -> None:
        self.device_allocations = 0

    def add(self) -> None:
        self.device_allocations += 1


def _fake_cuda(monkeypatch: pytest.MonkeyPatch, calls: list[tuple], cuda: FakeAllocator) -> None:
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "device", lambda gpu: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(("empty",)))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda gpu: (64 << 30, 141 << 30))
    monkeypatch.setattr(torch.cuda, "MemPool", lambda: "pool")
    monkeypatch.setattr(
        torch.cuda, "memory_stats", lambda gpu: {"num_device_alloc": cuda.device_allocations}
    )

    @contextlib.contextmanager
    def use_mem_pool(pool, device):
        calls.append(("enter", device))
        yield
        calls.append(("leave",))

    def fill(nbytes: int, gpu: torch.device) -> None:
        calls.append(("fill", nbytes, gpu))
        cuda.add()

    monkeypatch.setattr(torch.cuda, "use_mem_pool", use_mem_pool)
    monkeypatch.setattr(correctness, "poison_block", fill)


@pytest.mark.parametrize(("device", "index"), [("cuda", 3), ("cuda:1", 1)])
@pytest.mark.parametrize(
    ("nbytes", "poisoned"),
    [
        (1 << 20, 20 << 20),
        (21 << 20, 22 << 20),
        ((22 << 20) + 1, 24 << 20),
        (100 << 30, 62 << 30),
    ],  # fmt: skip
)
def test_poisoned_allocations_fill_a_pool_of_their_own_first(
    monkeypatch: pytest.MonkeyPatch, device: str, index: int, nbytes: int, poisoned: int
) -> None:
    """On the CPU, the calls it makes, in order: the cache emptied, a pool made current for the
    GPU's index (use_mem_pool wants an index: "cuda" alone is the current GPU), the small and
    large blocks filled inside it (a whole segment: at least 20 MiB, else rounded up to 2 MiB;
    at most the free memory less 2 GiB), and the caller's allocations inside too."""
    calls: list[tuple] = []
    _fake_cuda(monkeypatch, calls, FakeAllocator())
    with correctness.poisoned_allocations(device, nbytes):
        calls.append(("call",))
    gpu = torch.device("cuda", index)
    assert calls == [
        ("empty",), ("enter", gpu), *[("fill", 1 << 19, gpu)] * 32, ("fill", poisoned, gpu),
        ("call",), ("leave",),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("nbytes", "why"),
    [(64 << 20, "bound on its allocations, 0.06 GiB, is too small"),
     (100 << 30, "free memory held only 62.00 GiB of the 100.00 GiB bound")],
)  # fmt: skip
def test_a_call_that_allocates_past_the_poisoned_pool_is_not_trusted(
    monkeypatch, nbytes: int, why: str
) -> None:
    """A new segment in the pool means fresh, unfilled memory served part of the call; the error
    says whether the bound or the GPU's free memory was short."""
    cuda = FakeAllocator()
    _fake_cuda(monkeypatch, [], cuda)
    with pytest.raises(correctness.PoisonOverflow, match=f"took 1 new segment.*poisoned.*{why}"):
        with correctness.poisoned_allocations("cuda", nbytes):
            cuda.add()


@pytest.mark.parametrize(
    ("conf", "setting"),
    [("expandable_segments:True", "expandable_segments"),
     ("garbage_collection_threshold:0.6, max_split_size_mb:512", "max_split_size_mb"),
     ("backend:cudaMallocAsync", "backend")],
)  # fmt: skip
def test_allocator_settings_that_defeat_the_poison_are_refused(
    monkeypatch, conf: str, setting: str
) -> None:
    """A segment that grows in place adds no segment (an overflow would go unseen), a split size
    keeps the large block from small requests, and the async backend has no pools."""
    _fake_cuda(monkeypatch, [], FakeAllocator())
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
    assert f"the allocator setting {setting} in" in environment.allocator_conflict()
    with pytest.raises(RuntimeError, match=setting):
        with correctness.poisoned_allocations("cuda", 64 << 20):
            pass
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.6")
    assert environment.allocator_conflict() is None
