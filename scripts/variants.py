"""Points and launch-configuration variants on the command line of the GPU scripts: shapes as
`seqlen:nheads:dstate[:chunk_size]`, variants as `name=JSON` (SSDConfig fields over a point's
default_config), checked before any compile or GPU work."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re

from harness.problem import Problem
from kernels.cutile.config import ProblemSize, SSDConfig, default_config

NAME = re.compile(r"[A-Za-z0-9_.-]+")
#: Row names the scripts give their own forwards: Triton's, and compare_configs' tuner pick.
RESERVED = ("triton", "tuned")


def parse_shape(text: str, final_states: bool = True) -> Problem:
    """ "seqlen:nheads:dstate[:chunk_size]" as a bf16 problem with P=64 that returns its final
    states unless told not to, as the default sweep's problems do not (chunk_size 256 unless
    given); the Problem checks the values."""
    try:
        values = [int(v) for v in text.split(":")]
    except ValueError:
        values = []
    if len(values) not in (3, 4):
        raise ValueError(
            f"shape {text!r} is not seqlen:nheads:dstate[:chunk_size], e.g. 16384:64:256"
        )
    chunk = {"chunk_size": values[3]} if len(values) == 4 else {}
    return Problem(
        seqlen=values[0],
        nheads=values[1],
        dstate=values[2],
        dtype="bfloat16",
        return_final_states=final_states,
        **chunk,
    )


def parse_variant(text: str) -> tuple[str, dict]:
    """ "name=JSON" as (name, overrides); a name is letters, digits, '_', '.' or '-' (it names
    files), and not one of RESERVED."""
    name, _, fields = text.partition("=")
    check_name(name, f"variant {text!r}")
    try:
        overrides = json.loads(fields or "{}")
    except json.JSONDecodeError as err:
        raise ValueError(f"variant {name!r}: {fields!r} is not a JSON object ({err})") from None
    if not isinstance(overrides, dict):
        raise ValueError(f"variant {name!r}: {fields!r} is not a JSON object")
    SSDConfig(**overrides)  # unknown fields (TypeError) or bad values (ValueError) fail here
    return name, overrides


def check_name(name: str, what: str) -> None:
    """ValueError unless `name` can name a row and a file and is not RESERVED."""
    if not NAME.fullmatch(name) or name in RESERVED:
        raise ValueError(
            f"{what} needs a name of letters, digits, '_', '.' or '-' before '=', other than "
            f"{' or '.join(RESERVED)}"
        )


def check_unique(names: list[str]) -> None:
    """ValueError when a name repeats: rows of one name would be one forward's."""
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"names must differ; repeated: {', '.join(repeated)}")


def require_gpu(parser: argparse.ArgumentParser) -> None:
    """End the script with one line where this machine has no CUDA GPU, before any other work."""
    import torch

    if not torch.cuda.is_available():
        parser.exit(1, f"{parser.prog}: no CUDA GPU found; this script runs on a GPU node\n")


def parse_points(
    parser: argparse.ArgumentParser, shapes: str, variants: list[str], final_states: bool = True
) -> tuple[list[Problem], list[tuple[str, dict]]]:
    """A command line's comma-separated shapes and its variants (none: the default config); a
    bad one ends the script through `parser.error`, naming what to change."""
    try:
        problems = [parse_shape(text, final_states) for text in shapes.split(",")]
        parsed = [parse_variant(text) for text in variants] or [("default", {})]
        check_unique([name for name, _ in parsed])
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    return problems, parsed


def point_config(problem: Problem, overrides: dict) -> SSDConfig:
    """A variant's config at a point: its fields over the point's default_config."""
    size = ProblemSize(problem.batch, problem.seqlen, problem.nheads, problem.chunk_size)
    config = default_config(problem.dstate, size)
    return dataclasses.replace(config, **overrides)
