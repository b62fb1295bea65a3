"""Speedup and per-kernel tables built from a results table (see docs/architecture.md).

The report, the notebook and the gate all read speedups from here, so that one definition of
"speedup" and of its interval exists. Only rows with status "ok" count as timed.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from harness import stats
from harness.environment import HELD_REASONS, reading
from harness.peaks import highest_rate, row_rate
from harness.problem import SHAPE_FIELDS, Problem, flops

#: Columns that describe a point (its key and shape); carried unchanged into every table.
POINT_COLUMNS = ("point", *SHAPE_FIELDS, "dtype", "options")
_SORT_FIRST = ("seqlen", "nheads", "dstate")
#: Shape columns that may vary within a sweep, in the order tables are sorted by.
SHAPE_COLUMNS = (*_SORT_FIRST, *(f for f in SHAPE_FIELDS if f not in _SORT_FIRST))
_SIDE_COLUMNS = ("status", "error", "median_ms", "ci_low_ms", "ci_high_ms", "ci_wide")


def bf16_fraction(rows: pd.DataFrame, meta: dict, highest: bool = False) -> pd.Series:
    """Per row: the FLOPs of its problem as posed (at the point's chunk_size, whatever length
    the provider ran) per second of its median, over the bf16 rate of the worker that timed it
    (harness.peaks.row_rate), or with `highest` over the highest rate the run measured on that
    GPU model (harness.peaks.highest_rate); NaN for other dtypes, untimed rows or no measured
    rate. The targets, the history and the report's figure all count so: a provider that ran a
    shorter chunk, doing fewer FLOPs, is credited with the same work as one that did not (the
    rows' frac_peak_flops count the FLOPs at the length run)."""

    def fraction(row) -> float:
        if highest:
            rate = highest_rate(meta, "bf16_tflops", row.get("gpu_name"))
        else:
            rate = row_rate(meta, row.get("worker"), "bf16_tflops")
        if row["dtype"] != "bfloat16" or not rate or not row["median_ms"] > 0:
            return math.nan
        problem = Problem(**{f: int(row[f]) for f in SHAPE_FIELDS}, dtype=row["dtype"])
        return flops(problem) / (row["median_ms"] * 1e-3) / 1e12 / rate

    return rows.apply(fraction, axis=1).astype(float) if len(rows) else pd.Series(dtype=float)


def _one_side(rows: pd.DataFrame, provider: str, prefix: str) -> pd.DataFrame:
    """One provider's rows keyed by point, timing columns renamed with `prefix`."""
    side = rows[rows["provider"] == provider]
    if "timestamp" in side.columns:
        side = side.sort_values("timestamp", kind="stable")
    side = side.drop_duplicates("point", keep="last")[["point", *_SIDE_COLUMNS]]
    return side.rename(columns={c: f"{prefix}_{c}" for c in _SIDE_COLUMNS})


def pair_problem(df: pd.DataFrame, baseline: str, candidate: str, need_rows: bool = False) -> str:
    """Why a report of `candidate` against `baseline` would say nothing about the run ("" if it
    would): both the same, or a name that is no provider (a typo, or a run folder passed where a
    provider is meant). A known provider the run did not measure (providers=cutile) leaves a
    one-sided report, unless `need_rows` (speedups are all the caller shows)."""
    from harness import providers  # the registry imports no kernel library

    present = sorted(df["provider"].dropna().unique())
    has = f"this run has {', '.join(present) or 'none'}"
    if baseline == candidate:
        return f"baseline and candidate are both {baseline!r}; {has}"
    known = set(providers.names()) | set(present)
    unknown = [name for name in (baseline, candidate) if name not in known]
    if unknown:
        return (
            f"not a provider: {', '.join(map(repr, unknown))} (--baseline and --candidate name "
            f"providers: {', '.join(sorted(known))}); {has}"
        )
    absent = [name for name in (baseline, candidate) if name not in present]
    if need_rows and absent:
        return f"no rows of provider {', '.join(map(repr, absent))}; {has}"
    return ""


def speedups(
    df: pd.DataFrame, baseline: str = "triton", candidate: str = "cutile", mode: str = "graph"
) -> pd.DataFrame:
    """One row per point of `mode`: both providers' medians and CIs, and their ratio.

    speedup = baseline median / candidate median (> 1: the candidate is faster). Its interval
    [baseline ci_low / candidate ci_high, baseline ci_high / candidate ci_low] joins the extreme
    ends of the two recorded 95 % intervals of the median: it holds the true ratio whenever both
    intervals hold their medians (probability >= 0.95**2 for independent runs) and is wider than
    an exact 95 % ratio interval, so decisions taken on it err on the side of "no difference".
    `timed` is True only when both providers have status "ok"; other rows keep NaN speedups
    and show the statuses ("missing" where a provider has no row).
    """
    rows = df[df["mode"] == mode]
    shapes = rows[list(POINT_COLUMNS)].drop_duplicates("point")
    table = shapes.merge(_one_side(rows, baseline, "baseline"), on="point", how="left").merge(
        _one_side(rows, candidate, "candidate"), on="point", how="left"
    )
    for prefix in ("baseline", "candidate"):
        table[f"{prefix}_status"] = table[f"{prefix}_status"].fillna("missing")
        table[f"{prefix}_error"] = table[f"{prefix}_error"].fillna("")
        table[f"{prefix}_ci_wide"] = table[f"{prefix}_ci_wide"].fillna(False).astype(bool)
    table.insert(1, "mode", mode)
    table.insert(2, "baseline", baseline)
    table.insert(3, "candidate", candidate)
    table["timed"] = (table["baseline_status"] == "ok") & (table["candidate_status"] == "ok")
    timed = table["timed"]
    table["speedup"] = (table["baseline_median_ms"] / table["candidate_median_ms"]).where(timed)
    low, high = stats.ratio_interval(
        table["baseline_ci_low_ms"],
        table["baseline_ci_high_ms"],
        table["candidate_ci_low_ms"],
        table["candidate_ci_high_ms"],
    )
    table["speedup_low"] = low.where(timed)
    table["speedup_high"] = high.where(timed)
    table["ci_wide"] = table["baseline_ci_wide"] | table["candidate_ci_wide"]
    return table.sort_values(list(SHAPE_COLUMNS) + ["point"], kind="stable").reset_index(drop=True)


def summarize(table: pd.DataFrame) -> dict:
    """Headline numbers of a speedups() table: counts, range and geometric mean of the speedup."""
    timed = table[table["timed"]]
    return {
        "points": len(table),
        "timed": len(timed),
        "min": float(timed["speedup"].min()) if len(timed) else math.nan,
        "max": float(timed["speedup"].max()) if len(timed) else math.nan,
        "geomean": stats.geomean(timed["speedup"]),
        "ci_wide": int(timed["ci_wide"].sum()),
    }


def by_axis(table: pd.DataFrame, axis: str) -> pd.DataFrame:
    """summarize() of a speedups() table per value of one shape axis (e.g. seqlen): where along
    that axis the geometric mean sits, one row per value in ascending order."""
    rows = [{axis: value, **summarize(group)} for value, group in table.groupby(axis, sort=True)]
    return pd.DataFrame(rows, columns=[axis, "points", "timed", "min", "max", "geomean", "ci_wide"])


def kernel_breakdown(df: pd.DataFrame, mode: str = "kernels") -> pd.DataFrame:
    """Long table of per-kernel medians from the `kernel_ms` JSON column, ok rows of `mode`.

    One row per point x provider x kernel, kernels in recorded (launch) order, with `share` the
    kernel's part of that provider's summed kernel time at the point.
    """
    rows = df[(df["mode"] == mode) & (df["status"] == "ok")]
    records = []
    for row in rows.itertuples(index=False):
        kernels = json.loads(row.kernel_ms or "{}")
        total = sum(kernels.values())
        for order, (name, ms) in enumerate(kernels.items()):
            shape = {c: getattr(row, c) for c in POINT_COLUMNS}
            records.append(
                {
                    **shape,
                    "provider": row.provider,
                    "kernel": name,
                    "order": order,
                    "ms": float(ms),
                    "share": float(ms) / total if total else math.nan,
                    "kernels_total_ms": total,
                }
            )
    columns = [*POINT_COLUMNS, "provider", "kernel", "order", "ms", "share", "kernels_total_ms"]
    table = pd.DataFrame.from_records(records, columns=columns)
    order = [*SHAPE_COLUMNS, "point", "provider", "order"]
    return table.sort_values(order, kind="stable").reset_index(drop=True)


def chunks_run(df: pd.DataFrame) -> pd.DataFrame:
    """The chunk length each provider ran at each point (ok rows): the tuning column's
    chunk_size under chunk_policy=fastest, else the problem's chunk_size. Columns: point,
    provider, chunk_size (the problem's), chunk_run, chunk_policy."""
    ok = df[df["status"] == "ok"].drop_duplicates(["point", "provider"])
    tunings = [json.loads(t or "{}") for t in ok["tuning"]]
    problem_chunks = ok["chunk_size"].tolist()
    return pd.DataFrame(
        {
            "point": ok["point"].to_numpy(),
            "provider": ok["provider"].to_numpy(),
            "chunk_size": problem_chunks,
            "chunk_run": [
                t.get("chunk_size", q) for t, q in zip(tunings, problem_chunks, strict=True)
            ],
            "chunk_policy": [t.get("chunk_policy", "fixed") for t in tunings],
        }
    )


def autotune_draws(df: pd.DataFrame) -> pd.DataFrame:
    """Under triton_autotune=twice, the two tunings of each (point, provider, chunk length) side
    by side: how far apart two draws of the provider's own autotuner landed in the whole-forward
    screening. Columns: point, provider, chunk (the length screened), first_ms, retuned_ms
    (screening medians; NaN where that screening failed), spread (slower / faster − 1) and kept
    (which of the point's candidates was timed, e.g. "256 retuned"). Empty without such rows."""
    columns = ["point", "provider", "chunk", "first_ms", "retuned_ms", "spread", "kept"]
    rows = []
    ok = df[df["status"] == "ok"].drop_duplicates(["point", "provider"])
    for r in ok.itertuples(index=False):
        tuning = json.loads(r.tuning or "{}")
        screened = tuning.get("autotune_screen_ms")
        if not screened:
            continue
        for chunk in [k for k in screened if not k.endswith(" retuned")]:
            first, retuned = (_ms(screened.get(k)) for k in (chunk, f"{chunk} retuned"))
            both = not (math.isnan(first) or math.isnan(retuned))
            spread = max(first, retuned) / min(first, retuned) - 1 if both else math.nan
            rows.append([r.point, r.provider, chunk, first, retuned, spread,
                         tuning.get("autotune_kept")])  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def _ms(value: object) -> float:
    """A screening median, or NaN for a screening that failed (recorded as its error text)."""
    return float(value) if isinstance(value, int | float) else math.nan


#: nvidia-smi fields of the gpu_clocks column, as the names of gpu_clocks()'s columns.
CLOCK_FIELDS = {
    "clocks.sm": "sm_mhz",
    "temperature.gpu": "temperature_c",
    "power.draw": "power_w",
    "clocks_throttle_reasons.active": "reasons",
}


def gpu_clocks(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (point, mode, worker) with the GPU's state read as that mode's timing ended:
    sm_mhz, temperature_c, power_w, reasons (nvidia-smi's mask of clock-limiting reasons) and
    held (one of environment.HELD_REASONS active), and timings (how many times the mode was timed
    there, the reading being the last's; NaN in runs before the column). Rows without a reading
    (runs before the column, or off CUDA) are left out."""
    columns = ["point", "mode", "worker", *CLOCK_FIELDS.values(), "timings"]
    if "gpu_clocks" not in df.columns:
        return pd.DataFrame(columns=columns)
    read = df[df["gpu_clocks"].notna()].drop_duplicates(["point", "mode", "worker"])
    rows = []
    for r in read.itertuples(index=False):
        state = json.loads(r.gpu_clocks)
        timings = getattr(r, "timings", math.nan)
        rows.append([r.point, r.mode, r.worker, *(reading(state.get(k)) for k in CLOCK_FIELDS),
                     math.nan if pd.isna(timings) else timings])  # fmt: skip
    table = pd.DataFrame(rows, columns=columns)
    reasons = table["reasons"].fillna(0).astype("int64")
    return table.assign(held=(reasons & HELD_REASONS) != 0)


def varying_columns(table: pd.DataFrame, exclude: tuple[str, ...] = ()) -> list[str]:
    """Shape/dtype/option columns that take more than one value in `table` (for labels)."""
    candidates = [c for c in (*SHAPE_COLUMNS, "dtype", "options") if c not in exclude]
    return [c for c in candidates if c in table.columns and table[c].nunique(dropna=False) > 1]
