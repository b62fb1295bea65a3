"""Figures of a run, drawn from the tables of harness.analysis (the report and notebook share them).

Every function takes DataFrames and returns a matplotlib Figure built without pyplot, so no
global figure state leaks between calls and no display backend is needed (report, CI, notebook).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from harness.analysis import bf16_fraction, varying_columns
from harness.markdown import point_label, tokens
from harness.peaks import run_rates
from harness.stats import geomean

#: Speedup range of cuTile over Triton that the project seed reports; drawn as a shaded band.
SEED_BAND = (1.14, 1.82)
_LINESTYLES = ("-", "--", ":", "-.")


def _titled(fig: Figure, what: str, gpu: str) -> None:
    fig.suptitle(f"{what} on {gpu}" if gpu else what)


def _empty(what: str, gpu: str, why: str) -> Figure:
    fig = Figure(figsize=(6, 3), layout="constrained")
    ax = fig.subplots()
    ax.text(0.5, 0.5, why, ha="center", va="center")
    ax.set_axis_off()
    _titled(fig, what, gpu)
    return fig


def _panels(n: int, rows: int = 1, shared: bool = True) -> tuple[Figure, np.ndarray]:
    """`rows` x `n` axes; `shared`: one x-axis for all and one y-axis a row (not for heatmaps,
    whose panels may lack columns the others have)."""
    fig = Figure(figsize=(4.6 * n + 1.2, 3.8 * rows), layout="constrained")
    axes = fig.subplots(rows, n, sharex=shared, sharey="row" if shared else False, squeeze=False)
    return fig, axes


def _colors(table: pd.DataFrame, series: list[str]) -> dict:
    """One colour per series over the whole table, so that a series has it in every panel
    whichever series a panel lacks."""
    keys = [key for key, _ in table.groupby(series, sort=True)]
    return {key: f"C{i % 10}" for i, key in enumerate(keys)}


def _legend(fig: Figure, axes: np.ndarray, fontsize: str) -> None:
    """One legend for the figure, of every label any panel drew (a panel may lack a series)."""
    handles: dict[str, object] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), fontsize=fontsize, loc="outside right")


def _seqlen_axis(ax, values: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(v) for v in values))
    ax.set_xticks(ticks, [tokens(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("sequence length L (tokens)")
    ax.grid(True, which="major", alpha=0.3)


def _series(table: pd.DataFrame) -> list[str]:
    """Columns that tell the lines of one panel apart: dstate plus anything else that varies."""
    return ["dstate"] + varying_columns(table, exclude=("seqlen", "nheads", "dstate"))


def speedup_vs_seqlen(table: pd.DataFrame, gpu: str = "", band: tuple = SEED_BAND) -> Figure:
    """Speedup vs L from a speedups() table: a panel per nheads, a line per dstate, CI bars."""
    timed = table[table["timed"]]
    what = "Speedup vs sequence length"
    if timed.empty:
        return _empty(what, gpu, "no point timed by both providers")
    heads = sorted(timed["nheads"].unique())
    fig, axes = _panels(len(heads))
    series = _series(timed)
    colors = _colors(timed, series)
    for ax, nheads in zip(axes[0], heads, strict=True):
        panel = timed[timed["nheads"] == nheads]
        ax.axhspan(*band, color="tab:green", alpha=0.12, label=f"seed {band[0]}–{band[1]}x")
        ax.axhline(1.0, color="black", lw=0.8, ls="--", label="parity")
        for key, line in panel.groupby(series, sort=True):
            line = line.sort_values("seqlen")
            y = line["speedup"].to_numpy()
            err = np.vstack([y - line["speedup_low"], line["speedup_high"] - y])
            ax.errorbar(
                line["seqlen"],
                y,
                yerr=err,
                color=colors[key],
                marker="o",
                ms=4,
                capsize=3,
                label=point_label(line.iloc[0], series),
            )
        _seqlen_axis(ax, timed["seqlen"])
        ax.set_title(f"H = {nheads}")
    first = table.iloc[0]
    axes[0][0].set_ylabel(f"speedup = {first['baseline']} / {first['candidate']} time")
    _legend(fig, axes, "small")
    untimed = len(table) - len(timed)
    note = f"; {untimed} point(s) not timed by both, not drawn" if untimed else ""
    _titled(fig, f"{what} ({first['mode']} mode, 95 % CI{note})", gpu)
    return fig


def speedup_heatmap(table: pd.DataFrame, gpu: str = "") -> Figure:
    """Speedup over L x dstate, a panel per nheads, values written in the cells.

    Where other shape columns vary too, a cell shows the geometric mean over them (title says so).
    """
    timed = table[table["timed"]]
    what = "Speedup heatmap"
    if timed.empty:
        return _empty(what, gpu, "no point timed by both providers")
    heads = sorted(timed["nheads"].unique())
    values = timed["speedup"]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(values.min(), 0.95), vmax=max(values.max(), 1.05))
    fig, axes = _panels(len(heads), shared=False)
    image = None
    seqlens, dstates = sorted(timed["seqlen"].unique()), sorted(timed["dstate"].unique())
    for ax, nheads in zip(axes[0], heads, strict=True):
        grid = (
            timed[timed["nheads"] == nheads]
            .pivot_table(index="dstate", columns="seqlen", values="speedup", aggfunc=geomean)
            .reindex(index=dstates, columns=seqlens)  # a cell no point fills stays blank
        )
        image = ax.imshow(grid.to_numpy(), cmap="RdYlGn", norm=norm, aspect="auto", origin="lower")
        for (i, j), v in np.ndenumerate(grid.to_numpy()):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize="small")
        ax.set_xticks(range(grid.shape[1]), [tokens(int(c)) for c in grid.columns])
        ax.set_yticks(range(grid.shape[0]), [str(i) for i in grid.index])
        ax.set_xlabel("sequence length L (tokens)")
        ax.set_ylabel("dstate N")
        ax.set_title(f"H = {nheads}")
    fig.colorbar(image, ax=list(axes[0]), label="speedup (x)")
    other = varying_columns(timed, exclude=("seqlen", "nheads", "dstate"))
    note = f", geomean over {', '.join(other)}" if other else ""
    _titled(fig, f"{what} ({timed['mode'].iloc[0]} mode{note})", gpu)
    return fig


def _ok_rows(df: pd.DataFrame, mode: str, providers: Sequence[str]) -> pd.DataFrame:
    return df[(df["mode"] == mode) & (df["status"] == "ok") & df["provider"].isin(providers)]


def _provider_lines(
    ax,
    panel: pd.DataFrame,
    providers: Sequence[str],
    y: str,
    errors: bool,
    series: list[str],
    colors: dict,
    scale: float = 1.0,
) -> None:
    """One line per provider x series; colour by series (`colors`, the figure's), line style by
    provider."""
    for p_index, provider in enumerate(providers):
        for key, line in panel[panel["provider"] == provider].groupby(series, sort=True):
            line = line.sort_values("seqlen")
            values = line[y].to_numpy() * scale
            err = (
                np.vstack(
                    [line["median_ms"] - line["ci_low_ms"], line["ci_high_ms"] - line["median_ms"]]
                )
                if errors
                else None
            )
            ax.errorbar(
                line["seqlen"],
                values,
                yerr=err,
                color=colors[key],
                ls=_LINESTYLES[p_index % len(_LINESTYLES)],
                marker="o",
                ms=3,
                capsize=2,
                label=f"{provider} {point_label(line.iloc[0], series)}",
            )


def absolute_times(
    df: pd.DataFrame,
    mode: str = "graph",
    gpu: str = "",
    providers: Sequence[str] = ("triton", "cutile"),
) -> Figure:
    """Median time (ms, 95 % CI bars) vs L on log-log axes, a panel per nheads, both providers."""
    rows = _ok_rows(df, mode, providers)
    what = f"Time per call ({mode} mode)"
    if rows.empty:
        return _empty(what, gpu, f"no ok rows in {mode} mode")
    heads = sorted(rows["nheads"].unique())
    fig, axes = _panels(len(heads))
    series = _series(rows)
    colors = _colors(rows, series)
    for ax, nheads in zip(axes[0], heads, strict=True):
        panel = rows[rows["nheads"] == nheads]
        _provider_lines(ax, panel, providers, "median_ms", True, series, colors)
        ax.set_yscale("log")
        _seqlen_axis(ax, rows["seqlen"])
        ax.set_title(f"H = {nheads}")
    axes[0][0].set_ylabel("median time (ms)")
    _legend(fig, axes, "x-small")
    _titled(fig, what, gpu)
    return fig


def roofline_fraction(
    df: pd.DataFrame,
    meta: dict,
    mode: str = "graph",
    gpu: str = "",
    providers: Sequence[str] = ("triton", "cutile"),
) -> Figure:
    """Achieved % of the measured bf16 matmul rate (top: the FLOPs of the problem as posed,
    analysis.bf16_fraction, as the targets count) and of the copy bandwidth (bottom), each row
    over the rates of the worker that timed it; the labels name the rates where all workers'
    agree (harness.peaks.run_rates)."""
    peaks = run_rates(meta)
    rows = _ok_rows(df, mode, providers)
    rows = rows.assign(bf16_fraction=bf16_fraction(rows, meta))
    what = f"Fraction of measured peaks ({mode} mode)"
    if rows.empty:
        return _empty(what, gpu, f"no ok rows in {mode} mode")
    heads = sorted(rows["nheads"].unique())
    fig, axes = _panels(len(heads), rows=2)

    def rate(key: str, unit: str) -> str:
        if peaks is None:
            return "each worker's own"
        value = peaks.get(key)
        return f"{value:.0f} {unit}" if isinstance(value, (int, float)) else f"? {unit}"

    labels = (
        ("bf16_fraction", f"% of bf16 rate ({rate('bf16_tflops', 'TFLOP/s')}),\nposed FLOPs"),
        ("frac_peak_bw", f"% of copy bandwidth ({rate('copy_gbps', 'GB/s')})"),
    )
    series = _series(rows)
    colors = _colors(rows, series)
    for r, (column, label) in enumerate(labels):
        for ax, nheads in zip(axes[r], heads, strict=True):
            panel = rows[rows["nheads"] == nheads]
            _provider_lines(ax, panel, providers, column, False, series, colors, scale=100.0)
            _seqlen_axis(ax, rows["seqlen"])
            ax.set_title(f"H = {nheads}")
        axes[r][0].set_ylim(bottom=0)  # after all panels: the row shares y limits
        axes[r][0].set_ylabel(label)
    _legend(fig, axes, "x-small")
    _titled(fig, what, gpu)
    return fig


def pick_points(breakdown: pd.DataFrame, count: int = 4) -> list[str]:
    """`count` points spread evenly from the smallest to the largest problem (by time)."""
    order = (
        breakdown.groupby("point")["kernels_total_ms"]
        .max()
        .sort_values(kind="stable")
        .index.tolist()
    )
    if len(order) <= count:
        return order
    picks = np.linspace(0, len(order) - 1, count).round().astype(int)
    return [order[i] for i in dict.fromkeys(picks)]


def kernel_breakdown(
    breakdown: pd.DataFrame, gpu: str = "", points: Sequence[str] | None = None
) -> Figure:
    """Stacked per-kernel medians (ms), one bar per provider at each of a few points."""
    what = "Per-kernel time (kernels mode)"
    if breakdown.empty:
        return _empty(what, gpu, "no kernels-mode rows")
    points = list(points) if points is not None else pick_points(breakdown)
    providers = sorted(breakdown["provider"].unique())
    kernels = list(dict.fromkeys(zip(breakdown["provider"], breakdown["kernel"], strict=True)))
    palette = matplotlib.colormaps["tab20"].colors  # 20 kernels before a colour repeats
    colors = {k: palette[i % len(palette)] for i, k in enumerate(kernels)}
    fig = Figure(figsize=(1.6 * len(points) * len(providers) + 3.5, 4.8), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(providers)
    labelled: set[tuple[str, str]] = set()
    ticks, tick_labels = [], []
    for i, point in enumerate(points):
        for j, provider in enumerate(providers):
            x = i + (j - (len(providers) - 1) / 2) * width
            ticks.append(x)
            tick_labels.append(provider)
            bars = breakdown[(breakdown["point"] == point) & (breakdown["provider"] == provider)]
            bottom = 0.0
            for row in bars.sort_values("order").itertuples(index=False):
                key = (provider, row.kernel)
                ax.bar(
                    x,
                    row.ms,
                    width * 0.9,
                    bottom=bottom,
                    color=colors[key],
                    edgecolor="white",
                    label=None if key in labelled else f"{provider}: {row.kernel}",
                )
                labelled.add(key)
                bottom += row.ms
    ax.set_xticks(ticks, tick_labels, fontsize="small")
    shapes = breakdown.drop_duplicates("point").set_index("point")
    named = ["seqlen", "nheads", "dstate"] + varying_columns(
        shapes, exclude=("seqlen", "nheads", "dstate")
    )
    top = ax.secondary_xaxis("top")
    top.set_xticks(range(len(points)), [point_label(shapes.loc[p], named) for p in points])
    ax.set_ylabel("median kernel time (ms)")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _titled(fig, what, gpu)
    return fig
