"""The results schema and the run directory on disk: the one place that reads and writes results.

A run directory is results/<gpu-slug>/<run-id>/ holding

    meta.json         {schema_version, run_id, created, env, config, peaks}, written once
    parts/<point>__<provider>.parquet   the rows of one point x provider (all its modes)
    workers/<worker>.json   one per process that measured into the run (its GPU, shard, clocks)
    results.parquet   every row, consolidated; the meta dict (plus "workers") also sits in its
                      key-value metadata under the key "ssdbench"
    .lock             taken (fcntl) while meta.json is created and while consolidating

Every file is written to a temporary name in the same directory, fsynced and `os.replace`d, so a
reader (or a resumed sweep) sees a file whole or not at all: an interrupted sweep loses at most the
point in flight. Part files are authoritative; results.parquet is a consolidated copy, rewritten
by `consolidate`, and what a committed run folder keeps: its rows count as measured too. Several
processes (shards on several GPUs or hosts) may write into one run at once: each writes only its
own parts and worker file, meta.json is created under the lock by the first, and consolidation
reads and writes under the lock, so the last one to finish leaves the whole table. The columns
are those of COLUMNS, documented in docs/architecture.md.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import socket
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 3
#: Versions this code reads. Version 2 added gpu_clocks, version 3 timings (ADDED_COLUMNS); tables
#: written before read with them null, and no other column may be missing.
READABLE_VERSIONS = (1, 2, 3)
ADDED_COLUMNS = ("gpu_clocks", "timings")
META_KEY = b"ssdbench"
META_FILE = "meta.json"
RESULTS_FILE = "results.parquet"
PARTS_DIR = "parts"
WORKERS_DIR = "workers"
LOCK_FILE = ".lock"
STATUSES = ("ok", "wrong", "error", "unsupported")
MODES = ("eager", "graph", "kernels")

_STR, _INT, _FLOAT, _BOOL = pa.string(), pa.int64(), pa.float64(), pa.bool_()
#: One row per point x provider x mode; order and types are the schema.
COLUMNS: dict[str, pa.DataType] = {
    "run_id": _STR,
    "point": _STR,
    "batch": _INT,
    "seqlen": _INT,
    "nheads": _INT,
    "headdim": _INT,
    "dstate": _INT,
    "ngroups": _INT,
    "chunk_size": _INT,
    "dtype": _STR,
    "options": _STR,
    "provider": _STR,
    "mode": _STR,
    "status": _STR,
    "error": _STR,
    "rel_err": _FLOAT,
    "final_rel_err": _FLOAT,
    "check_against": _STR,
    "median_ms": _FLOAT,
    "p10_ms": _FLOAT,
    "p90_ms": _FLOAT,
    "ci_low_ms": _FLOAT,
    "ci_high_ms": _FLOAT,
    "reps": _INT,
    "ci_rel": _FLOAT,
    "ci_wide": _BOOL,
    "kernel_ms": _STR,
    "tflops": _FLOAT,
    "gbps": _FLOAT,
    "frac_peak_flops": _FLOAT,
    "frac_peak_bw": _FLOAT,
    "tuning": _STR,
    "l2": _STR,
    "gpu_name": _STR,
    "device_index": _INT,
    "gpu_clocks": _STR,
    "timings": _INT,
    "worker": _STR,
    "seed": _INT,
    "timestamp": _STR,
}
SCHEMA = pa.schema(list(COLUMNS.items()))


class RecordsError(ValueError):
    """Rows that do not fit the schema, or a path that is not a run."""


def to_table(rows: Iterable[Mapping], meta: Mapping | None = None) -> pa.Table:
    """Rows (dicts with exactly the schema's columns) as an Arrow table of SCHEMA.

    `meta` goes into the key-value metadata under "ssdbench".
    """
    rows = list(rows)
    for row in rows:
        if set(row) != set(COLUMNS):
            missing, extra = sorted(set(COLUMNS) - set(row)), sorted(set(row) - set(COLUMNS))
            raise RecordsError(f"row does not fit the schema: missing {missing}, extra {extra}")
        if row["status"] not in STATUSES or row["mode"] not in MODES:
            raise RecordsError(f"bad status/mode {row['status']!r}/{row['mode']!r}")
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    if meta is not None:
        table = table.replace_schema_metadata({META_KEY: json.dumps(dict(meta)).encode()})
    return table


def _atomic_write(path: Path, write) -> None:
    """Call write(file) on a temporary sibling of `path`, fsync, and rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Host and pid: writers on several hosts may share the directory (a network file system).
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold the run's exclusive lock (a POSIX lock: it also holds across hosts on NFS).

    POSIX locks belong to the process: never nest this in one process. On a file system without
    locks (some parallel file systems) it warns and goes on unlocked: parts stay complete, only
    meta.json or results.parquet may then be written by two processes at once.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LOCK_FILE, "ab") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX)
        except OSError as exc:
            warnings.warn(f"cannot lock {f.name} ({exc}); going on unlocked", stacklevel=3)
            yield
            return
        try:
            yield
        finally:
            fcntl.lockf(f, fcntl.LOCK_UN)


