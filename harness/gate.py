"""Regression gate: compare a candidate run's speedup of one provider over another (cuTile over
Triton by default) with a baseline run's.

    python -m harness.gate --baseline RUN --candidate RUN [--mode graph] [--tolerance 0.05]
        [--provider cutile] [--against triton] [--metric speedup|PROVIDER-time] [--floor X]
        [--require-points all|KEY,KEY|FILE] [--allow-different-gpus]
        [--allow-different-settings] [--fail-on-ambiguous] [--report-md PATH] [--report-json PATH]

The speedup is --against's time over --provider's (by default triton's over cutile's; any two
registered providers both runs timed). Verdict per point, from each run's speedup S and its
interval [lo, hi] (analysis.speedups: the extreme-end combination of the two recorded 95 % CIs of
the median), change = S_cand / S_base. With --metric PROVIDER-time (cutile-time by default), S is
the provider's own rate, 1 / its median time, with the interval of its recorded CI, so Triton's
run-to-run changes (its per-point autotune picks) cannot fail a point; a point is then timed when
the provider's status is ok, whatever the other's:

    slower     candidate interval entirely below the baseline's (hi_cand < lo_base) and
               change < 1 - tolerance                                      -> fails
    faster     candidate interval entirely above (lo_cand > hi_base) and change > 1 + tolerance
    same       |change - 1| <= tolerance (whatever the intervals), or the intervals are disjoint
               but the shift is within tolerance (real but too small to matter)
    ambiguous  the intervals overlap but the estimate moved beyond tolerance: the runs are too
               noisy to tell; reported, fails only with --fail-on-ambiguous, and only
               downwards (change < 1)
    broken     timed (status ok) in the baseline, not in the candidate      -> fails
    fixed / untimed / new / missing   not timed in the baseline / in neither / point only in the
               candidate / point only in the baseline (listed; missing fails only if required)

So a move beyond tolerance fails only when the noise the runs measured cannot explain it, and a
statistically clear move smaller than tolerance does not fail. Each point shows both runs' SM clock
as its timing ended (gpu_clocks): a point slowed by a power-capped clock fails all the same, but
the reader sees why. A point without an interval in either run (fewer than 6 repetitions: the
timing now always takes min_reps, at least 6, but older runs may lack one) is judged by its
estimate alone: beyond tolerance it is slower or faster, never ambiguous.
Floor (--floor X): a candidate point fails when its whole speedup interval lies below X
(hi < X, or the estimate < X where there is no interval); a point estimate below X with hi >= X
is flagged "near" without failing.

Exit status: 0 pass; 1 regression (slower, broken, below floor, and with --fail-on-ambiguous a
downward ambiguous point); 2 unusable input (missing or unreadable file, foreign Parquet, a
schema version the harness cannot read, a run without rows in the mode, without a named
provider's rows or without GPU names, one provider named twice, a metric other than speedup or
PROVIDER-time, different GPUs (between the runs, or within one run whose rows name several GPU
models), different measurement settings (settings_keys(mode)), required points missing, no
comparable points), with a one-line message on stderr, and for a bad flag (a report path that
is a folder) argparse's usage and error. --allow-different-gpus lets both kinds of GPU difference
through; --allow-different-settings the settings.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness import analysis, markdown, records
from harness.config import LEGACY_SETTINGS

FAILING = ("slower", "broken")
#: What a verdict compares: the speedup, or the provider's own time, "<provider>-time" (module doc).
SPEEDUP = "speedup"
TIMED_VERDICTS = ("same", "faster", "slower", "ambiguous")
#: Settings of meta["config"] (dotted paths into runner.MEASUREMENT_KEYS) whose difference makes two
#: runs' speedups measure different things: what cuTile and Triton run (tune, triton_autotune,
#: chunk_policy), the cache state they start from (timing.l2) and the inputs (seed). The other
#: measurement settings are left out on purpose: the stopping rule (timing.warmup, min_reps,
#: max_reps, max_seconds, ci_target, kernels_batch) only sets how precisely the same quantity is
#: measured, which the recorded CIs carry; timing.flush_mib leaves the L2 as cold as l2 says (the
#: runner flushes at least twice the L2); timing.modes only says which modes exist, and the compared
#: mode must have rows in both runs; check.* decides how answers are judged, not timed.
SETTINGS_KEYS = ("tune", "triton_autotune", "chunk_policy", "timing.l2", "seed")
#: Settings that change what one mode measures, compared only in that mode: in eager mode each
#: sample follows the other provider's call or the provider's own (up to 90 µs apart on the H200).
MODE_SETTINGS_KEYS = {"eager": ("timing.eager_after_self",)}
VERDICT_ORDER = (
    "slower",
    "broken",
    "ambiguous",
    "missing",
    "faster",
    "fixed",
    "new",
    "untimed",
    "same",
)


class GateInputError(Exception):
    """An input the gate cannot compare; the message is the one line printed (exit 2)."""


@dataclass
class Run:
    """One loaded run, as the gate needs it."""

    label: str
    path: Path
    table: pd.DataFrame
    meta: dict

    @property
    def gpus(self) -> list[str]:
        return records.gpu_names(self.table)

    def describe(self) -> dict:
        """Path, id, GPUs and the commits its points were measured at ("commit": their text)."""
        commits = records.measured_commits(self.table, self.meta)
        return {
            "path": str(self.path),
            "run_id": self.meta.get("run_id", ""),
            "gpus": self.gpus,
            "commit": markdown.commits(commits),
            "commits": commits,
        }


@dataclass
class Outcome:
    """The gate's result: per-point table, exit code and the one-line message."""

    exit_code: int
    message: str
    points: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)


