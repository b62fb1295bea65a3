"""Markdown snippets shared by the run report and the gate's PR comment."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

_SHORT = {
    "seqlen": "L",
    "nheads": "H",
    "dstate": "N",
    "headdim": "P",
    "batch": "b",
    "ngroups": "G",
    "chunk_size": "Q",
    "dtype": "",
    "options": "",
}


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; cell text has pipes escaped and newlines flattened."""

    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def ms(value: float) -> str:
    """Milliseconds with four significant digits; an em dash when missing."""
    return "—" if value is None or math.isnan(value) else f"{value:.4g}"


def ms_ci(median: float, low: float, high: float) -> str:
    """'0.1234 [0.1221, 0.1247]': a median with its confidence interval, in ms."""
    return f"{ms(median)} [{ms(low)}, {ms(high)}]"


def ratio(value: float, low: float = math.nan, high: float = math.nan) -> str:
    """'1.42x [1.38, 1.46]' (interval left out where unknown)."""
    if value is None or math.isnan(value):
        return "—"
    if math.isnan(low) or math.isnan(high):
        return f"{value:.3f}x"
    return f"{value:.3f}x [{low:.3f}, {high:.3f}]"


def change(ratio: float) -> str:
    """A ratio of two times as a change: 1.052 -> '+5.2 %'; an em dash when missing."""
    return "—" if ratio is None or math.isnan(ratio) else f"{100 * (ratio - 1):+.1f} %"


def flatten(value: object, prefix: str = "") -> list[tuple[str, str]]:
    """Nested metadata as (dotted key, text) pairs, for key/value tables."""
    if isinstance(value, dict):
        items = []
        for key, inner in value.items():
            items += flatten(inner, f"{prefix}.{key}" if prefix else str(key))
        return items
    return [(prefix, str(value))]


def first_line(text: str, limit: int = 120) -> str:
    """First line of an error message, cut to `limit` characters."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tokens(n: int) -> str:
    """1024 -> '1K', 65536 -> '64K' (seqlen tick and label text)."""
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def point_label(row: Mapping, columns: Sequence[str]) -> str:
    """Short label such as 'L=4K H=64 N=128' from a row and the columns worth naming."""
    parts = []
    for c in columns:
        value = row[c]
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # an outer join turns integer columns into floats
        text = tokens(value) if c == "seqlen" else str(value)
        parts.append(f"{_SHORT[c]}={text}" if _SHORT.get(c) else text)
    return " ".join(parts)


def commits(counts: Mapping[str, int]) -> str:
    """'6350b9bdd7d5' for a run measured at one commit; with several (resumed at another), each
    with its points, most first: '6350b9bdd7d5 (62 points), 3223a0202438 (1)'."""
    if len(counts) <= 1:
        return next(iter(counts), "")[:12]
    parts = [f"{c[:12] or '?'} ({n})" for c, n in counts.items()]
    parts[0] = parts[0].replace(")", " points)")
    return ", ".join(parts)
