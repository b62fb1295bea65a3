"""Launch-configuration variants on the command line of the comparison scripts: `name=JSON`,
SSDConfig fields over a point's default_config, checked before any compile or GPU work."""

from __future__ import annotations

import json

from kernels.cutile.config import SSDConfig


def parse_variant(text: str) -> tuple[str, dict]:
    """ "name=JSON" as (name, overrides); the name 'triton' is kept for the reference rows."""
    name, _, fields = text.partition("=")
    if not name or name == "triton":
        raise ValueError(f"variant {text!r} needs a name other than 'triton' before '='")
    try:
        overrides = json.loads(fields or "{}")
    except json.JSONDecodeError as err:
        raise ValueError(f"variant {name!r}: {fields!r} is not a JSON object ({err})") from None
    if not isinstance(overrides, dict):
        raise ValueError(f"variant {name!r}: {fields!r} is not a JSON object")
    SSDConfig(**overrides)  # unknown fields (TypeError) or bad values (ValueError) fail here
    return name, overrides
