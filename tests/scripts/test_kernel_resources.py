"""scripts/kernel_resources.py: its arguments fail with a clear message before any compile."""

from __future__ import annotations

import pytest

from scripts.kernel_resources import parse_dstates


def test_dstates_parse() -> None:
    assert parse_dstates("64,128,256") == [64, 128, 256]


@pytest.mark.parametrize(
    ("text", "message"),
    [("64,,128", "comma-separated list of integers"), ("64,512", r"\[512\] outside 1..256")],
)
def test_bad_dstates_say_what_to_change(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_dstates(text)
