"""scripts/variants.py: a bad shape or `name=JSON` variant fails with a clear message before any
work."""

from __future__ import annotations

import argparse

import pytest

from scripts.variants import parse_points, parse_shape, parse_variant, point_config


def test_variants_parse() -> None:
    assert parse_variant('cb={"out_cb": 1}') == ("cb", {"out_cb": 1})
    assert parse_variant("default") == ("default", {})


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ('triton={"out_cb": 1}', ValueError, "other than triton or tuned"),
        ("tuned={}", ValueError, "other than triton or tuned"),
        ('={"out_cb": 1}', ValueError, "needs a name"),
        ("a/b={}", ValueError, "letters, digits"),
        ("cb={out_cb: 1}", ValueError, "not a JSON object"),
        ("cb=[1]", ValueError, "not a JSON object"),
        ('cb={"out_cb": 7}', ValueError, "out_cb"),
        ('cb={"no_such_knob": 1}', TypeError, "no_such_knob"),
    ],
)
def test_bad_variant_names_what_to_change(text: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        parse_variant(text)


def test_a_repeated_variant_name_ends_the_script(capsys) -> None:
    """Rows are kept by name: two variants of one name would both show the last one's times."""
    parser = argparse.ArgumentParser(prog="x")
    with pytest.raises(SystemExit) as exit_:
        parse_points(parser, "1024:32:64", ["a={}", 'a={"out_cb": 1}'])
    assert exit_.value.code == 2
    assert "names must differ; repeated: a" in capsys.readouterr().err


def test_shapes_parse() -> None:
    problem = parse_shape("16384:64:256")
    assert (problem.seqlen, problem.nheads, problem.dstate) == (16384, 64, 256)
    assert problem.return_final_states and problem.chunk_size == 256
    assert parse_shape("4096:32:64:128").chunk_size == 128
    assert not parse_shape("4096:32:64:128", final_states=False).return_final_states


def test_points_pass_the_final_states_choice_to_every_shape() -> None:
    problems, variants = parse_points(
        argparse.ArgumentParser(), "2048:64:64:128,4096:32:128", [], final_states=False
    )
    assert [p.return_final_states for p in problems] == [False, False]
    assert variants == [("default", {})]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("16384:64", "seqlen:nheads:dstate"),
        ("1k:64:256", "seqlen:nheads:dstate"),
        ("1024:64:256:256:1", "seqlen:nheads:dstate"),
        ("1024:64:256:100", "chunk_size must be a power of two"),
    ],
)
def test_bad_shape_says_the_format(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_shape(text)


def test_a_variants_config_is_its_fields_over_the_points_default() -> None:
    problem = parse_shape("2048:32:256")
    config = point_config(problem, {"out_rank1": 1})
    assert config.out_rank1 == 1 and config.out_cb == 0  # below 1024 tiles: C·Bᵀ inside
