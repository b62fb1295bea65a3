"""Registers, spills and shared memory of the cuTile SSD kernels per launch configuration, on the
CPU (no GPU needed): compiles what the default sweep launches for each dstate and variant and reads
the cubin. A configuration that spills far more than the default is rarely worth device time.

    python scripts/kernel_resources.py --dstates 128,256 --tiles 256 \
        --variant base={} --variant rank1='{"out_rank1": 1}'

The builders' signatures leave out the shape and stride facts a launch derives from its tensors
(kernels/cutile/signatures.py, `array`), so their figures can differ from what runs. Three ways
to compile exactly what runs:

    # every launch of one forward at these shapes, built from meta tensors (no GPU needed)
    python scripts/kernel_resources.py --shapes 65536:128:128,2048:32:256:128 \
        --variant base={} --variant rank1='{"out_rank1": 1}'

    # the launches scripts/kernel_symbols.py recorded on a GPU, each with its occupancy hint
    python scripts/kernel_resources.py --symbols symbols.jsonl
    # one kernel name as Nsight Compute prints it, with the hint its config asked for
    python scripts/kernel_resources.py --occupancy 2 --symbol compute_out_kernel_Kt2_A4bf16_...
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.cutile.config import default_config  # noqa: E402
from scripts.variants import parse_points, parse_variant, point_config  # noqa: E402

ARCHS = ("sm_90", "sm_100")


def parse_dstates(text: str) -> list[int]:
    """ "64,128,256" as state sizes the kernels support (1 to 256)."""
    try:
        dstates = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--dstates {text!r} is not a comma-separated list of integers") from None
    bad = [n for n in dstates if not 1 <= n <= 256]
    if bad:
        raise ValueError(f"--dstates: {bad} outside 1..256, the state sizes the kernels support")
    return dstates


def read_symbols(path: Path) -> list[tuple[str, str, str, int]]:
    """(point, variant, symbol, occupancy hint) per line of a scripts/kernel_symbols.py file."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
            rows.append((row["point"], row["variant"], row["symbol"], int(row["occupancy"])))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}:{number} is not a kernel_symbols.py line ({err})") from None
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", help="seqlen:nheads:dstate[:chunk],... (exact launches)")
    parser.add_argument("--dstates", default="64,128,256", help="comma-separated state sizes")
    parser.add_argument(
        "--tiles", type=int, help="the problem's (chunk, head) output tiles (default: large)"
    )
    parser.add_argument("--segmented", action="store_true", help="the state walk split")
    parser.add_argument("--variant", action="append", default=[], help="name=JSON overrides")
    parser.add_argument("--arch", choices=ARCHS, default="sm_90")
    parser.add_argument("--symbol", action="append", default=[], help="a profiled kernel's name")
    parser.add_argument("--symbols", type=Path, help="JSON lines from scripts/kernel_symbols.py")
    parser.add_argument(
        "--occupancy", type=int, default=0, help="CTAs per SM hint for --symbol (0: none)"
    )
    args = parser.parse_args()
    try:
        dstates = parse_dstates(args.dstates)
        variants = [parse_variant(v) for v in args.variant] or [("default", {})]
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    from kernels.cutile.config import with_occupancy
    from kernels.cutile.resources import compile_resources
    from kernels.cutile.signatures import from_symbol, sweep_launches

    if args.occupancy < 0:
        parser.error(f"--occupancy must be >= 0, got {args.occupancy}")
    if args.shapes:
        from harness.inputs import meta_inputs
        from kernels.cutile.signatures import forward_launches

        problems, named = parse_points(parser, args.shapes, args.variant)
        launches = [
            (problem.key(), name, kernel_name, kernel, signature, 0)  # kernel has its hint
            for problem in problems
            for name, overrides in named
            for kernel_name, kernel, signature in forward_launches(
                meta_inputs(problem).kwargs(), point_config(problem, overrides)
            )
        ]
    elif args.symbol or args.symbols:
        try:
            recorded = [("", "", s, args.occupancy) for s in args.symbol]
            recorded += read_symbols(args.symbols) if args.symbols else []
            launches = [(p, v, *from_symbol(s), hint) for p, v, s, hint in recorded]
        except (OSError, ValueError) as err:
            parser.error(str(err))
    if args.shapes or args.symbol or args.symbols:
        print(f"{'point':<26} {'variant':<10} {'kernel':<22} {'regs':>5} {'local B':>8} "
              f"{'shared KB':>9}")  # fmt: skip
        for point, variant, name, kernel, signature, hint in launches:
            res = compile_resources(with_occupancy(kernel, hint), signature, args.arch)
            print(f"{point[:26]:<26} {variant[:10]:<10} {name:<22} {res.registers:>5} "
                  f"{res.local_bytes:>8} {res.shared_bytes / 1024:>9.1f}", flush=True)  # fmt: skip
        return 0
    print(
        f"{'dstate':>6} {'variant':<14} {'kernel':<15} {'regs':>5} {'local B':>8} {'shared KB':>9}"
    )
    for dstate in dstates:
        for name, overrides in variants:
            config = dataclasses.replace(default_config(dstate, args.tiles), **overrides)
            for kernel_name, kernel, signature in sweep_launches(dstate, config, args.segmented):
                res = compile_resources(kernel, signature, args.arch)
                print(
                    f"{dstate:>6} {name:<14} {kernel_name:<15} {res.registers:>5} "
                    f"{res.local_bytes:>8} {res.shared_bytes / 1024:>9.1f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
