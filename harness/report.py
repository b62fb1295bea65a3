"""Report of one run: PNG figures and a markdown summary (report.md).

    python -m harness.report <run-dir or results.parquet> [--out DIR]

Writes into the run directory unless --out is given. Everything shown comes from
harness.analysis tables and harness.plots figures, so the notebook and the report agree.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from PIL import Image

from harness import analysis, environment, markdown, plots, records, targets
from harness.config import planned_points

#: records.MODES in report order: graph first (the headline: device time without host work).
MODES = ("graph", *(m for m in records.MODES if m != "graph"))
DPI = 120
_MS = ("median_ms", "ci_low_ms", "ci_high_ms")


def latest_run(results: Path) -> Path:
    """Newest complete run directory, results/<gpu-slug>/<run-id>/, by the time its meta.json
    says it was created (a clone's files all carry the checkout's time), then by modification
    time; the reference runs under results/baselines/ are skipped. A run that holds fewer points
    than its sweep planned (cut short, not yet resumed) is passed over while a complete one
    exists, so a reader is not handed half a sweep by default. FileNotFoundError when there is
    no run at all."""
    markers = [*results.glob("*/*/meta.json"), *results.glob("*/*/results.parquet")]
    runs = sorted({m.parent for m in markers if m.parent.parent.name != "baselines"}, key=_created)
    if not runs:
        raise FileNotFoundError(f"no run directory under {results}")
    return next((run for run in reversed(runs) if _complete(run)), runs[-1])


def _complete(run: Path) -> bool:
    """Whether the run holds every point its sweep planned, for every provider (True where its
    meta does not say what was planned: nothing shows it partial); False where it cannot be read."""
    try:
        df, meta = records.load_run(run)
    except (records.RecordsError, OSError, ValueError):
        return False
    return not missing_points(df, meta)


def _created(run: Path) -> tuple[str, float]:
    """(meta.json's "created", UTC ISO, else the newest file's time in that form; that time)."""
    modified = max(f.stat().st_mtime for f in run.iterdir())
    try:
        created = records.read_meta(run).get("created")
    except (records.RecordsError, OSError, ValueError):
        created = None
    if not isinstance(created, str) or not created:
        created = datetime.fromtimestamp(modified, timezone.utc).isoformat(timespec="seconds")
    return created, modified


def gpu_title(df: pd.DataFrame) -> str:
    """GPU name(s) that measured the rows, for figure titles."""
    return ", ".join(records.gpu_names(df))


def modes_of(df: pd.DataFrame) -> list[str]:
    """Modes present in the table, graph first (the headline: device time without host work)."""
    present = set(df["mode"].unique())
    return [m for m in MODES if m in present] + sorted(present - set(MODES))


def figures(df: pd.DataFrame, meta: dict, baseline: str, candidate: str) -> dict[str, Figure]:
    """All figures of the report, by file name."""
    gpu = gpu_title(df)
    modes = modes_of(df)
    primary = modes[0] if modes else "graph"
    out = {
        f"speedup_vs_seqlen_{mode}.png": plots.speedup_vs_seqlen(
            analysis.speedups(df, baseline, candidate, mode), gpu
        )
        for mode in modes
    }
    headline = analysis.speedups(df, baseline, candidate, primary)
    out[f"speedup_heatmap_{primary}.png"] = plots.speedup_heatmap(headline, gpu)
    providers = (baseline, candidate)
    out[f"times_{primary}.png"] = plots.absolute_times(df, primary, gpu, providers)
    out[f"roofline_{primary}.png"] = plots.roofline_fraction(df, meta, primary, gpu, providers)
    breakdown = analysis.kernel_breakdown(df)
    if not breakdown.empty:
        out["kernel_breakdown.png"] = plots.kernel_breakdown(breakdown, gpu)
    return out


def environment_section(df: pd.DataFrame, meta: dict) -> str:
    """Where and with what the run was measured (the metadata, flattened)."""
    rows = [("run_id", meta.get("run_id", "")), ("created", meta.get("created", ""))]
    rows += [("GPU (rows)", gpu_title(df))]
    rows += markdown.flatten(meta.get("env", {}), "env")
    rows += markdown.flatten(meta.get("peaks", {}), "peaks")
    text = "## Environment\n\n"
    gpus = records.gpu_names(df)
    if len(gpus) > 1:
        text += (
            f"> **Warning: the rows were measured on {len(gpus)} GPU models ({', '.join(gpus)}); "
            "their times do not compare with each other.**\n\n"
        )
    text += markdown.table(("item", "value"), rows)
    workers = meta.get("workers", [])
    if workers:
        text += "\n\n" + workers_table(workers)
    return text


def worker_state(worker: dict, workers: list[dict]) -> str:
    """The state a worker recorded, except that one still `running` when a later worker of its
    shard started, or a later one of another shard count (a resume, which may shard anew), was
    killed without recording its end (a job's time limit, SIGKILL): its measured points count,
    the point it was in was measured again."""
    state = worker.get("state", "")
    shard, started = worker.get("shard", {}), worker.get("started") or ""
    resumed = any(
        (w.get("shard", {}) == shard or w.get("shard", {}).get("count") != shard.get("count"))
        and (w.get("started") or "") > started
        for w in workers
    )
    return "killed (no end recorded)" if state == "running" and resumed else state


def workers_table(workers: list[dict]) -> str:
    """The processes that measured the run (shards on several GPUs or SLURM jobs): which GPU each
    used, how far it got."""
    rows = []
    for w in workers:
        env, shard = w.get("env", {}), w.get("shard", {})
        gpu = env.get("gpu", {})
        rows.append(
            (
                w.get("worker", ""),
                f"{shard.get('index', 0)} of {shard.get('count', 1)}",
                gpu.get("name", ""),
                gpu.get("uuid") or "",
                env.get("hostname", ""),
                env.get("cuda_visible_devices") or "",
                worker_state(w, workers),
                w.get("measured", ""),
                _rates_text(w.get("peaks") or {}, w.get("peaks_clocks")),
                prepared_text(w.get("prepared") or {}),
            )
        )
    header = ("worker", "shard", "GPU", "GPU uuid", "host", "CUDA_VISIBLE_DEVICES", "state",
              "points measured", "bf16 TFLOP/s, copy GB/s (SM clock after)",
              "compiled first")  # fmt: skip
    return markdown.table(header, rows)


def _rates_text(peaks: dict, clocks: dict | None) -> str:
    """A worker's own measured rates, which its rows' frac_peak_* divide by (harness.peaks), and
    the SM clock read right after them, with any load-imposed limiting reason: a rate measured on
    a GPU held down by earlier work is low and flatters those fractions. Empty for workers
    recorded before each measured its own; no clock for those recorded before it was read."""
    if not peaks:
        return ""
    text = f"{peaks['bf16_tflops']:.0f}, {peaks['copy_gbps']:.0f}"
    sm = environment.reading((clocks or {}).get("clocks.sm"))
    if math.isnan(sm):
        return text
    reasons = environment.reading(clocks.get("clocks_throttle_reasons.active"))
    held = 0 if math.isnan(reasons) else int(reasons) & environment.HELD_REASONS
    return f"{text} ({sm:.0f} MHz{f', reasons {held:#x}' if held else ''})"


def prepared_text(prepared: dict[str, dict]) -> str:
    """What each provider's prepare step did before the worker's first point (the runner's
    `prepared` record): how many launches it compiled, in how long, or why it failed."""
    parts = []
    for name, done in sorted(prepared.items()):
        if "error" in done:
            parts.append(f"{name}: failed ({markdown.first_line(str(done['error']), 60)})")
        elif "compiled" in done:
            failed = f", {done['failed']} failed" if done.get("failed") else ""
            parts.append(
                f"{name}: {done['compiled']} of {done.get('specialisations', '?')} in "
                f"{done.get('seconds', float('nan')):.0f} s{failed}"
            )
        else:
            parts.append(f"{name}: {', '.join(f'{k} {v}' for k, v in sorted(done.items()))}")
    return "; ".join(parts)


def _plan(meta: dict) -> tuple[list[str], list[str]] | None:
    """(the sweep's point keys, the providers' names) from a run's meta; None where it lacks
    either."""
    planned = planned_points(meta)
    names = (meta.get("config") or {}).get("providers", {}).get("names")
    if planned is None or not names:
        return None
    return planned, names


def _unmeasured(df: pd.DataFrame, planned: list[str], names: list[str]) -> list[str]:
    """The planned keys that some of the named providers has no row for."""
    measured = set(zip(df["point"], df["provider"], strict=True)) if len(df) else set()
    return [key for key in planned if any((key, name) not in measured for name in names)]


def missing_points(df: pd.DataFrame, meta: dict) -> list[str] | None:
    """The sweep's point keys that some provider of the run has not measured, from the sweep and
    providers in the run's meta (a time limit or a lost node cuts a run short); None where the
    meta lacks them."""
    plan = _plan(meta)
    return None if plan is None else _unmeasured(df, *plan)


def coverage_section(df: pd.DataFrame, meta: dict) -> str | None:
    """How many of the sweep's points every provider measured, so that a run cut short reads as
    partial and names what a resume of its run_id still has to measure. None where the meta
    lacks the sweep or providers."""
    plan = _plan(meta)
    if plan is None:
        return None
    planned, names = plan
    missing = _unmeasured(df, planned, names)
    text = (
        f"## Coverage\n\n{len(planned) - len(missing)} of the sweep's {len(planned)} points "
        f"measured by every provider ({', '.join(names)})."
    )
    if not missing:
        return text
    listed = "\n".join(f"- `{key}`" for key in missing)
    partial = "**Partial run.** Not measured yet (rerunning its run_id measures them):"
    return f"{text} {partial}\n\n{listed}"


def speedup_section(df: pd.DataFrame, baseline: str, candidate: str) -> str:
    """Speedup range and geometric mean per mode."""
    rows = []
    for mode in modes_of(df):
        s = analysis.summarize(analysis.speedups(df, baseline, candidate, mode))
        rows.append(
            (
                mode,
                s["points"],
                s["timed"],
                markdown.ratio(s["min"]),
                markdown.ratio(s["geomean"]),
                markdown.ratio(s["max"]),
                s["ci_wide"],
            )
        )
    header = ("mode", "points", "timed", "min", "geomean", "max", "wide CIs")
    intro = f"Speedup = {baseline} time / {candidate} time (> 1: {candidate} faster)."
    return f"## Speedup\n\n{intro}\n\n" + markdown.table(header, rows)


# The sweep's axes, each summed up alone where a run varies it.
AXES = ("seqlen", "nheads", "dstate")


def axes_section(table: pd.DataFrame) -> str | None:
    """The speedup's range and geometric mean along each axis the run varies, for one mode's
    speedups() table; None where it varies none."""
    axes = [a for a in AXES if table[a].nunique() > 1]
    if not axes:
        return None
    parts = [f"## Speedup by axis ({table['mode'].iloc[0]} mode)"]
    for axis in axes:
        rows = [
            (
                int(r[axis]),
                f"{int(r['timed'])}/{int(r['points'])}",
                markdown.ratio(r["min"]),
                markdown.ratio(r["geomean"]),
                markdown.ratio(r["max"]),
            )
            for _, r in analysis.by_axis(table, axis).iterrows()
        ]
        parts.append(markdown.table((axis, "timed", "min", "geomean", "max"), rows))
    return "\n\n".join(parts)


def points_section(table: pd.DataFrame) -> str:
    """Every point of one mode: both medians with CIs and the speedup with its interval."""
    named = ["seqlen", "nheads", "dstate"] + analysis.varying_columns(
        table, exclude=("seqlen", "nheads", "dstate")
    )
    base, cand = table["baseline"].iloc[0], table["candidate"].iloc[0]
    rows = []
    for _, r in table.iterrows():
        status = "ok" if r["timed"] else f"{r['baseline_status']} / {r['candidate_status']}"
        rows.append(
            (
                markdown.point_label(r, named),
                markdown.ms_ci(*(r[f"baseline_{c}"] for c in _MS)),
                markdown.ms_ci(*(r[f"candidate_{c}"] for c in _MS)),
                markdown.ratio(r["speedup"], r["speedup_low"], r["speedup_high"]),
                status + (" (wide CI)" if r["ci_wide"] else ""),
            )
        )
    header = (
        "point",
        f"{base} ms [95 % CI]",
        f"{cand} ms [95 % CI]",
        "speedup [interval]",
        "status",
    )
    mode = table["mode"].iloc[0]
    return f"## Points ({mode} mode)\n\n" + markdown.table(header, rows)


def chunks_section(df: pd.DataFrame) -> str | None:
    """How many points each provider ran at which chunk length, when the run let them choose
    (chunk_policy=fastest); None otherwise."""
    chunks = analysis.chunks_run(df)
    if (chunks["chunk_policy"] == "fixed").all():
        return None
    counts = chunks.groupby(["provider", "chunk_size", "chunk_run"]).size()
    rows = [(provider, q, ran, n) for (provider, q, ran), n in counts.items()]
    text = (
        "## Chunk lengths run\n\nchunk_policy=fastest: at every point each provider ran the "
        "faster of the problem's chunk length and its half (both checked against the reference); "
        "the rows' tuning column has the choice and the screening times, and TFLOP/s count the "
        "FLOPs at the length run.\n\n"
    )
    header = ("provider", "problem chunk", "chunk run", "points")
    return text + markdown.table(header, rows)


#: Two tunings whose screenings differ by more than this are listed by point.
DRAW_SPREAD = 0.05


def autotune_section(df: pd.DataFrame) -> str | None:
    """How far apart two tunings of the same point landed (triton_autotune=twice): where they
    differ, one tuning would have decided the point by a draw; None without such rows."""
    draws = analysis.autotune_draws(df)
    if draws.empty:
        return None
    spread = draws["spread"].dropna()
    apart = draws[draws["spread"] > DRAW_SPREAD].sort_values("spread", ascending=False)
    kept = draws.drop_duplicates(["point", "provider"])["kept"].fillna("")
    text = (
        "## Autotuning draws\n\ntriton_autotune=twice: at every point and chunk length the "
        "self-tuning provider tuned twice; both answers were checked and the faster set of picks "
        "in the whole-forward screening was timed. "
        f"The two screenings differ by {100 * spread.median():.1f} % in the median over "
        f"{len(spread)} (point, chunk) pairs and by more than {100 * DRAW_SPREAD:.0f} % at "
        f"{len(apart)}; the second tuning's picks were timed at "
        f"{kept.str.endswith(' retuned').sum()} of {len(kept)} points.\n\n"
    )
    if apart.empty:
        return text.rstrip() + "\n"
    header = ("point", "provider", "chunk", "first ms", "retuned ms", "apart", "timed")
    rows = [
        (
            r.point,
            r.provider,
            r.chunk,
            markdown.ms(r.first_ms),
            markdown.ms(r.retuned_ms),
            markdown.change(1 + r.spread),
            r.kept,
        )
        for r in apart.itertuples(index=False)
    ]
    return text + markdown.table(header, rows)


#: A reading below this share of the run's highest SM clock is listed by point.
SLOW_CLOCK = 0.95


def clocks_section(df: pd.DataFrame) -> str:
    """The GPU's clocks, temperature and power as each mode's timing ended, per mode: a slow
    point on a GPU held below its clocks shows here."""
    title = "## GPU state after timing"
    read = analysis.gpu_clocks(df)
    if read.empty:
        return f"{title}\n\nNot recorded (a run before the gpu_clocks column, or off CUDA)."
    rows = []
    for mode in MODES:
        m = read[read["mode"] == mode]
        if m.empty:
            continue
        sm = m["sm_mhz"]
        rows.append((
            mode, len(m), f"{sm.min():.0f} / {sm.median():.0f} / {sm.max():.0f}",
            f"{m['temperature_c'].max():.0f}", f"{m['power_w'].max():.0f}",
            int(m["held"].sum()), int((m["timings"] > 1).sum()),
        ))  # fmt: skip
    text = (
        f"{title}\n\nRead by nvidia-smi as each mode's timing of a point ended (the providers "
        'of a point are timed interleaved, so they share one reading). "held" counts readings '
        "with a clock-limiting reason of power, heat or slowdown active (not idleness or a clock "
        'setting). "re-timed" counts points whose mode was timed again because the clock was '
        "held down after a timing (timing.held_retimes; the rows keep the last timing and its "
        "reading, and the number of timings in `timings`).\n\n"
    )
    header = (
        "mode", "readings", "SM MHz min / median / max", "max °C", "max W", "held", "re-timed"
    )  # fmt: skip
    text += markdown.table(header, rows)
    floor = SLOW_CLOCK * read["sm_mhz"].max()
    slow = read[read["sm_mhz"] < floor].sort_values(["mode", "sm_mhz"])
    if slow.empty:
        return text
    text += (
        f"\n\nReadings below {100 * SLOW_CLOCK:.0f} % of the run's highest SM clock: these "
        "points' times may be the clock's, not the code's.\n\n"
    )
    rows = [
        (r.mode, f"`{r.point}`", f"{r.sm_mhz:.0f}", f"{r.power_w:.0f}", _mask(r.reasons))
        for r in slow.itertuples(index=False)
    ]
    return text + markdown.table(("mode", "point", "SM MHz", "W", "reasons"), rows)


def _mask(reasons: float) -> str:
    """nvidia-smi's clock-limiting reasons as hex; "—" where it reported none ("[N/A]")."""
    return "—" if math.isnan(reasons) else f"{int(reasons):#x}"


def failures_section(df: pd.DataFrame) -> str:
    """Rows whose status is not ok, with the first line of their error."""
    bad = df[df["status"] != "ok"]
    if bad.empty:
        return "## Failures\n\nNone: every row has status ok."
    rows = [
        (r.point, r.provider, r.mode, r.status, markdown.first_line(r.error))
        for r in bad.itertuples(index=False)
    ]
    return "## Failures\n\n" + markdown.table(
        ("point", "provider", "mode", "status", "error"), rows
    )


def wide_ci_section(df: pd.DataFrame) -> str:
    """Timings whose CI stayed wider than the target: kept, but to be read with care."""
    wide = df[(df["status"] == "ok") & df["ci_wide"].astype(bool)]
    if wide.empty:
        return "## Wide confidence intervals\n\nNone."
    rows = [
        (r.point, r.provider, r.mode, markdown.ms(r.median_ms), f"{100 * r.ci_rel:.1f} %", r.reps)
        for r in wide.itertuples(index=False)
    ]
    header = ("point", "provider", "mode", "median ms", "CI half-width", "reps")
    return "## Wide confidence intervals\n\n" + markdown.table(header, rows)


def render(
    df: pd.DataFrame, meta: dict, figure_names: list[str], baseline: str, candidate: str
) -> str:
    """The whole report.md text."""
    modes = modes_of(df)
    sections = [
        f"# ssdbench report: {meta.get('run_id', '')}",
        environment_section(df, meta),
        *([coverage] if (coverage := coverage_section(df, meta)) else []),
        speedup_section(df, baseline, candidate),
        targets.section(df, meta, baseline, candidate),
        "## Figures\n\n" + "\n\n".join(f"![{name}]({name})" for name in figure_names),
    ]
    if modes:
        headline = analysis.speedups(df, baseline, candidate, modes[0])
        axes = axes_section(headline)
        sections += [axes, points_section(headline)] if axes else [points_section(headline)]
    chunks, draws = chunks_section(df), autotune_section(df)
    sections += [section for section in (chunks, draws) if section]
    sections.append(clocks_section(df))
    sections += [failures_section(df), wide_ci_section(df)]
    return "\n\n".join(sections) + "\n"


def save_png(fig: Figure, path: Path) -> None:
    """The figure as a 256-colour palette PNG: line plots and heatmaps lose nothing visible and
    the file is about 3x smaller, which keeps committed results small (a GPU call carries the
    whole tree, next to a 58 MiB toolchain)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    buffer.seek(0)
    Image.open(buffer).convert("RGB").quantize(256).save(path, optimize=True)


def write_report(
    df: pd.DataFrame, meta: dict, out: Path, baseline: str = "triton", candidate: str = "cutile"
) -> list[Path]:
    """Write the figures and report.md into `out`; returns the written paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    figs = figures(df, meta, baseline, candidate)
    for name, fig in figs.items():
        save_png(fig, out / name)
        written.append(out / name)
    report = out / "report.md"
    report.write_text(render(df, meta, list(figs), baseline, candidate))
    return [*written, report]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run", type=Path, help="run directory or results Parquet file")
    parser.add_argument("--out", type=Path, help="output folder (default: the run directory)")
    parser.add_argument(
        "--baseline", default="triton", help="provider timed against (speedup = its time / the "
        "candidate's)",
    )  # fmt: skip
    parser.add_argument("--candidate", default="cutile", help="provider whose speedup is shown")
    args = parser.parse_args(argv)
    try:
        df, meta = records.load_run(args.run)
    except Exception as exc:  # a CLI: one clear line instead of a traceback
        print(f"report: cannot load {args.run}: {exc}", file=sys.stderr)
        return 2
    problem = analysis.pair_problem(df, args.baseline, args.candidate)
    if problem:  # before anything is written over the run's report
        print(f"report: {args.run}: {problem}", file=sys.stderr)
        return 2
    out = args.out or (args.run if args.run.is_dir() else args.run.parent)
    written = write_report(df, meta, out, args.baseline, args.candidate)
    print(f"report: wrote {len(written)} files to {out} ({out / 'report.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
