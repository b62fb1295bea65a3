"""harness.records: the schema (as documented), atomic part files, resume, load_run, corruption."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import records

REPO = Path(__file__).parents[2]
META = {"schema_version": records.SCHEMA_VERSION, "run_id": "r1", "created": "t", "env": {},
        "config": {}, "peaks": {"bf16_tflops": 1.0, "copy_gbps": 1.0}}  # fmt: skip


def row(**values) -> dict:
    base = {}
    for name, kind in records.COLUMNS.items():
        if kind == pa.string():
            base[name] = ""
        elif kind == pa.int64():
            base[name] = 1
        elif kind == pa.bool_():
            base[name] = False
        else:
            base[name] = 1.0
    base.update(run_id="r1", point="p1", provider="a", mode="graph", status="ok", dtype="bfloat16")
    return {**base, **values}


def modes(**values) -> list[dict]:
    return [row(mode=m, **values) for m in records.MODES]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    records.write_meta(tmp_path / "run", META)
    return tmp_path / "run"


def test_columns_are_those_documented_in_architecture_md() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    table = text.split("## Results schema")[1]
    documented = []
    for line in table.splitlines():
        cell = line.split("|")[1].strip() if line.startswith("|") else ""
        if cell and cell not in ("column",) and not set(cell) <= {"-"}:
            documented += [c.strip() for c in cell.split(",")]
    assert documented == list(records.COLUMNS)
    assert f"SCHEMA_VERSION = {records.SCHEMA_VERSION}" in text
    types = {"str": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 3 and cells[1] in types:
            for name in cells[0].split(","):
                assert records.COLUMNS[name.strip()] == types[cells[1]], name


def test_rows_must_fit_the_schema() -> None:
    with pytest.raises(records.RecordsError, match=r"missing \['worker'\], extra \['extra'\]"):
        bad = row(extra=1)
        del bad["worker"]
        records.to_table([bad])
    with pytest.raises(records.RecordsError, match="bad status/mode"):
        records.to_table([row(status="fine")])
    assert records.to_table([row()]).schema == records.SCHEMA


def test_part_round_trip_and_completed_points(run_dir: Path) -> None:
    records.write_part(run_dir, "p1", "a", modes())
    records.write_part(run_dir, "p1", "b", modes(provider="b", status="wrong"))
    assert records.completed_points(run_dir) == {("p1", "a"), ("p1", "b")}
    df, meta = records.load_run(run_dir)
    assert len(df) == 6 and meta == META
    assert list(df.columns) == list(records.COLUMNS)


def test_a_committed_run_without_its_parts_still_knows_what_it_measured(run_dir: Path) -> None:
    records.write_part(run_dir, "p1", "a", modes())
    records.write_part(run_dir, "p1", "b", modes(provider="b"))
    records.consolidate(run_dir)
    shutil.rmtree(run_dir / records.PARTS_DIR)  # what a run folder committed to git keeps
    assert records.completed_points(run_dir) == {("p1", "a"), ("p1", "b")}
    records.write_part(run_dir, "p2", "a", modes(point="p2"))  # a resume measures the rest
    assert records.completed_points(run_dir) == {("p1", "a"), ("p1", "b"), ("p2", "a")}


def test_rows_of_another_run_are_refused(run_dir: Path, tmp_path: Path) -> None:
    """A results file copied into the wrong run folder must not pass for this run's points."""
    other = tmp_path / "other"
    records.write_meta(other, {**META, "run_id": "r2"})
    records.write_part(other, "p1", "a", modes(run_id="r2"))
    shutil.copy(records.consolidate(other), run_dir / records.RESULTS_FILE)
    with pytest.raises(records.RecordsError, match="holds rows of run 'r2', not of this run 'r1'"):
        records.completed_points(run_dir)
    (run_dir / records.RESULTS_FILE).unlink()
    records.write_part(run_dir, "p2", "a", modes(run_id="r2"))
    with pytest.raises(records.RecordsError, match="move it to its own run folder"):
        records.load_run(run_dir)


def test_an_unreadable_results_table_is_an_error_that_says_what_to_do(run_dir: Path) -> None:
    records.write_part(run_dir, "p1", "a", modes())
    (run_dir / records.RESULTS_FILE).write_bytes(b"PAR1 torn write")
    with pytest.raises(records.RecordsError, match="is unreadable .*restore it .*or delete it"):
        records.completed_points(run_dir)


def test_part_write_is_atomic(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = records.write_part(run_dir, "p1", "a", modes(median_ms=1.0))

    def crash(src, dst):
        raise OSError("killed mid-write")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="killed mid-write"):
        records.write_part(run_dir, "p1", "a", modes(median_ms=2.0))
    assert pq.read_table(first)["median_ms"].to_pylist() == [1.0] * 3  # old file intact
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name]  # no temp left


def test_corrupt_and_temporary_parts_are_skipped(run_dir: Path) -> None:
    records.write_part(run_dir, "p1", "a", modes())
    parts = run_dir / records.PARTS_DIR
    (parts / "p2__a.parquet").write_bytes(b"PAR1 torn write")
    (parts / ".p3__a.parquet.123.tmp").write_bytes(b"half")
    pq.write_table(pa.table({"point": ["p4"], "provider": ["a"]}), parts / "p4__a.parquet")
    with pytest.warns(UserWarning) as caught:
        assert records.completed_points(run_dir) == {("p1", "a")}
        df, _ = records.load_run(run_dir)
    assert set(df["point"]) == {"p1"}
    messages = {str(w.message).split(":")[0] for w in caught}
    assert messages == {
        "skipping unreadable part p2__a.parquet",
        "skipping unreadable part p4__a.parquet",
    }


