"""Compare cuTile SSD launch configurations at a few shapes, per kernel, on one GPU.

For trying a kernel change before it becomes a default: every variant (a set of SSDConfig fields
over the point's `default_config`) is first checked against the float64 reference at the point's
own inputs (output and final states, poisoned allocator), then timed with the harness's own
timing (CUDA-graph replay, cold L2, all variants and Triton interleaved) and its per-kernel device
times. Prints one table at the end and, with --out, appends every row as a JSON line as soon as
it is measured, after a first line with the environment (GPU, driver, versions, git commit); each
row carries the GPU's clocks read as its shape's graph timing ended, and a held clock is named on
stderr.

    python scripts/compare_configs.py --shapes 16384:64:256,65536:32:64 \
        --variant base={} --variant cb='{"out_cb": 1}'

`--tuned` adds the variant `tuned`: the cuTile tuner's pick at each shape (`tune=cached`, so
SSDBENCH_TUNING_CACHE is read and a shape without an entry is searched first); the search's record
is printed and logged before the shape's rows.

`--no-final-states` runs the forwards as the default sweep does, returning no final states (a
segmented walk may then skip segment_scan; the final-state error is NaN).

`--eager` also times every call in eager mode (CUDA events around the whole Python call on an idle
GPU, host work included, as the sweep's eager rows): where a variant changes what the host does
per forward (a second stream, say), graph replay hides it. Each eager sample follows an untimed
call of its own variant (`TimingPolicy.eager_after_self`): in plain A B C order the variant after
Triton paid up to 90 µs for following it (run 225), which runs 220-222 and 224 charged to the
first variant.

`--tree NAME=DIR` adds the kernels of another commit, copied by scripts/kernel_tree.py into
DIR/kernels_NAME, run with their own default configs and checked and timed like the variants.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import correctness, environment  # noqa: E402
from harness.config import TimingConfig  # noqa: E402
from harness.inputs import make_inputs  # noqa: E402
from harness.problem import Problem, working_set_bytes  # noqa: E402
from harness.timing import Call, CudaTimer, TimingPolicy, measure  # noqa: E402
from kernels import reference, triton_ssd  # noqa: E402
from kernels.cutile import KERNEL_PREFIXES  # noqa: E402
from kernels.cutile.autotune import configure  # noqa: E402
from kernels.cutile.ssd import ssd_forward  # noqa: E402
from scripts.variants import (  # noqa: E402
    check_name,
    check_unique,
    parse_points,
    point_config,
    require_gpu,
)


def check(problem: Problem, forward: Callable, ref) -> tuple[float, float]:
    """(relative error of out, of final states: NaN where the problem asks for none) against
    `ref`, the float64 reference's result (out alone, or (out, final states))."""
    forward()  # once-only work (Triton's autotuning) outside the poisoned pool
    with correctness.poisoned_allocations("cuda", working_set_bytes(problem)):
        result = forward()
    if not problem.return_final_states:
        return correctness.relative_error(result, ref), float("nan")
    out, final = result
    return correctness.relative_error(out, ref[0]), correctness.relative_error(final, ref[1])


def log(path: Path | None, row: dict) -> None:
    """Print one JSON line and append it to `path` (--out) as soon as it is known."""
    line = json.dumps(row)
    print(line, flush=True)
    if path:
        with path.open("a") as out:
            out.write(line + "\n")


