"""The order compute_out's CTAs take the chunks in (kernels/cutile/out_tiles.py)."""

import pytest

from kernels.cutile.out_tiles import chunk_at


@pytest.mark.parametrize("nchunks", [1, 2, 7, 16, 33, 64])
def test_every_chunk_is_taken_once(nchunks: int) -> None:
    for seg_len in range(1, nchunks + 1):
        taken = [chunk_at(order, nchunks, seg_len) for order in range(nchunks)]
        assert sorted(taken) == list(range(nchunks)), seg_len


def test_the_last_chunks_of_every_segment_come_first() -> None:
    taken = [chunk_at(order, 16, 4) for order in range(16)]
    assert taken[:4] == [3, 7, 11, 15]
    assert taken[-4:] == [0, 4, 8, 12]


def test_a_shorter_last_segment_takes_plain_reverse_order() -> None:
    assert [chunk_at(order, 10, 4) for order in range(10)] == list(range(9, -1, -1))