def test_consolidate_then_load_merges_new_parts(run_dir: Path) -> None:
    records.write_part(run_dir, "p1", "a", modes())
    path = records.consolidate(run_dir)
    assert json.loads(pq.read_schema(path).metadata[records.META_KEY]) == META
    records.write_part(run_dir, "p2", "a", modes(point="p2"))
    (run_dir / records.PARTS_DIR / "p1__a.parquet").unlink()  # only in results.parquet now
    df, _ = records.load_run(run_dir)
    assert sorted(set(df["point"])) == ["p1", "p2"] and len(df) == 6
    records.write_part(run_dir, "p1", "a", modes(median_ms=9.0))  # a part overrides its old rows
    df, _ = records.load_run(run_dir)
    assert df[df["point"] == "p1"]["median_ms"].tolist() == [9.0] * 3


def test_load_run_of_a_parquet_file_reads_its_meta(run_dir: Path) -> None:
    records.write_part(run_dir, "p1", "a", modes())
    df, meta = records.load_run(records.consolidate(run_dir))
    assert meta["run_id"] == "r1" and len(df) == 3


def test_load_run_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(records.RecordsError, match="no such run"):
        records.load_run(tmp_path / "nothing")
    with pytest.raises(records.RecordsError, match="no meta.json"):
        records.load_run(tmp_path)
    pq.write_table(pa.table({"x": [1]}), tmp_path / "plain.parquet")
    with pytest.raises(records.RecordsError, match="no ssdbench metadata"):
        records.load_run(tmp_path / "plain.parquet")


def test_empty_run_loads_with_all_columns(run_dir: Path) -> None:
    df, _ = records.load_run(run_dir)
    assert df.empty and list(df.columns) == list(records.COLUMNS)


def test_options_json_spells_infinity() -> None:
    text = records.options_json({"has_z": False, "dt_limit": (0.0, math.inf)})
    assert json.loads(text) == {"has_z": False, "dt_limit": [0.0, "inf"]}


def test_error_message_is_one_line() -> None:
    msg = records.error_message(RuntimeError("CUDA error: out of memory\nCompile with ..."))
    assert msg == "RuntimeError: CUDA error: out of memory"
    assert records.error_message(KeyError()) == "KeyError"
    assert len(records.error_message(ValueError("x" * 2000))) == 500
    assert re.fullmatch(r"[^\n]*", records.error_message(ValueError("a\nb")))


@pytest.mark.parametrize(
    "lacking", [["gpu_clocks", "timings"], ["timings"]], ids=["version-1", "version-2"]
)
def test_an_older_run_reads_with_the_columns_added_since_null(
    run_dir: Path, lacking: list[str]
) -> None:
    """Runs written before the gpu_clocks or timings column: parts and results files alike."""
    old = pa.Table.from_pylist(modes()).drop_columns(lacking)
    pq.write_table(old, run_dir / records.RESULTS_FILE)
    (run_dir / records.PARTS_DIR).mkdir()
    part = old.set_column(1, "point", pa.array(["p2"] * 3))
    pq.write_table(part, run_dir / records.PARTS_DIR / "x.parquet")
    df, _ = records.load_run(run_dir)
    assert list(df.columns) == list(records.COLUMNS) and len(df) == 6
    assert df[lacking].isna().all().all()
    df, _ = records.load_run(records.consolidate(run_dir))
    assert len(df) == 6 and df[lacking].isna().all().all()


def test_only_the_added_columns_may_be_missing() -> None:
    table = pa.Table.from_pylist(modes()).drop_columns(["gpu_clocks", "seed"])
    with pytest.raises(records.RecordsError, match="columns differ"):
        records.upgraded(table)


def test_measured_commits_count_each_workers_points() -> None:
    """A run resumed at another commit names both, with the points each measured; rows older
    than worker records take the run's commit."""
    import pandas as pd

    table = pd.DataFrame(
        {
            "point": ["p1", "p1", "p2", "p3", "p4"],
            "worker": ["w1", "w1", "w1", "w2", None],
        }
    )
    meta = {
        "env": {"git": {"commit": "aaa"}},
        "workers": [
            {"worker": "w1", "env": {"git": {"commit": "aaa"}}},
            {"worker": "w2", "env": {"git": {"commit": "bbb"}}},
        ],
    }
    assert records.measured_commits(table, meta) == {"aaa": 3, "bbb": 1}
    assert records.measured_commits(table.drop(columns="worker"), {}) == {"": 4}


def test_the_committed_v45_names_both_its_commits() -> None:
    table, meta = records.load_run(REPO / "results/nvidia-h200/default-h200-v45")
    commits = records.measured_commits(table, meta)
    assert [c[:7] for c in commits] == ["6350b9b", "3223a02"]
    assert list(commits.values()) == [62, 1]


def test_retry_errors_leaves_the_errored_pairs_to_measure_again(run_dir: Path) -> None:
    records.write_part(run_dir, "p1", "a", modes())
    records.write_part(run_dir, "p1", "b", [row(provider="b", mode="graph", status="error")])
    records.write_part(run_dir, "p2", "a", modes(point="p2", status="wrong"))
    everything = {("p1", "a"), ("p1", "b"), ("p2", "a")}
    assert records.completed_points(run_dir) == everything
    assert records.completed_points(run_dir, retry_errors=True) == everything - {("p1", "b")}
    table = records.load_run(run_dir)[0]
    assert records.failed_pairs(table) == {"error": {("p1", "b")}, "wrong": {("p2", "a")}}
