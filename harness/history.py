"""A series of runs of one sweep read together: the numbers a closing note quotes, from one command.

    python -m harness.history RUN [RUN ...] [--mode graph] [--baseline triton] [--candidate cutile]

RUNs (run directories or results Parquet files) are given oldest first. It prints markdown:
- per run, the in-run speedup (min / geomean / max, analysis.speedups) and each provider's best
  fraction of the measured bf16 rate (each row's worker's own, harness.peaks), counted with the
  FLOPs of the problem as posed (`problem.flops` at the point's chunk_size). Under
  chunk_policy=fastest a provider may have run a shorter chunk, and the rows' frac_peak_flops
  count that chunk's (fewer) FLOPs;
- for the last run, the speedup against the fastest baseline time any listed run recorded at each
  point. One run's speedups carry the luck of the baseline's autotune picks in that process; this
  one does not reward a slow pick;
- for the last run, each provider's median time against the run before it: which side moved;
  split into the points whose launch changed and those whose did not (the chunk length each
  provider ran, and cuTile's launch config from its tuning column). The latter moved only by
  drift (another node, its clocks, the kernels' code if it changed between the commits), which
  the former carry too; runs on GPUs with no uuid in common are named, as that drift is then the
  node's;
- the runs measured with settings other than the last run's (gate.settings_keys of the mode:
  autotuning, chunk policy, L2, seed, and in eager mode the eager sample order), which the
  fastest times include and whose time changes are not the code's alone;
- for the last run, each provider's chunk screening times against the run before it, per chunk
  length screened (chunk_policy=fastest). The length a provider did not run is timed only
  there, so a change that slows that length shows nowhere else (docs/performance.md, change 49).

Exit status 0, or 2 with a one-line message on stderr for input that cannot be read together
(an unreadable run, runs measured on different GPU models, a run without rows in the mode).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from harness import analysis, markdown, providers, records, stats
from harness.config import planned_points
from harness.gate import GateInputError, Run, differing_keys, load, setting, settings_keys


def _timed(table: pd.DataFrame, provider: str, mode: str) -> pd.DataFrame:
    rows = table[(table["provider"] == provider) & (table["mode"] == mode)]
    return rows[rows["status"] == "ok"].drop_duplicates("point", keep="last").set_index("point")


def fastest_times(tables: list[pd.DataFrame], provider: str, mode: str) -> pd.Series:
    """Per point, the lowest median time (ms) the provider recorded in any of the tables."""
    medians = [_timed(t, provider, mode)["median_ms"] for t in tables]
    return pd.concat(medians, axis=1).min(axis=1)


def against_fastest(
    last: pd.DataFrame,
    tables: list[pd.DataFrame],
    baseline: str,
    candidate: str,
    mode: str,
) -> pd.Series:
    """Per point timed by the candidate in `last`: the fastest baseline time of all `tables` over
    the candidate's time in `last`."""
    cand = _timed(last, candidate, mode)["median_ms"]
    return (fastest_times(tables, baseline, mode).reindex(cand.index) / cand).dropna()


def above_fastest(
    last: pd.DataFrame, tables: list[pd.DataFrame], provider: str, mode: str
) -> pd.Series:
    """Per point timed by the provider in `last`: its time there over the fastest it recorded in
    any of `tables`. Near 1 everywhere, `last` drew the provider's best picks; the baseline's
    excess is what its in-run speedup gains over the speedup against the fastest."""
    own = _timed(last, provider, mode)["median_ms"]
    return (own / fastest_times(tables, provider, mode).reindex(own.index)).dropna()


def time_change(previous: pd.DataFrame, last: pd.DataFrame, provider: str, mode: str) -> pd.Series:
    """Per point timed in both runs: the provider's median time in `last` over `previous`."""
    before = _timed(previous, provider, mode)["median_ms"]
    return (_timed(last, provider, mode)["median_ms"] / before).dropna()


def launch_configs(table: pd.DataFrame, provider: str, mode: str) -> pd.Series:
    """Per point: what the provider's rows record of its launch, as a dict: the chunk length it
    ran (the point's own where none is recorded: no chunk screening) and, where the tuning column
    holds one, its `config` (cuTile's; Triton records only its chunk length)."""
    configs = {}
    for point, row in _timed(table, provider, mode).iterrows():
        recorded = json.loads(row["tuning"] or "{}")
        chunk = recorded.get("chunk_size") or int(row["chunk_size"])
        configs[point] = {**(recorded.get("config") or {}), "chunk_size": chunk}
    return pd.Series(configs, dtype=object)