def new_run_id(name: str, now: datetime, claim: Callable[[str], bool]) -> str:
    """A new run's id: <name>-<yyyymmdd-HHMMSS of `now` (UTC)>, or with -2, -3, ... appended,
    the first that `claim(run_id)` accepts (returns True for; it may claim it, e.g. by making the
    directory, so that two sweeps started in the same second get two runs)."""
    base = f"{name}-{now:%Y%m%d-%H%M%S}"
    run_id, n = base, 1
    while not claim(run_id):
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def write_meta(run_dir: Path, meta: Mapping) -> None:
    _atomic_write(Path(run_dir) / META_FILE, lambda f: f.write(json.dumps(meta, indent=2).encode()))


def read_meta(run_dir: Path) -> dict:
    path = Path(run_dir) / META_FILE
    if not path.is_file():
        raise RecordsError(f"{run_dir} is not a run directory (no {META_FILE})")
    return json.loads(path.read_text())


def worker_path(run_dir: Path, worker: str) -> Path:
    return Path(run_dir) / WORKERS_DIR / f"{re.sub(r'[^A-Za-z0-9._-]', '_', worker)}.json"


def write_worker(run_dir: Path, record: Mapping) -> None:
    """Atomically write one worker's record (a dict with at least "worker")."""
    text = json.dumps(record, indent=2).encode()
    _atomic_write(worker_path(run_dir, record["worker"]), lambda f: f.write(text))


def read_workers(run_dir: Path) -> list[dict]:
    """Every readable worker record of the run, oldest start first."""
    found = []
    for path in sorted((Path(run_dir) / WORKERS_DIR).glob("[!.]*.json")):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            warnings.warn(f"skipping unreadable worker record {path.name}: {exc}", stacklevel=2)
    return sorted(found, key=lambda w: (str(w.get("started", "")), str(w.get("worker", ""))))


def run_meta(run_dir: Path) -> dict:
    """meta.json, with the worker records under "workers" when the run has any."""
    meta, workers = read_meta(run_dir), read_workers(run_dir)
    return {**meta, "workers": workers} if workers else meta


def measured_commits(table: pd.DataFrame, meta: dict) -> dict[str, int]:
    """{commit: points measured at it}, most points first: each row's worker's commit (a run
    resumed at another commit holds several), else the run's (rows older than worker records)."""
    run_commit = str(meta.get("env", {}).get("git", {}).get("commit") or "")
    by_worker = {
        w.get("worker"): str(w.get("env", {}).get("git", {}).get("commit") or "")
        for w in meta.get("workers", [])
    }
    workers = table["worker"] if "worker" in table else pd.Series(None, index=table.index)
    commits = workers.map(lambda w: by_worker.get(w, run_commit) if pd.notna(w) else run_commit)
    counts = table.assign(commit=commits).groupby("commit")["point"].nunique()
    return {str(c): int(n) for c, n in counts.sort_values(ascending=False, kind="stable").items()}


def gpu_names(table: pd.DataFrame) -> list[str]:
    """The GPU models that measured the rows; more than one means the numbers do not compare."""
    return sorted(str(n) for n in table["gpu_name"].dropna().unique())


def part_path(run_dir: Path, point: str, provider: str) -> Path:
    return Path(run_dir) / PARTS_DIR / f"{point}__{provider}.parquet"


def write_part(run_dir: Path, point: str, provider: str, rows: Iterable[Mapping]) -> Path:
    """Atomically write the rows of one point x provider; returns the part's path."""
    path = part_path(run_dir, point, provider)
    table = to_table(rows, {"schema_version": SCHEMA_VERSION})
    _atomic_write(path, lambda f: pq.write_table(table, f))
    return path


