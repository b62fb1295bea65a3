"""scripts/variants.py: a bad `name=JSON` variant fails with a clear message before any work."""

from __future__ import annotations

import pytest

from scripts.variants import parse_variant


def test_variants_parse() -> None:
    assert parse_variant('cb={"out_cb": 1}') == ("cb", {"out_cb": 1})
    assert parse_variant("default") == ("default", {})


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ('triton={"out_cb": 1}', ValueError, "other than 'triton'"),
        ('={"out_cb": 1}', ValueError, "needs a name"),
        ("cb={out_cb: 1}", ValueError, "not a JSON object"),
        ("cb=[1]", ValueError, "not a JSON object"),
        ('cb={"out_cb": 7}', ValueError, "out_cb"),
        ('cb={"no_such_knob": 1}', TypeError, "no_such_knob"),
    ],
)
def test_bad_variant_names_what_to_change(text: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        parse_variant(text)