def same_launch(before: dict, after: dict, defaults: dict | None = None) -> bool:
    """Whether two recorded launch configs agree on every field either records. A field only one
    records is a knob added between the runs, which the older run is taken to have launched at its
    default: it counts as changed only where the newer run set it otherwise (change 76's
    state_cb=1), and a field with no known default is left out."""
    defaults = defaults or {}
    for key in before.keys() | after.keys():
        if key in before and key in after:
            if before[key] != after[key]:
                return False
        elif key in defaults and before.get(key, after.get(key)) != defaults[key]:
            return False
    return True


def time_change_by_config(
    previous: pd.DataFrame, last: pd.DataFrame, provider: str, mode: str
) -> dict[str, pd.Series]:
    """time_change split into {"launch changed": ..., "launch unchanged": ...} by the launch
    configs both runs record (launch_configs)."""
    ratio = time_change(previous, last, provider, mode)
    before, after = launch_configs(previous, provider, mode), launch_configs(last, provider, mode)
    both = ratio.index.intersection(before.index).intersection(after.index)
    if both.empty:
        return {}
    defaults = _launch_defaults(provider)
    same = pd.Series(
        [same_launch(before[p], after[p], defaults) for p in both], index=both, dtype=bool
    )
    return {"launch changed": ratio[both][~same], "launch unchanged": ratio[both][same]}


def _launch_defaults(provider: str) -> dict:
    """The registered provider's launch-config defaults; none for a name not registered (a run
    recorded by a provider since renamed)."""
    try:
        found = providers.get(provider).launch_defaults
    except providers.ProviderError:
        return {}
    return found() if found else {}


def gpu_uuids(meta: dict) -> set[str]:
    """The uuids of the GPUs that measured a run: its workers', else its own environment's."""
    envs = [w.get("env") or {} for w in meta.get("workers") or []] or [meta.get("env") or {}]
    return {str(env["gpu"]["uuid"]) for env in envs if (env.get("gpu") or {}).get("uuid")}


def screen_times(table: pd.DataFrame, provider: str, mode: str) -> pd.DataFrame:
    """Per point (rows) and chunk length (columns, as in the tuning column): the provider's
    screening median in ms (harness/runner.py, chunk_policy=fastest). A length whose screening
    failed, and a run without screening, leave no value."""
    tunings = _timed(table, provider, mode)["tuning"]
    screens = {
        point: {
            chunk: ms
            for chunk, ms in (json.loads(tuning or "{}").get("chunk_screen_ms") or {}).items()
            if isinstance(ms, int | float)
        }
        for point, tuning in tunings.items()
    }
    return pd.DataFrame.from_dict(screens, orient="index")


def screen_change(
    previous: pd.DataFrame, last: pd.DataFrame, provider: str, mode: str
) -> dict[str, pd.Series]:
    """Per chunk length screened in both runs: per point, the provider's screening time in `last`
    over `previous`."""
    before, after = screen_times(previous, provider, mode), screen_times(last, provider, mode)
    changes = {}
    for chunk in sorted(set(before.columns) & set(after.columns), key=int):
        ratio = (after[chunk] / before[chunk].reindex(after.index)).dropna()
        if not ratio.empty:
            changes[chunk] = ratio
    return changes


def best_fraction_of_peak(
    table: pd.DataFrame, meta: dict, provider: str, mode: str, highest: bool = False
) -> tuple[float, str]:
    """(fraction of the bf16 rate, point) at the provider's best bf16 point, FLOPs counted at the
    problem's own chunk_size, each row divided by the rate of the worker that measured it
    (harness.peaks.row_rate), or with `highest` by the highest rate of the run on that GPU model;
    (NaN, "") without a measured rate or a bf16 row."""
    fractions = analysis.bf16_fraction(_timed(table, provider, mode), meta, highest).dropna()
    if fractions.empty:
        return float("nan"), ""
    return float(fractions.max()), str(fractions.idxmax())


def _timed_text(summary: dict, planned: list[str] | None) -> str:
    """Points timed by both providers out of those in the run, and out of the sweep's where the
    run holds fewer than its sweep asks for (a run cut short)."""
    text = f"{summary['timed']}/{summary['points']}"
    if planned is not None and len(planned) > summary["points"]:
        text += f" of {len(planned)}"
    return text


