"""harness.plots: what each figure draws agrees with the tables, whatever points a panel lacks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from harness import analysis, plots
from tests.harness.synthetic import synthetic_meta, synthetic_table


def _lines(ax) -> dict[str, tuple[str, np.ndarray]]:
    """{label: (colour, y values)} of the data lines an axes drew (error bars included)."""
    drawn = {}
    for line in ax.get_lines():
        label = line.get_label()
        if not label.startswith("_") and len(line.get_ydata()) > 1:
            drawn[label] = (line.get_color(), np.asarray(line.get_ydata(), dtype=float))
    for container in ax.containers:
        label = container.get_label()
        if not label.startswith("_"):
            line = container.lines[0]
            drawn[label] = (line.get_color(), np.asarray(line.get_ydata(), dtype=float))
    return drawn


def test_a_series_has_one_colour_in_every_panel_whichever_series_a_panel_lacks() -> None:
    """cuTile untimed at every H=32 N=64 point: that panel draws N=128 first, which a colour
    cycle per panel would paint as the legend's N=64."""
    table = synthetic_table()
    table.loc[(table["nheads"] == 32) & (table["dstate"] == 64), "status"] = "error"
    figure = plots.speedup_vs_seqlen(analysis.speedups(table))
    colours = [{k: c for k, (c, _) in _lines(ax).items()} for ax in figure.axes[:2]]
    assert "N=64" not in colours[0] and colours[0]["N=128"] == colours[1]["N=128"]
    assert colours[1]["N=64"] != colours[1]["N=128"]
    assert "3 point(s) not timed by both, not drawn" in figure._suptitle.get_text()
    labels = [t.get_text() for t in figure.legends[0].get_texts()]
    assert "N=64" in labels and "N=128" in labels  # one legend, of every panel's series


def test_the_heatmap_keeps_every_column_in_each_panel() -> None:
    """A panel missing a seqlen (H=64 untimed at 16K) must neither lose the others' columns nor
    shift its values under the wrong label."""
    table = synthetic_table()
    table.loc[(table["nheads"] == 64) & (table["seqlen"] == 16384), "status"] = "error"
    figure = plots.speedup_heatmap(analysis.speedups(table))
    for ax in figure.axes[:2]:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1K", "4K", "16K"]
        image = ax.get_images()[0].get_array()
        assert image.shape == (2, 3)
    assert np.isnan(np.asarray(figure.axes[1].get_images()[0].get_array(), dtype=float)[:, 2]).all()


def test_the_bf16_fraction_drawn_is_the_posed_problems_as_the_targets_count() -> None:
    """A provider that ran chunks of 128 did fewer FLOPs than the 256 posed; the figure credits
    it with the posed problem's, as the Targets table does (one count: analysis.bf16_fraction)."""
    table = synthetic_table(seqlens=(16384,), nheads=(64,), dstates=(256,))
    cutile = table["provider"] == "cutile"
    table.loc[cutile, "tuning"] = json.dumps({"chunk_size": 128})
    table.loc[cutile, "frac_peak_flops"] = 0.01  # what the row says at the length run
    meta = synthetic_meta()
    posed = analysis.bf16_fraction(table[table["mode"] == "graph"], meta)
    figure = plots.roofline_fraction(table, meta)
    drawn = _lines(figure.axes[0])
    cutile_graph = (table["mode"] == "graph") & cutile
    assert drawn["cutile N=256"][1] == pytest.approx(100 * posed[cutile_graph].to_numpy())
    assert drawn["cutile N=256"][1][0] > 1.0


def test_bf16_fraction_divides_by_each_rows_worker() -> None:
    table = synthetic_table(seqlens=(4096,), nheads=(32,), dstates=(64,), modes=("graph",))
    meta = synthetic_meta()
    meta["workers"] = [{"worker": "synthetic:0", "peaks": {"bf16_tflops": 500.0}}]
    table["worker"] = ["synthetic:0", "other"]
    fractions = analysis.bf16_fraction(table, meta)
    tflops = table["tflops"].to_numpy()  # the synthetic rows ran the posed chunk
    assert fractions.to_numpy() == pytest.approx([tflops[0] / 500.0, tflops[1] / 790.0])
    assert analysis.bf16_fraction(table.assign(dtype="float16"), meta).isna().all()
    assert analysis.bf16_fraction(table.iloc[:0], meta).empty


def test_kernel_colours_do_not_repeat_within_twenty_kernels() -> None:
    rows = [
        {"point": "p", "provider": "cutile", "kernel": f"k{i}", "ms": 1.0, "order": i,
         "kernels_total_ms": 20.0, "seqlen": 1024, "nheads": 32, "dstate": 64}
        for i in range(12)
    ]  # fmt: skip
    figure = plots.kernel_breakdown(pd.DataFrame(rows))
    colours = [patch.get_facecolor() for patch in figure.axes[0].patches]
    assert len(set(colours)) == 12
