"""Registers, spills and shared memory of the cuTile SSD kernels per launch, on the CPU (no GPU
needed): compiles exactly what a forward launches and reads each cubin. A configuration that
spills, or needs far more registers than the default, is rarely worth device time. `threads` is
what a CTA is built for and `rf CTAs` how many such CTAs an SM's register file holds: 1 means
nothing else runs beside it, whatever the shared memory.

    # every launch of one forward at these shapes and variants, built from meta tensors
    python scripts/kernel_resources.py --shapes 65536:128:128,2048:32:256:128 \
        --variant base={} --variant rank1='{"out_rank1": 1}'
    # the launches scripts/kernel_symbols.py recorded on a GPU, each with its occupancy hint
    python scripts/kernel_resources.py --symbols symbols.jsonl
    # one kernel name as Nsight Compute prints it, with the hint its config asked for
    python scripts/kernel_resources.py --occupancy 2 --symbol compute_out_kernel_Kt2_A4bf16_...
    # also count and hash the machine code (nvdisasm): equal hashes, nothing to time
    python scripts/kernel_resources.py --sass --shapes 65536:32:256:128 \
        --variant base={} --variant lat8='{"out_latency": 8}'
    # one kernel only (a survey of one knob over many shapes compiles nothing else)
    python scripts/kernel_resources.py --sass --kernel fwd_pass_state --shapes 16384:64:256:256 \
        --variant base={} --variant lat8='{"state_latency": 8}'
    # the machine code itself, one file per launch, to read where a build waits (change 68)
    python scripts/kernel_resources.py --kernel compute_out --sass-dir /tmp/sass \
        --shapes 65536:128:64:128
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.variants import parse_points, point_config  # noqa: E402

ARCHS = ("sm_90", "sm_100")


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", help="seqlen:nheads:dstate[:chunk],...")
    parser.add_argument("--variant", action="append", default=[], help="name=JSON overrides")
    parser.add_argument("--symbol", action="append", default=[], help="a profiled kernel's name")
    parser.add_argument("--symbols", type=Path, help="JSON lines from scripts/kernel_symbols.py")
    parser.add_argument(
        "--occupancy", type=int, default=0, help="CTAs per SM hint for --symbol (0: none)"
    )
    parser.add_argument(
        "--kernel", help="compile only the launches of this kernel (fwd_pass_state, compute_out…)"
    )
    parser.add_argument("--arch", choices=ARCHS, default="sm_90")
    parser.add_argument(
        "--sass", action="store_true", help="add the machine code's instruction count and hash"
    )
    parser.add_argument(
        "--sass-dir", type=Path, help="also write each launch's machine code (nvdisasm) here"
    )
    args = parser.parse_args()
    if not (args.shapes or args.symbol or args.symbols):
        parser.error("give --shapes, --symbol or --symbols: what to compile")
    if args.occupancy < 0:
        parser.error(f"--occupancy must be >= 0, got {args.occupancy}")
    from kernels.cutile import KERNEL_PREFIXES

    if args.kernel is not None and args.kernel not in KERNEL_PREFIXES:
        parser.error(f"--kernel must be one of {', '.join(KERNEL_PREFIXES)}, got {args.kernel!r}")
    from harness.inputs import meta_inputs
    from kernels.cutile.config import with_occupancy
    from kernels.cutile.resources import (
        compile_cubin,
        disassemble,
        listing_digest,
        nvdisasm,
        read_cubin,
        register_file_ctas,
    )
    from kernels.cutile.signatures import forward_launches, from_symbol

    launches = []  # (point, variant, kernel name, kernel with its hint, signature)
    if args.shapes:
        problems, variants = parse_points(parser, args.shapes, args.variant)
        for problem in problems:
            for variant, overrides in variants:
                config = point_config(problem, overrides)
                for name, kernel, signature in forward_launches(
                    meta_inputs(problem).kwargs(), config
                ):
                    launches.append((problem.key(), variant, name, kernel, signature))
    try:
        recorded = [("", "", s, args.occupancy) for s in args.symbol]
        recorded += read_symbols(args.symbols) if args.symbols else []
        for point, variant, symbol, hint in recorded:
            name, kernel, signature = from_symbol(symbol)
            launches.append((point, variant, name, with_occupancy(kernel, hint), signature))
    except (OSError, ValueError) as err:
        parser.error(str(err))
    if args.kernel is not None:
        launches = [launch for launch in launches if launch[2].startswith(args.kernel)]
    tool = nvdisasm() if args.sass or args.sass_dir else None
    if (args.sass or args.sass_dir) and tool is None:
        parser.error("--sass and --sass-dir need nvdisasm (on PATH, or in the triton package)")
    if args.sass_dir:
        args.sass_dir.mkdir(parents=True, exist_ok=True)
    sass_header = f" {'instrs':>6} {'sass':<12}" if args.sass else ""
    width = max([5, *(len(launch[0]) for launch in launches)])  # whole keys: chunk lengths differ
    named = max([7, *(len(launch[1]) for launch in launches)])
    print(f"{'point':<{width}} {'variant':<{named}} {'kernel':<24} {'regs':>5} {'threads':>7} "
          f"{'rf CTAs':>7} {'local B':>8} {'shared KB':>9}{sass_header}")  # fmt: skip
    for index, (point, variant, name, kernel, signature) in enumerate(launches):
        cubin = compile_cubin(kernel, signature, args.arch)
        res = read_cubin(cubin)
        listing = disassemble(cubin, tool) if tool else ""
        sass = " {:>6} {:<12}".format(*listing_digest(listing)) if args.sass else ""
        if args.sass_dir:
            # numbered: two --symbol launches have no point or variant to tell them apart
            stem = f"{index:03d}_{point or 'symbol'}_{variant or 'recorded'}_{name}"
            (args.sass_dir / f"{stem}.sass").write_text(listing)
        shared_kb = res.shared_bytes / 1024
        rf_ctas = register_file_ctas(res)
        print(f"{point:<{width}} {variant:<{named}} {name:<24} {res.registers:>5} "
              f"{res.threads or '?':>7} {rf_ctas or '?':>7} {res.local_bytes:>8} "
              f"{shared_kb:>9.1f}{sass}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
