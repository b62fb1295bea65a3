"""notebooks/analysis.ipynb runs headless, top to bottom, against a synthetic run."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.harness.synthetic import build_run

nbformat = pytest.importorskip("nbformat", reason="dev extra nbformat is not installed")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "analysis.ipynb"


def test_notebook_is_committed_without_outputs() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cell without an id warns (nbformat 4.5)
        nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_notebook_runs_against_a_run_and_a_comparison(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbclient = pytest.importorskip("nbclient", reason="dev extra nbclient is not installed")
    pytest.importorskip("ipykernel", reason="dev extra ipykernel is not installed")
    axes = {"sweep.seqlen": [1024, 4096, 16384, 65536], "sweep.nheads": [32, 64]}
    axes |= {"sweep.dstate": [64, 128], "providers.names": ["cutile", "triton"]}
    run = build_run(tmp_path, run_id="candidate", settings=axes)  # 12 of the sweep's 16 points
    baseline = build_run(tmp_path / "baselines", run_id="baseline", jitter=0.01, ci_rel=0.02)
    outputs = _execute(monkeypatch, run, baseline)
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 5  # speedup curves, heatmap, times, roofline, kernel breakdown
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"run candidate from {run}" in text
    assert "PASS" in text
    assert "did not tune its baseline twice" in text  # the synthetic run tuned it once
    markdown = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert "12 of the sweep's 16 points measured by every provider" in markdown
    assert "## GPU state after timing" in markdown  # the synthetic rows read no clock


def test_notebook_says_how_to_compare_runs_measured_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("nbclient", reason="dev extra nbclient is not installed")
    pytest.importorskip("ipykernel", reason="dev extra ipykernel is not installed")
    run = build_run(tmp_path, run_id="candidate")
    other = build_run(tmp_path / "b", run_id="baseline", settings={"triton_autotune": "per_point"})
    outputs = _execute(monkeypatch, run, other)
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "not comparable: runs measured with different settings" in text
    assert "(or set ALLOW_DIFFERENT_SETTINGS = True)" in text


def _execute(monkeypatch: pytest.MonkeyPatch, run: Path, compare: Path) -> list:
    """The notebook's code outputs, executed headless against `run` and `compare`."""
    import nbclient

    monkeypatch.setenv("SSDBENCH_RUN", str(run))
    monkeypatch.setenv("SSDBENCH_COMPARE", str(compare))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # jupyter_client starts "python3" kernels with sys.executable, so the kernel runs in this venv.
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
