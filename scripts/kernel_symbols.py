"""The exact specialisation of every cuTile kernel the SSD forward launches, as mangled names.

A launch specialises each kernel on facts of its tensors (size-1 axes, sizes divisible by 16,
strides divisible by 16 bytes). This runs the forward
once per shape and variant on a GPU, records what each `ct.launch` was given
(`KernelSignature.from_kernel_args`, which needs the CUDA driver) with the kernel's occupancy
hint, and writes one JSON line per launch. `scripts/kernel_resources.py --symbols FILE` then
compiles exactly those on any machine and reads their registers, spills and shared memory.
`kernel_resources.py --shapes` now builds the same launches on the CPU from meta tensors
(kernels/cutile/signatures.py, `forward_launches`); this script is how that is checked:
tests/kernels/test_signatures.py compares the CPU's names with the newest file it recorded, so a
new kernel constant means recording again on a GPU. `--names-only` records the names without
compiling or running the kernels (a name depends only on the arguments a launch is given): seconds
instead of minutes, for when only the names are wanted. Either way it needs a GPU: the arguments
are CUDA tensors and reading a launch's signature needs the CUDA driver.

    python scripts/kernel_symbols.py --shapes 65536:128:128,2048:32:256 \
        --variant base={} --variant rank1='{"out_rank1": 1}' --out symbols.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.variants import parse_points, point_config, require_gpu  # noqa: E402


def record_launches(problem, overrides: dict, run: bool = True) -> list[dict]:
    """Run cuTile's forward at `problem` with `overrides` over its default config; one record
    per launch: kernel name, occupancy hint, mangled symbol. `run=False` records each launch's
    arguments without compiling or launching the kernel."""
    import cuda.tile as ct
    import torch
    from cuda.tile.compilation import CallingConvention, KernelSignature

    from harness.inputs import make_inputs
    from kernels.cutile.ssd import ssd_forward

    kwargs = make_inputs(problem, seed=0, device="cuda").kwargs()
    config = point_config(problem, overrides)
    launched, real_launch = [], ct.launch

    def recording_launch(stream, grid, kernel, args, **options):
        signature = KernelSignature.from_kernel_args(
            kernel, args, CallingConvention.cutile_python_v2()
        )
        launched.append(
            {
                "kernel": kernel._pyfunc.__name__,
                "occupancy": kernel._compiler_options.occupancy or 0,  # the hint, if any
                "symbol": signature.symbol,
                "config": config.to_dict(),  # so the names can be rebuilt after defaults change
            }
        )
        if run:
            real_launch(stream, grid, kernel, args, **options)  # options: PDL

    ct.launch = recording_launch
    try:
        ssd_forward(**kwargs, config=config)
        torch.cuda.synchronize()
    finally:
        ct.launch = real_launch
    return launched


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", required=True, help="seqlen:nheads:dstate[:chunk],...")
    parser.add_argument("--variant", action="append", default=[], help="name=JSON overrides")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines file to append to")
    parser.add_argument(
        "--names-only",
        action="store_true",
        help="record the names on the GPU without compiling or running the kernels",
    )
    args = parser.parse_args()
    problems, variants = parse_points(parser, args.shapes, args.variant)
    require_gpu(parser)
    with args.out.open("a") as out:
        for problem in problems:
            for name, overrides in variants:
                for launch in record_launches(problem, overrides, run=not args.names_only):
                    row = {"point": problem.key(), "variant": name, **launch}
                    out.write(json.dumps(row) + "\n")
                    print(row["point"][:24], name, row["kernel"], row["occupancy"], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