def load_trees(parser: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, Callable]]:
    """(name, ssd_forward) of each NAME=DIR: the package DIR/kernels_NAME."""
    trees = []
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep or not (Path(folder) / f"kernels_{name}").is_dir():
            parser.error(f"--tree {spec!r}: expected NAME=DIR with DIR/kernels_NAME in it")
        try:
            check_name(name, f"--tree {spec!r}")
        except ValueError as err:
            parser.error(str(err))
        sys.path.insert(0, str(Path(folder).resolve()))
        trees.append((name, importlib.import_module(f"kernels_{name}.cutile.ssd").ssd_forward))
    return trees


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes", required=True, help="seqlen:nheads:dstate[:chunk],... (bf16, P=64)"
    )
    parser.add_argument("--variant", action="append", default=[], help="name=JSON overrides")
    parser.add_argument("--max-seconds", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR (kernel_tree.py)")
    parser.add_argument("--tuned", action="store_true", help="add the tuner's pick per shape")
    parser.add_argument(
        "--no-final-states",
        action="store_true",
        help="forwards that return no final states, as the default sweep's problems",
    )
    parser.add_argument(
        "--eager", action="store_true", help="also time eager mode (host work included)"
    )
    args = parser.parse_args()
    problems, variants = parse_points(
        parser, args.shapes, args.variant, final_states=not args.no_final_states
    )
    trees = load_trees(parser, args.tree)
    try:
        check_unique([name for name, _ in variants] + [name for name, _ in trees])
    except ValueError as err:
        parser.error(str(err))
    require_gpu(parser)
    triton_ssd.check_c_compiler()
    policy = TimingPolicy(max_seconds=args.max_seconds, min_reps=10, eager_after_self=True)
    timer = CudaTimer()
    if args.out:
        env = {"environment": environment.capture(0), "argv": sys.argv[1:]}
        with args.out.open("a") as out:
            out.write(json.dumps(env) + "\n")
    rows = []
    for problem in problems:
        inputs = make_inputs(problem, seed=0, device="cuda")
        kwargs = inputs.kwargs()
        tuned = []
        if args.tuned:
            config, record = configure(kwargs, "cached")
            log(args.out, {"point": problem.key(), "tuning": record})
            tuned = [("tuned", functools.partial(ssd_forward, **kwargs, config=config))]
        ref = reference.ssd_forward(**kwargs)
        calls = [Call("triton", functools.partial(triton_ssd.ssd_forward, **kwargs),
                      triton_ssd.KERNEL_NAMES)]  # fmt: skip
        errors = {}
        broken = {}  # name: why its check raised; kept as a row of its own, never timed
        forwards = (
            [
                (name, functools.partial(ssd_forward, **kwargs, config=point_config(problem, o)))
                for name, o in variants
            ]
            + [(name, functools.partial(forward, **kwargs)) for name, forward in trees]
            + tuned
        )
        for name, fn in forwards:
            try:
                errors[name] = check(problem, fn, ref)
            except Exception as exc:  # one broken variant must not lose the others
                broken[name] = f"{type(exc).__name__}: {exc}"
                print(f"{problem.key()} {name}: {broken[name]}", file=sys.stderr)
                continue
            calls.append(Call(name, fn, KERNEL_PREFIXES))
        del ref
        graph = {m.name: m for m in measure(calls, "graph", policy, timer)}
        clocks = environment.clocks(0)  # as the graph timing ended, as the sweep reads it
        held = environment.held_clock(clocks, TimingConfig.held_floor)
        if held:
            print(f"{problem.key()}: timed at a held SM clock ({held})", file=sys.stderr)
        kernels = {m.name: m for m in measure(calls, "kernels", policy, timer)}
        eager = {m.name: m for m in measure(calls, "eager", policy, timer)} if args.eager else {}
        base = graph["triton"].summary.median if graph["triton"].summary else float("nan")
        for call in calls:
            g, k = graph[call.name], kernels[call.name]
            ms = g.summary.median if g.summary else float("nan")
            e = eager.get(call.name)
            rows.append(
                {
                    "point": problem.key(),
                    "variant": call.name,
                    "err_out": errors.get(call.name, (None, None))[0],
                    "err_final": errors.get(call.name, (None, None))[1],
                    "graph_ms": ms,
                    "speedup": base / ms,
                    "eager_ms": e.summary.median if e and e.summary else None,
                    "kernel_ms": {n: round(t, 4) for n, t in k.kernel_ms.items()},
                    "error": g.error or k.error or (e.error if e else ""),
                    "gpu_clocks": clocks,
                }
            )
            log(args.out, rows[-1])
        for name, why in broken.items():
            nan = float("nan")
            rows.append(
                {"point": problem.key(), "variant": name, "err_out": nan, "err_final": nan,
                 "graph_ms": nan, "speedup": nan, "eager_ms": None, "kernel_ms": {},
                 "error": why, "gpu_clocks": clocks}
            )  # fmt: skip
            log(args.out, rows[-1])
    print(
        f"\n{'point':<46} {'variant':<14} {'err':>8} {'graph ms':>9} {'x':>6} {'eager ms':>9}"
        "  kernels"
    )
    for r in rows:
        err = "" if r["err_out"] is None else f"{r['err_out']:.1e}"
        kern = " ".join(f"{n[:12]}={t:.3f}" for n, t in r["kernel_ms"].items()) or r["error"][:80]
        eager_ms = "" if r["eager_ms"] is None else f"{r['eager_ms']:.4f}"
        print(
            f"{r['point'][:46]:<46} {r['variant']:<14} {err:>8} {r['graph_ms']:>9.4f} "
            f"{r['speedup']:>6.3f} {eager_ms:>9}  {kern}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