def render(runs: list[Run], mode: str, baseline: str, candidate: str) -> str:
    """The markdown report of a series of loaded runs, oldest first."""
    gpus = sorted({name for run in runs for name in run.gpus})
    if len(gpus) > 1:
        raise GateInputError(f"runs measured on different GPU models ({', '.join(gpus)})")
    for run in runs:
        if not (run.table["mode"] == mode).any():
            raise GateInputError(f"{run.path}: no rows in {mode} mode")
        problem = analysis.pair_problem(run.table, baseline, candidate, need_rows=True)
        if problem:
            raise GateInputError(f"{run.path}: {problem}")
    sides = (candidate, baseline)
    rows = []
    for run in runs:
        summary = analysis.summarize(analysis.speedups(run.table, baseline, candidate, mode))
        rows.append(
            (
                f"`{run.meta.get('run_id', '')}`",
                run.describe()["commit"],
                _timed_text(summary, planned_points(run.meta)),
                markdown.ratio(summary["min"]),
                markdown.ratio(summary["geomean"]),
                markdown.ratio(summary["max"]),
                *(_peak_text(run, side, mode) for side in sides),
            )
        )
    header = ("run", "commit", "timed", "min", "geomean", "max", *(f"{s} peak" for s in sides))
    last, tables = runs[-1], [run.table for run in runs]
    lines = [
        f"# {len(runs)} runs, {mode} mode: speedup = {baseline} time / {candidate} time",
        "",
        markdown.table(header, rows),
        *_series_notes(runs),
        "",
        "peak: the best point's rate, its problem's FLOPs (at the problem's chunk_size) over the "
        "median time, as a share of the bf16 matmul rate measured by the worker that timed it "
        "(the run's first worker's for runs recorded before workers measured their own).",
        "",
        f"## `{last.meta.get('run_id', '')}` against the fastest {baseline} of all {len(runs)}",
        "",
        _spread(against_fastest(last.table, tables, baseline, candidate, mode), last.table),
        "",
        _excess(above_fastest(last.table, tables, baseline, mode), last.table, baseline),
    ]
    lines += _settings_section(runs, mode)
    if len(runs) > 1:
        lines += _time_section(runs[-2], last, sides, mode)
        lines += _screening_section(runs[-2], last, sides, mode)
    return "\n".join(lines) + "\n"


def _series_notes(runs: list[Run]) -> list[str]:
    """Warnings about the series itself (empty if none): runs not listed oldest first, a run
    listed twice, runs of another sweep than the last run's, whose comparisons with it cover
    only the points they share."""
    notes = []
    starts = [
        pd.to_datetime(run.table["timestamp"], utc=True, format="ISO8601", errors="coerce").min()
        for run in runs
    ]
    names = [f"`{run.meta.get('run_id', '')}`" for run in runs]
    for i in range(1, len(runs)):
        if starts[i] < starts[i - 1]:
            notes.append(
                f"{names[i]} was first measured before {names[i - 1]}, listed before it: the "
                "runs are read oldest first, and the last one is compared with the others."
            )
    seen: dict[tuple, str] = {}
    for run, name, start in zip(runs, names, starts, strict=True):
        identity = (run.meta.get("run_id"), run.meta.get("created"), start, len(run.table))
        if identity in seen:
            notes.append(f"{name} is listed twice.")
        seen[identity] = name
    planned = planned_points(runs[-1].meta)
    if planned is not None:
        for run, name in zip(runs[:-1], names[:-1], strict=True):
            own = planned_points(run.meta)
            if own is not None and set(own) != set(planned):
                shared = len(set(own) & set(planned))
                notes.append(
                    f"{name} is a run of another sweep ({len(own)} points, {shared} of them in "
                    f"the last run's {len(planned)}); it is compared only where they share."
                )
    return ["", *(f"Note: {note}" for note in notes)] if notes else []


def _settings_section(runs: list[Run], mode: str) -> list[str]:
    """Markdown lines naming the runs measured with settings other than the last run's, grouped
    by what differs; none where all agree."""
    last = runs[-1]
    groups: dict[str, list[str]] = {}
    for run in runs[:-1]:
        keys = differing_keys(run.meta, last.meta, mode)
        differ = [f"{k}={setting(run.meta, k)!r}" for k in keys]
        if differ:
            groups.setdefault(", ".join(differ), []).append(f"`{run.meta.get('run_id', '')}`")
    if not groups:
        return []
    own = ", ".join(f"{key}={setting(last.meta, key)!r}" for key in settings_keys(mode))
    return [
        "",
        "## Settings",
        "",
        f"The last run's: {own}. Runs measured otherwise (the fastest times above include them; "
        "a time change from one of them is not the code's alone):",
        "",
        *(f"- {', '.join(ids)}: {differ}" for differ, ids in groups.items()),
    ]


