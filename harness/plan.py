"""What a sweep would do, read without a GPU (`python run_bench.py dry_run=true`): its points,
each provider's verdict on each (run, or why it cannot), what the answers would be checked
against, and, for a run_id already on disk, which pairs a resume would skip.

Like nvbench's `--list`: a sweep on a GPU node costs device time, and a point a provider cannot
run, or a reference that would not fit, is better seen before it is paid for.
"""

from __future__ import annotations

from pathlib import Path

from harness import config, markdown, providers, records, runner, sharding
from harness.config import BenchConfig
from harness.problem import Problem, reference_gib


def existing_runs(bench: BenchConfig) -> list[Path]:
    """The runs on disk this job would resume, one per GPU model's folder: bench.run_id's, or
    with resume=true the newest of the same sweep and settings (runner.newest_resumable)."""
    results = Path(bench.results_dir)
    if bench.run_id is not None:
        return sorted(d.parent for d in results.glob(f"*/{bench.run_id}/meta.json"))
    if not bench.resume:
        return []
    found = (runner.newest_resumable(gpu, runner.config_dict(bench)) for gpu in results.glob("*"))
    return sorted(run for run in found if run is not None)


def recorded_pairs(runs: list[Path], retry_errors: bool) -> set[tuple[str, str]]:
    """(point, provider) pairs a resume of these runs would skip."""
    pairs: set[tuple[str, str]] = set()
    for run_dir in runs:
        pairs |= records.completed_points(run_dir, retry_errors)
    return pairs


def _label(problem: Problem, axes: list[str]) -> str:
    short = {"seqlen": "L", "nheads": "H", "dstate": "N", "headdim": "P", "ngroups": "G"}
    return " ".join(f"{short.get(a, a)}={getattr(problem, a)}" for a in axes) or problem.key()


def render(bench: BenchConfig) -> str:
    """The plan of one job as markdown: a summary line and one row per point of its shard."""
    points = config.validate(bench)
    mine = sharding.select(points, bench.shard.index, bench.shard.count)
    names = list(bench.providers.names)
    runs = existing_runs(bench)
    done = recorded_pairs(runs, bench.retry_errors)
    check = bench.check
    axes = [
        a for a in ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk_size")
        if len({getattr(p, a) for p in points}) > 1
    ]  # fmt: skip
    rows, measured = [], 0
    for problem in mine:
        cells = []
        for name in names:
            if (problem.key(), name) in done:
                cells.append("recorded")
                continue
            reason = providers.get(name).supports(problem)
            cells.append(f"cannot: {reason}" if reason else "run")
            measured += not reason
        gib = reference_gib(problem)
        against = "float64" if gib <= check.reference_max_gib else f"{check.fallback}'s answer"
        rows.append((_label(problem, axes), *cells, against, f"{gib:.1f}", f"`{problem.key()}`"))
    shard = f", shard {bench.shard.index} of {bench.shard.count}" if bench.shard.count > 1 else ""
    name = bench.run_id or (runs[0].name if runs else f"{bench.sweep.name}-<UTC time>")
    where = f"{bench.results_dir}/<gpu>/{name}"
    summary = (
        f"sweep {bench.sweep.name}{shard}: {len(mine)} of {len(points)} points x "
        f"{len(names)} providers, {measured} pairs to measure ({len(done & _pairs(mine, names))} "
        f"recorded); modes {', '.join(m.value for m in bench.timing.modes)}, "
        f"L2 {bench.timing.l2.value}, tune={bench.tune.value}, "
        f"triton_autotune={bench.triton_autotune.value}, "
        f"chunk_policy={bench.chunk_policy.value}, into {where}"
    )
    notes = [
        refusal
        for run_dir in runs
        if (refusal := runner.resume_refusal(run_dir, records.read_meta(run_dir), bench))
    ]
    if len(runs) > 1:
        gpus = ", ".join(run.parent.name for run in runs)
        notes.append(
            f"the run is on disk for {len(runs)} GPU models ({gpus}): `recorded` counts a pair "
            "measured on any of them, and a resume on one measures the others' pairs again"
        )
    header = ("point", *names, "checked against", "reference GiB", "key")
    notes_text = "".join(f"\nNote: {note}\n" for note in notes)
    return f"{summary}\n{notes_text}\n{markdown.table(header, rows)}\n"


def _pairs(problems: list[Problem], names: list[str]) -> set[tuple[str, str]]:
    return {(p.key(), name) for p in problems for name in names}