def load(path: Path, label: str) -> Run:
    """Load a run directory or Parquet file; any problem becomes a GateInputError."""
    if not path.exists():
        raise GateInputError(f"{label} {path}: no such file or directory")
    try:
        table, meta = records.load_run(path)
    except Exception as exc:  # records' own errors and pyarrow's: all mean "unusable input"
        raise GateInputError(f"{label} {path}: not a readable ssdbench run ({exc})") from None
    version = meta.get("schema_version") if isinstance(meta, dict) else None
    if version not in records.READABLE_VERSIONS:
        raise GateInputError(
            f"{label} {path}: schema version {version!r}, this gate reads versions "
            f"{', '.join(map(str, records.READABLE_VERSIONS))}"
        )
    lacking = sorted(set(records.COLUMNS) - set(table.columns))
    if lacking:
        raise GateInputError(f"{label} {path}: results lack column(s) {', '.join(lacking)}")
    return Run(label, path, table, meta)


def setting(meta: dict, key: str) -> object:
    """The value of a dotted settings_keys(mode) path in a run's meta["config"]; where absent, the
    value runs had before the setting existed (config.LEGACY_SETTINGS), else None."""
    value: object = meta.get("config")
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return LEGACY_SETTINGS.get(key) if value is None else value


def settings_keys(mode: str) -> tuple[str, ...]:
    """The settings two runs must share for their `mode` times to measure the same thing."""
    return SETTINGS_KEYS + MODE_SETTINGS_KEYS.get(mode, ())


def differing_keys(one: dict, other: dict, mode: str) -> list[str]:
    """The settings_keys(mode) whose values differ between two runs' metas."""
    return [k for k in settings_keys(mode) if setting(one, k) != setting(other, k)]


def different_settings(baseline: Run, candidate: Run, mode: str) -> list[str]:
    """'key=<baseline value> in the baseline, <candidate value> in the candidate' per differing
    settings_keys(mode) entry."""
    b, c = baseline.meta, candidate.meta
    return [
        f"{k}={setting(b, k)!r} in the baseline, {setting(c, k)!r} in the candidate"
        for k in differing_keys(b, c, mode)
    ]


