"""Block-index arithmetic of the kernels (kernels/cutile/indices.py), run as plain Python."""

import pytest

from kernels.cutile.indices import group_of, split_index


@pytest.mark.parametrize("ngroups", [1, 2, 4])
def test_group_of_is_the_quotient(ngroups: int) -> None:
    nheads = 8
    heads_per_group = nheads // ngroups
    for head in range(nheads):
        assert group_of(head, heads_per_group, ngroups) == head // heads_per_group


@pytest.mark.parametrize(("outer_size", "inner"), [(1, 1), (1, 5), (2, 3), (3, 1), (4, 4)])
def test_split_index_is_quotient_and_remainder(outer_size: int, inner: int) -> None:
    for index in range(outer_size * inner):
        assert split_index(index, inner, outer_size) == divmod(index, inner)