def _time_section(previous: Run, last: Run, sides: tuple[str, str], mode: str) -> list[str]:
    """Markdown lines of each provider's time against the run before, and, where some point's
    launch changed, apart for those points and the others."""
    rows = []
    for side in sides:
        rows.append(
            (side, *_spread_cells(time_change(previous.table, last.table, side, mode), last.table))
        )
        split = time_change_by_config(previous.table, last.table, side, mode)
        if split and not split["launch changed"].empty:
            for label, ratio in split.items():
                rows.append((f"{side}, {label}", *_spread_cells(ratio, last.table)))
    lines = ["", f"## Time against `{previous.meta.get('run_id', '')}`", ""]
    before, after = gpu_uuids(previous.meta), gpu_uuids(last.meta)
    if before and after and not before & after:
        lines += [
            f"The two runs share no GPU ({', '.join(sorted(before))} against "
            f"{', '.join(sorted(after))}): the points whose config did not change show the "
            "nodes' difference.",
            "",
        ]
    header = ("provider", "points", "min", "median", "geomean", "max")
    return [*lines, markdown.table(header, rows)]


def _screening_section(previous: Run, last: Run, sides: tuple[str, str], mode: str) -> list[str]:
    """Markdown lines of each provider's chunk screening times against the run before; none
    where neither run screened."""
    rows = [
        (side, chunk, *_spread_cells(ratio, last.table))
        for side in sides
        for chunk, ratio in screen_change(previous.table, last.table, side, mode).items()
    ]
    if not rows:
        return []
    return [
        "",
        f"## Chunk screening against `{previous.meta.get('run_id', '')}`",
        "",
        "Each provider's short screening of every chunk length it may run: the length it did "
        "not run is timed only here.",
        "",
        markdown.table(("provider", "chunk", "points", "min", "median", "geomean", "max"), rows),
    ]


def _peak_text(run: Run, provider: str, mode: str) -> str:
    fraction, point = best_fraction_of_peak(run.table, run.meta, provider, mode)
    if not point:
        return "—"
    return f"{100 * fraction:.1f} % ({_label(run.table, point)})"


def _label(table: pd.DataFrame, point: str) -> str:
    row = table[table["point"] == point].iloc[0]
    return markdown.point_label(row, [c for c in ("seqlen", "nheads", "dstate") if c in row])


def _spread_cells(values: pd.Series, table: pd.DataFrame) -> tuple[str, str, str, str, str]:
    """(points, min with its point, median, geomean, max with its point) of per-point time
    ratios."""
    if values.empty:
        return "0", "—", "—", "—", "—"
    low, high = values.idxmin(), values.idxmax()
    return (
        str(len(values)),
        f"{markdown.change(values[low])} ({_label(table, low)})",
        markdown.change(values.median()),
        markdown.change(stats.geomean(values)),
        f"{markdown.change(values[high])} ({_label(table, high)})",
    )


def _spread(speedups: pd.Series, table: pd.DataFrame) -> str:
    """One line: min (point) / geomean / max (point) of per-point speedups."""
    if speedups.empty:
        return "No point timed."
    low, high = speedups.idxmin(), speedups.idxmax()
    return (
        f"{len(speedups)} points: min {speedups[low]:.3f}x ({_label(table, low)}), geomean "
        f"{stats.geomean(speedups):.3f}x, max {speedups[high]:.3f}x ({_label(table, high)})."
    )


def _excess(ratios: pd.Series, table: pd.DataFrame, provider: str) -> str:
    """One line: how far the provider's times in the last run lie above its fastest."""
    if ratios.empty:
        return f"No point timed by {provider}."
    worst = ratios.idxmax()
    return (
        f"{provider}'s own time in this run against its fastest of all runs: "
        f"{markdown.change(stats.geomean(ratios))} in the geomean, at most "
        f"{markdown.change(ratios[worst])} ({_label(table, worst)})."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.history",
        description="Read a series of runs of one sweep together (oldest first).",
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run dirs or results Parquet files")
    parser.add_argument("--mode", default="graph", choices=records.MODES)
    parser.add_argument("--baseline", default="triton", help="provider timed against (triton)")
    parser.add_argument("--candidate", default="cutile", help="provider timed (cutile)")
    args = parser.parse_args(argv)
    try:
        runs = [load(path, "run") for path in args.runs]
        text = render(runs, args.mode, args.baseline, args.candidate)
    except GateInputError as exc:
        print(f"history: unusable input: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
