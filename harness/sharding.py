"""Which points of a sweep one shard measures, when several processes (GPUs, SLURM jobs) split it.

Every shard computes the same split from the full point list of the config, never from what is
already on disk, so that shards need not talk to each other and a rerun of any shard (or of the
whole sweep with another shard count) fills exactly the holes: completed points are skipped
afterwards, inside each shard. The split deals the points out by estimated cost, largest first,
in snake order (0..k-1, then k-1..0, ...): every shard gets the same number of points give or
take one (per-point overheads are equal) and a similar share of the large ones (the sweep order
would give one shard all the longest sequences). Inside a shard the points keep sweep order, so
neighbours still share autotuning keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.problem import Problem, flops


def assign(points: Sequence[Problem], count: int) -> list[int]:
    """The shard (0..count-1) of each point, deterministic for a given point list."""
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    by_cost = sorted(range(len(points)), key=lambda i: (-flops(points[i]), i))
    owner = [0] * len(points)
    for rank, i in enumerate(by_cost):
        turn, position = divmod(rank, count)
        owner[i] = position if turn % 2 == 0 else count - 1 - position
    return owner


def select(points: Sequence[Problem], index: int, count: int) -> list[Problem]:
    """The points of shard `index` out of `count`, in sweep order."""
    if not 0 <= index < count:
        raise ValueError(f"shard index must be in [0, {count}), got {index}")
    return [p for p, owner in zip(points, assign(points, count), strict=True) if owner == index]
