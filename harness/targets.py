"""The performance issue's targets read off one run: each target, what the run measured, and
whether it is met. report.md's "Targets" section; closing notes and the notebook quote it.

The targets hold for the default sweep on the H200 in graph mode, speedups measured in the same
run (docs/performance.md, "Where the targets stand"). Against the fastest Triton of a series of
runs, `python -m harness.history` gives the stricter geomean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from harness import analysis, markdown
from harness.history import best_fraction_of_peak

MIN_SPEEDUP = 1.14  # at every point, graph mode
EAGER_MIN_SPEEDUP = 1.0  # never slower than the baseline in eager mode
GEOMEAN_SPEEDUP = 2.0
LONG_SEQLEN, LARGE_DSTATE, LONG_SPEEDUP = 16384, 256, 2.5
PEAK_FRACTION = 0.40  # of the run's measured bf16 matmul rate, at its longest sequences


@dataclass(frozen=True)
class Target:
    """One target: what it asks, what the run measured, and whether it is met (None: the run
    has no point or mode to judge it by)."""

    goal: str
    measured: str
    met: bool | None


def evaluate(df: pd.DataFrame, meta: dict, baseline: str, candidate: str) -> list[Target]:
    """The five targets on one run's rows."""
    graph = analysis.speedups(df, baseline, candidate, "graph")
    eager = analysis.speedups(df, baseline, candidate, "eager")
    long = graph[(graph["seqlen"] >= LONG_SEQLEN) & (graph["dstate"] == LARGE_DSTATE)]
    return [
        _lowest(f"≥ {MIN_SPEEDUP}x at every point (graph)", graph, MIN_SPEEDUP),
        _lowest(f"never slower than {baseline} in eager mode", eager, EAGER_MIN_SPEEDUP),
        _geomean(graph),
        _lowest(
            f"≥ {LONG_SPEEDUP}x at L ≥ {LONG_SEQLEN // 1024}K with dstate {LARGE_DSTATE} (graph)",
            long,
            LONG_SPEEDUP,
        ),
        _peak(df, meta, candidate),
    ]


def _lowest(goal: str, table: pd.DataFrame, floor: float) -> Target:
    """Met when every point of `table` is timed and the lowest speedup reaches `floor`."""
    timed = table[table["timed"]]
    if timed.empty:
        return Target(goal, "no point timed", None)
    low, high = timed.loc[timed["speedup"].idxmin()], timed["speedup"].max()
    measured = (
        f"{markdown.ratio(low['speedup'])}–{markdown.ratio(high)} at {len(timed)} points, lowest "
        f"at {_label(low)}"
    )
    if len(timed) < len(table):
        measured += f"; {len(table) - len(timed)} not timed"
    return Target(goal, measured, bool(low["speedup"] >= floor) and len(timed) == len(table))


def _geomean(graph: pd.DataFrame) -> Target:
    goal = f"geomean ≥ {GEOMEAN_SPEEDUP}x (graph)"
    summary = analysis.summarize(graph)
    if not summary["timed"]:
        return Target(goal, "no point timed", None)
    measured = f"{markdown.ratio(summary['geomean'])} over {summary['timed']} points"
    return Target(goal, measured, summary["geomean"] >= GEOMEAN_SPEEDUP)


def _peak(df: pd.DataFrame, meta: dict, candidate: str) -> Target:
    """The candidate's best fraction of the measured bf16 rate among the points at the run's
    longest sequence length, FLOPs counted at the problem's chunk length."""
    goal = f"≥ {100 * PEAK_FRACTION:.0f} % of the measured bf16 matmul rate at the longest L"
    graph = df[df["mode"] == "graph"]
    if graph.empty:
        return Target(goal, "no graph-mode rows", None)
    longest = graph[graph["seqlen"] == graph["seqlen"].max()]
    fraction, point = best_fraction_of_peak(longest, meta, candidate, "graph")
    if math.isnan(fraction):
        return Target(goal, "no measured bf16 rate or bf16 point", None)
    row = longest[longest["point"] == point].iloc[0]
    return Target(goal, f"{100 * fraction:.1f} % at {_label(row)}", fraction >= PEAK_FRACTION)


def _label(row: pd.Series) -> str:
    return markdown.point_label(row, [c for c in ("seqlen", "nheads", "dstate") if c in row])


def section(df: pd.DataFrame, meta: dict, baseline: str, candidate: str) -> str:
    """report.md's "Targets" section."""
    rows = [
        (t.goal, t.measured, "—" if t.met is None else "met" if t.met else "**missed**")
        for t in evaluate(df, meta, baseline, candidate)
    ]
    intro = (
        "The performance issue's targets for the default sweep on the H200, with speedups "
        f"({baseline} time / {candidate} time) measured in this run."
    )
    return (
        "## Targets\n\n" + intro + "\n\n" + markdown.table(("target", "this run", "status"), rows)
    )