def verdict(
    base: float,
    base_low: float,
    base_high: float,
    cand: float,
    cand_low: float,
    cand_high: float,
    tolerance: float,
) -> str:
    """same / faster / slower / ambiguous for one point timed in both runs (module doc)."""
    change = cand / base
    if abs(change - 1.0) <= tolerance:
        return "same"
    if any(math.isnan(b) for b in (base_low, base_high, cand_low, cand_high)):
        return "slower" if change < 1.0 else "faster"  # no interval: judged by the estimate
    if cand_high < base_low:
        return "slower"
    if cand_low > base_high:
        return "faster"
    return "ambiguous"


def floor_flag(cand: float, cand_high: float, floor: float | None) -> str:
    """'below' (fails) when the whole interval is under the floor, 'near' when only the estimate."""
    if floor is None or math.isnan(cand):
        return ""
    if (cand if math.isnan(cand_high) else cand_high) < floor:
        return "below"
    return "near" if cand < floor else ""


def time_metric(provider: str) -> str:
    """The metric that judges `provider`'s own time (cutile-time for cutile)."""
    return f"{provider}-time"


def with_metric(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """A speedups() table with the compared value, its interval and whether it was timed:
    `value`, `value_low`, `value_high`, `value_timed` (higher value: the provider better off)."""
    table = table.copy()
    if metric == SPEEDUP:
        table["value"], table["value_low"] = table["speedup"], table["speedup_low"]
        table["value_high"], table["value_timed"] = table["speedup_high"], table["timed"]
        return table
    timed = table["candidate_status"] == "ok"
    table["value"] = (1.0 / table["candidate_median_ms"]).where(timed)
    table["value_low"] = (1.0 / table["candidate_ci_high_ms"]).where(timed)
    table["value_high"] = (1.0 / table["candidate_ci_low_ms"]).where(timed)
    table["value_timed"] = timed
    return table


def compare(
    base: pd.DataFrame,
    cand: pd.DataFrame,
    tolerance: float,
    floor: float | None,
    metric: str = SPEEDUP,
) -> pd.DataFrame:
    """Point-by-point comparison of two speedups() tables (outer join on the point key), the
    verdict on `metric` (SPEEDUP or time_metric(provider)); `change` is that metric's candidate
    over baseline value; `<provider>_time_change` and `<against>_time_change` say which side
    moved (the providers are the tables' `candidate` and `baseline` columns)."""
    provider, against = base["candidate"].iloc[0], base["baseline"].iloc[0]
    shape = [*analysis.SHAPE_COLUMNS, "dtype"]
    keep = [
        "point",
        *shape,
        "value",
        "value_low",
        "value_high",
        "value_timed",
        "speedup",
        "speedup_low",
        "speedup_high",
        "baseline_median_ms",
        "candidate_median_ms",
        "ci_wide",
        "baseline_status",
        "candidate_status",
        "candidate_error",
    ]
    joined = with_metric(base, metric)[keep].merge(
        with_metric(cand, metric)[keep],
        on="point",
        how="outer",
        suffixes=("_b", "_c"),
        indicator="presence",
    )
    out = pd.DataFrame(
        {
            "point": joined["point"],
            **{c: joined[f"{c}_b"].combine_first(joined[f"{c}_c"]) for c in shape},
            "baseline_speedup": joined["speedup_b"],
            "baseline_low": joined["speedup_low_b"],
            "baseline_high": joined["speedup_high_b"],
            "candidate_speedup": joined["speedup_c"],
            "candidate_low": joined["speedup_low_c"],
            "candidate_high": joined["speedup_high_c"],
            "change": joined["value_c"] / joined["value_b"],
            # Which side moved: each provider's median in the candidate run over the baseline's.
            # A speedup can drop because Triton got faster, which a gate on speedups rightly
            # flags but a reader must not take for a slower cuTile.
            f"{provider}_time_change": joined["candidate_median_ms_c"]
            / joined["candidate_median_ms_b"],
            f"{against}_time_change": joined["baseline_median_ms_c"]
            / joined["baseline_median_ms_b"],
            "ci_wide": joined["ci_wide_b"].fillna(False).astype(bool)
            | joined["ci_wide_c"].fillna(False).astype(bool),
            "baseline_statuses": _statuses(joined, "_b"),
            "candidate_statuses": _statuses(joined, "_c"),
            "candidate_error": joined["candidate_error_c"].fillna(""),
        }
    )
    out["verdict"] = [_point_verdict(row, tolerance) for row in joined.itertuples(index=False)]
    out["floor"] = [
        floor_flag(c, hi, floor)
        for c, hi in zip(out["candidate_speedup"], out["candidate_high"], strict=True)
    ]
    out["fails"] = out["verdict"].isin(FAILING) | (out["floor"] == "below")
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    out["_rank"] = out["verdict"].map(rank) - out["fails"].astype(int) * len(rank)
    order = ["_rank", *analysis.SHAPE_COLUMNS, "point"]
    return out.sort_values(order, kind="stable").drop(columns="_rank").reset_index(drop=True)


def _statuses(joined: pd.DataFrame, suffix: str) -> pd.Series:
    """'against/provider' status pair of one run ('triton/cutile' by default), '' where the point
    is absent from it."""
    b, c = joined[f"baseline_status{suffix}"], joined[f"candidate_status{suffix}"]
    return (b.fillna("") + "/" + c.fillna("")).str.strip("/")


def _point_verdict(row, tolerance: float) -> str:
    if row.presence == "left_only":
        return "missing"
    if row.presence == "right_only":
        return "new"
    if row.value_timed_b and row.value_timed_c:
        return verdict(
            row.value_b,
            row.value_low_b,
            row.value_high_b,
            row.value_c,
            row.value_low_c,
            row.value_high_c,
            tolerance,
        )
    if row.value_timed_b:
        return "broken"
    return "fixed" if row.value_timed_c else "untimed"


def required_points(spec: str | None, baseline_points: list[str]) -> list[str]:
    """Points that must be in both runs: 'all' (the baseline's), a file (one key a line, # for
    comments) or a comma-separated list of point keys."""
    if not spec:
        return []
    if spec == "all":
        return baseline_points
    path = Path(spec)
    if path.is_file():
        lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
        return [line for line in lines if line]
    if "/" in spec or path.suffix == ".txt":  # point keys have neither
        raise GateInputError(f"--require-points {spec}: no such file")
    return [key.strip() for key in spec.split(",") if key.strip()]


def sm_clocks(table: pd.DataFrame, mode: str) -> pd.Series:
    """Per point, the SM clock (MHz) read as the mode's timing ended (the median over workers):
    a power-capped GPU slows a point without any code changing, and the verdict cannot tell."""
    read = analysis.gpu_clocks(table)
    return read[read["mode"] == mode].groupby("point")["sm_mhz"].median()


def _clock_change(row, arrow: str = "->") -> str:
    """'1950 -> 1755 MHz' where both runs read the clock, else ''."""
    before, after = row.baseline_sm_mhz, row.candidate_sm_mhz
    return (
        "" if math.isnan(before) or math.isnan(after) else f"{before:.0f} {arrow} {after:.0f} MHz"
    )


def run_gate(
    baseline: Run,
    candidate: Run,
    mode: str = "graph",
    tolerance: float = 0.05,
    floor: float | None = None,
    require: str | None = None,
    allow_different_gpus: bool = False,
    fail_on_ambiguous: bool = False,
    allow_different_settings: bool = False,
    metric: str = SPEEDUP,
    provider: str = "cutile",
    against: str = "triton",
) -> Outcome:
    """Compare two loaded runs on `provider` against `against`; GateInputError for what makes
    them incomparable."""
    if provider == against:
        raise GateInputError(f"--provider and --against are both {provider}: name two providers")
    if metric not in (SPEEDUP, time_metric(provider)):
        raise GateInputError(
            f"--metric {metric}: use {SPEEDUP} or {time_metric(provider)} (the time of --provider)"
        )
    notes = []
    for run in (baseline, candidate):
        rows = run.table[run.table["mode"] == mode]
        if rows.empty:
            modes = ", ".join(sorted(run.table["mode"].unique())) or "none"
            raise GateInputError(f"{run.label} {run.path}: no rows in {mode} mode (has: {modes})")
        for name in (provider, against) if metric == SPEEDUP else (provider,):
            if not (rows["provider"] == name).any():
                timed = ", ".join(sorted(rows["provider"].unique()))
                raise GateInputError(
                    f"{run.label} {run.path}: no {name} rows in {mode} mode (providers: {timed}); "
                    "name the providers to compare with --provider and --against"
                )
        if not run.gpus:
            raise GateInputError(f"{run.label} {run.path}: its rows record no GPU name")
        if len(run.gpus) > 1:
            mixed = f"{run.label} {run.path} mixes GPUs ({', '.join(run.gpus)})"
            if not allow_different_gpus:
                raise GateInputError(f"{mixed}; pass --allow-different-gpus to compare anyway")
            notes.append(f"Mixed GPUs allowed: {mixed}.")
    if baseline.gpus != candidate.gpus:
        pair = f"baseline {', '.join(baseline.gpus)} vs candidate {', '.join(candidate.gpus)}"
        if not allow_different_gpus:
            raise GateInputError(
                f"runs measured on different GPUs ({pair}); "
                "pass --allow-different-gpus to compare anyway"
            )
        notes.append(f"Different GPUs allowed: {pair}.")
    differences = "; ".join(different_settings(baseline, candidate, mode))
    if differences:
        if not allow_different_settings:
            raise GateInputError(
                f"runs measured with different settings ({differences}); "
                "pass --allow-different-settings to compare anyway"
            )
        notes.append(f"Different settings allowed: {differences}.")
    base_sp = analysis.speedups(baseline.table, against, provider, mode)
    cand_sp = analysis.speedups(candidate.table, against, provider, mode)
    required = required_points(require, base_sp["point"].tolist())
    for run, sp in ((baseline, base_sp), (candidate, cand_sp)):
        absent = [p for p in required if p not in set(sp["point"])]
        if absent:
            more = f" and {len(absent) - 3} more" if len(absent) > 3 else ""
            raise GateInputError(
                f"{run.label} lacks {len(absent)} required point(s) in {mode} mode: "
                f"{', '.join(absent[:3])}{more}"
            )
    points = compare(base_sp, cand_sp, tolerance, floor, metric)
    for side, run in (("baseline", baseline), ("candidate", candidate)):
        points[f"{side}_sm_mhz"] = points["point"].map(sm_clocks(run.table, mode))
    shared = points[~points["verdict"].isin(("missing", "new"))]
    if shared.empty:
        raise GateInputError(f"no point in common between the runs in {mode} mode")
    down = (points["verdict"] == "ambiguous") & (points["change"] < 1.0)
    failing = points["fails"] | (fail_on_ambiguous & down)
    points["fails"] = failing
    timed = int(points["verdict"].isin(TIMED_VERDICTS).sum())
    if not failing.any() and timed == 0:
        who = "both providers" if metric == SPEEDUP else provider
        raise GateInputError(f"no point has {who} timed (status ok) in both runs in {mode} mode")
    counts = points["verdict"].value_counts()
    summary = ", ".join(f"{counts[v]} {v}" for v in VERDICT_ORDER if v in counts)
    below = int((points["floor"] == "below").sum())
    if below:
        summary += f", {below} below floor {floor:g}x"
    if failing.any():
        return Outcome(
            1, f"FAIL: {int(failing.sum())} point(s) regressed ({summary})", points, notes
        )
    return Outcome(0, f"PASS: {timed} point(s) compared ({summary})", points, notes)


def to_json(outcome: Outcome, settings: dict, runs: dict[str, dict]) -> dict:
    """Machine-readable result; NaN becomes null."""
    points = outcome.points
    rows = json.loads(points.to_json(orient="records")) if not points.empty else []
    verdict_name = {0: "pass", 1: "fail"}.get(outcome.exit_code, "error")
    return {
        "verdict": verdict_name,
        "exit_code": outcome.exit_code,
        "message": outcome.message,
        "settings": settings,
        "runs": runs,
        "notes": outcome.notes,
        "counts": points["verdict"].value_counts().to_dict() if not points.empty else {},
        "failing_points": points.loc[points["fails"], "point"].tolist() if not points.empty else [],
        "points": rows,
    }


def to_markdown(outcome: Outcome, settings: dict, runs: dict[str, dict]) -> str:
    """A PR comment: verdict first, then the points that need a look, then all points folded."""
    title = {0: "PASS", 1: "FAIL (regression)"}.get(outcome.exit_code, "ERROR (unusable input)")
    lines = [f"## ssdbench gate: {title}", "", outcome.message, ""]
    run_rows = [
        (
            side,
            f"`{r.get('run_id', '')}`",
            ", ".join(r.get("gpus", [])),
            r.get("commit", ""),
            r.get("path", ""),
        )
        for side, r in runs.items()
    ]
    lines += [markdown.table(("run", "run id", "GPU", "commit", "path"), run_rows), ""]
    floor = settings.get("floor")
    provider, against = settings["provider"], settings["against"]
    compared = (
        "the speedup"
        if settings["metric"] == SPEEDUP
        else f"{provider}'s own time ({against}'s is shown, not judged)"
    )
    lines.append(
        f"Speedup = {against} time / {provider} time, {settings['mode']} mode; "
        f"verdicts on {compared}; "
        f"tolerance {100 * settings['tolerance']:g} %; floor "
        f"{f'{floor:g}x' if floor else 'none'}. "
        "A point is *slower* only when its interval lies wholly below the baseline's and "
        "the drop exceeds the tolerance; *ambiguous* means the runs are too noisy to tell."
    )
    lines += [f"> {note}" for note in outcome.notes]
    points = outcome.points
    if points.empty:
        return "\n".join(lines) + "\n"
    clean_new = (points["verdict"] == "new") & (points["candidate_statuses"] == "ok/ok")
    attention = points[
        points["fails"]
        | ~(points["verdict"].isin(("same", "faster", "untimed")) | clean_new)
        | (points["floor"] != "")
    ]
    if not attention.empty:
        lines += ["", "### Points to look at", "", _points_table(attention, provider, against)]
    lines += [
        "",
        f"<details><summary>All {len(points)} points</summary>",
        "",
        _points_table(points, provider, against),
        "",
        "</details>",
    ]
    return "\n".join(lines) + "\n"


def _points_table(points: pd.DataFrame, provider: str, against: str) -> str:
    rows = []
    for _, r in points.iterrows():
        verdict_text = r["verdict"] + (" (fails)" if r["fails"] else "")
        if r["floor"]:
            verdict_text += f"; {r['floor']} floor"
        rows.append(
            (
                markdown.point_label(r, ("seqlen", "nheads", "dstate"))
                if pd.notna(r["seqlen"])
                else "",
                markdown.ratio(r["baseline_speedup"], r["baseline_low"], r["baseline_high"]),
                markdown.ratio(r["candidate_speedup"], r["candidate_low"], r["candidate_high"]),
                markdown.change(r["change"]),
                " / ".join(
                    markdown.change(r[f"{name}_time_change"]) for name in (provider, against)
                ),
                _clock_change(r, "→") or "—",
                verdict_text,
                f"{r['baseline_statuses'] or '—'} → {r['candidate_statuses'] or '—'}"
                + (
                    f": {markdown.first_line(r['candidate_error'], 80)}"
                    if r["candidate_error"]
                    else ""
                ),
                f"`{r['point']}`",
            )
        )
    header = (
        "point",
        "baseline speedup",
        "candidate speedup",
        "judged change",
        f"time change {provider} / {against}",
        "SM clock",
        "verdict",
        f"status ({against}/{provider})",
        "key",
    )
    return markdown.table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.gate", description="Compare the speedup of two runs."
    )
    parser.add_argument("--baseline", type=Path, required=True, help="run dir or results Parquet")
    parser.add_argument("--candidate", type=Path, required=True, help="run dir or results Parquet")
    parser.add_argument("--mode", default="graph", help="timing mode to compare (default graph)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="relative change of the judged metric that matters (default 0.05)",
    )
    parser.add_argument("--provider", default="cutile", help="provider whose speed is judged")
    parser.add_argument("--against", default="triton", help="provider it is timed against")
    parser.add_argument(
        "--metric",
        default=SPEEDUP,
        help=f"{SPEEDUP} (default: --against's time over --provider's) or PROVIDER-time "
        "(--provider's own time, e.g. cutile-time)",
    )
    parser.add_argument("--floor", type=float, help="fail a point whose speedup is surely below")
    parser.add_argument("--require-points", help="all | comma-separated point keys | file")
    parser.add_argument("--allow-different-gpus", action="store_true")
    parser.add_argument(
        "--allow-different-settings",
        action="store_true",
        help=f"compare runs that differ in {', '.join(SETTINGS_KEYS)} (and in eager mode "
        f"{', '.join(MODE_SETTINGS_KEYS['eager'])})",
    )
    parser.add_argument("--fail-on-ambiguous", action="store_true")
    parser.add_argument("--report-md", type=Path, help="write the markdown report here")
    parser.add_argument("--report-json", type=Path, help="write the JSON result here")
    args = parser.parse_args(argv)
    if not 0 <= args.tolerance < 1:
        parser.error(f"--tolerance must be in [0, 1), got {args.tolerance}")
    for flag, path in (("--report-md", args.report_md), ("--report-json", args.report_json)):
        if path is not None and (path.is_dir() or _file_among_parents(path)):
            parser.error(f"{flag} {path}: not a file path (a folder, or under a file)")
    settings = {
        "mode": args.mode,
        "tolerance": args.tolerance,
        "metric": args.metric,
        "provider": args.provider,
        "against": args.against,
        "floor": args.floor,
        "require_points": args.require_points,
        "allow_different_gpus": args.allow_different_gpus,
        "allow_different_settings": args.allow_different_settings,
        "fail_on_ambiguous": args.fail_on_ambiguous,
    }
    runs: dict[str, dict] = {
        "baseline": {"path": str(args.baseline)},
        "candidate": {"path": str(args.candidate)},
    }
    try:
        baseline = load(args.baseline, "baseline")
        runs["baseline"] = baseline.describe()
        candidate = load(args.candidate, "candidate")
        runs["candidate"] = candidate.describe()
        outcome = run_gate(
            baseline,
            candidate,
            args.mode,
            args.tolerance,
            args.floor,
            args.require_points,
            args.allow_different_gpus,
            args.fail_on_ambiguous,
            args.allow_different_settings,
            args.metric,
            args.provider,
            args.against,
        )
    except GateInputError as exc:
        outcome = Outcome(2, f"gate: unusable input: {exc}")
    _write(args.report_md, to_markdown(outcome, settings, runs))
    _write(args.report_json, json.dumps(to_json(outcome, settings, runs), indent=2) + "\n")
    if outcome.exit_code == 2:
        print(outcome.message, file=sys.stderr)
        return 2
    print(f"gate: {outcome.message}")
    for _, row in outcome.points[outcome.points["fails"]].iterrows():
        floor = f", {row.floor} floor" if row.floor else ""
        clock = _clock_change(row)
        clock = f"; SM {clock}" if clock else ""
        print(
            f"  {row.verdict}{floor}: {row.point}: {markdown.ratio(row.baseline_speedup)} -> "
            f"{markdown.ratio(row.candidate_speedup)} (time: {args.provider} "
            f"{markdown.change(row[f'{args.provider}_time_change'])}, {args.against} "
            f"{markdown.change(row[f'{args.against}_time_change'])}{clock})"
        )
    return outcome.exit_code


def _file_among_parents(path: Path) -> bool:
    """Whether a folder `path` would need to be made in is a file (mkdir would fail)."""
    return any(parent.exists() and not parent.is_dir() for parent in path.parents)


def _write(path: Path | None, text: str) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