def upgraded(table: pa.Table) -> pa.Table:
    """A table of any readable schema version in today's SCHEMA (no metadata): the columns of
    ADDED_COLUMNS that it lacks are added as nulls. RecordsError if anything else differs."""
    table = table.replace_schema_metadata(None)
    for name in ADDED_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(
                pa.field(name, COLUMNS[name]), pa.nulls(len(table), COLUMNS[name])
            )
    if set(table.column_names) != set(COLUMNS):
        raise RecordsError("columns differ from the schema")
    try:
        return table.select(list(COLUMNS)).cast(SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise RecordsError(f"column types differ from the schema: {exc}") from None


def _read_parts(run_dir: Path) -> list[pa.Table]:
    """Every readable part file; unreadable or foreign ones are skipped with a warning."""
    tables = []
    for path in sorted((Path(run_dir) / PARTS_DIR).glob("[!.]*.parquet")):
        try:
            tables.append(upgraded(pq.read_table(path)))
        except Exception as exc:  # a torn or foreign file must not hide the rest of the run
            warnings.warn(f"skipping unreadable part {path.name}: {exc}", stacklevel=2)
    return tables


def _pairs(table: pa.Table) -> list[tuple[str, str]]:
    return list(zip(table["point"].to_pylist(), table["provider"].to_pylist(), strict=True))


def completed_points(run_dir: Path, retry_errors: bool = False) -> set[tuple[str, str]]:
    """(point, provider) pairs measured: those with a readable part file, and those in
    results.parquet, which is all a committed run folder keeps of its parts, so that a sweep left
    unfinished in one session resumes in the next from what was committed. Whatever their
    status, unless `retry_errors`: then a pair with an `error` row counts as not measured."""
    merged = _merged(run_dir)
    pairs = set(_pairs(merged))
    if retry_errors:
        return pairs - failed_pairs(merged.to_pandas()).get("error", set())
    return pairs


#: Statuses of a row whose provider did not pass at its point: a failure (out of memory, a
#: launch or compile error, nothing to check against) or a wrong answer.
FAILED = ("error", "wrong")


def failed_pairs(table: pd.DataFrame) -> dict[str, set[tuple[str, str]]]:
    """{status: (point, provider) pairs with a row of that FAILED status}, only those present."""
    found = {}
    for status in FAILED:
        rows = table[table["status"] == status]
        pairs = set(zip(rows["point"], rows["provider"], strict=True))
        if pairs:
            found[status] = pairs
    return found


def _own_rows(table: pa.Table, run_id: str | None, source: Path) -> pa.Table:
    """`table`, refused when it holds rows of another run (a results file copied into the wrong
    run folder would pass for measured points, and a resume would skip them)."""
    if run_id is None or table.num_rows == 0:
        return table
    others = sorted(set(table["run_id"].to_pylist()) - {run_id})
    if others:
        raise RecordsError(
            f"{source} holds rows of run {others[0]!r}, not of this run {run_id!r}: move it to "
            "its own run folder"
        )
    return table


def _merged(run_dir: Path) -> pa.Table:
    """Part rows, plus rows of results.parquet for (point, provider) pairs without a part."""
    meta_file = Path(run_dir) / META_FILE
    run_id = read_meta(run_dir).get("run_id") if meta_file.is_file() else None
    parts = [_own_rows(t, run_id, Path(run_dir) / PARTS_DIR) for t in _read_parts(run_dir)]
    done = {pair for table in parts for pair in _pairs(table)}
    consolidated = Path(run_dir) / RESULTS_FILE
    if consolidated.is_file():
        try:
            old = upgraded(pq.read_table(consolidated))
        except (OSError, pa.ArrowException, RecordsError) as exc:
            raise RecordsError(
                f"{consolidated} is unreadable ({exc}); restore it (from git, say), or delete it "
                f"to rebuild it from {PARTS_DIR}/ (a rerun then measures again what only it held)"
            ) from None
        old = _own_rows(old, run_id, consolidated)
        if not parts:
            return old
        keep = pa.array([pair not in done for pair in _pairs(old)], type=pa.bool_())
        parts.append(old.filter(keep))
    return pa.concat_tables(parts) if parts else SCHEMA.empty_table()


def consolidate(run_dir: Path) -> Path:
    """(Re)write results.parquet from the parts, with the run's meta; returns its path.

    Under the run's lock: a writer that read fewer parts cannot replace a fuller table.
    """
    run_dir = Path(run_dir)
    path = run_dir / RESULTS_FILE
    with locked(run_dir):
        table = _merged(run_dir).replace_schema_metadata(
            {META_KEY: json.dumps(run_meta(run_dir)).encode()}
        )
        _atomic_write(path, lambda f: pq.write_table(table, f))
    return path


def load_run(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """(rows, meta) of a run directory (parts merged in) or of a results Parquet file.

    meta["workers"] lists the processes that measured (gpu_names(rows) tells whether they mixed
    GPU models)."""
    path = Path(path)
    if path.is_dir():
        return _merged(path).to_pandas(), run_meta(path)
    if not path.is_file():
        raise RecordsError(f"{path}: no such run directory or Parquet file")
    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise RecordsError(f"{path} has no ssdbench metadata; not a results file")
    return upgraded(table).to_pandas(), json.loads(raw)


def options_json(options: Mapping) -> str:
    """The options column: JSON with infinite floats (dt_limit's upper end) spelled "inf"."""

    def plain(value):
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, float) and math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value

    return json.dumps({k: plain(v) for k, v in options.items()})


def error_message(exc: BaseException, limit: int = 500) -> str:
    """One line for the error column: exception type and the first line of its message."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"
