"""Run cuTile's SSD forward at a few shapes, a few times each, under an external profiler.

Nsight Compute is on the H200 node (`/usr/local/cuda/bin/ncu` 2025.3.1, counters readable). It
replays every profiled kernel and runs the SM at its base clock (1.35 GHz instead of 1.98), so
read its ratios (occupancy, stall reasons, pipe and memory utilisation), not its durations;
harness timing owns the times. Example (docs/performance.md, "compute_out under the profiler"):

    ncu --kernel-name regex:compute_out --launch-count 4 --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        --section SchedulerStats --section ComputeWorkloadAnalysis --section LaunchStats \
        python3 scripts/profile_point.py --shapes 65536:128:128,65536:128:128:128

Shapes and the variant are parsed by scripts/variants.py. Each shape runs `--calls` times (the
first compiles) with the point's default config, or with one `--variant name=JSON` over it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.inputs import make_inputs  # noqa: E402
from kernels.cutile.ssd import ssd_forward  # noqa: E402
from scripts.variants import parse_points, point_config, require_gpu  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", required=True, help="seqlen:nheads:dstate[:chunk],...")
    parser.add_argument("--calls", type=int, default=2, help="forward calls per shape")
    parser.add_argument("--variant", default="default={}", help="name=JSON overrides")
    args = parser.parse_args()
    problems, [(name, overrides)] = parse_points(parser, args.shapes, [args.variant])
    if args.calls < 1:
        parser.error(f"--calls must be >= 1, got {args.calls}")
    require_gpu(parser)
    for problem in problems:
        kwargs = make_inputs(problem, seed=0, device="cuda").kwargs()
        config = point_config(problem, overrides)
        print(f"{problem.key()} {name}: {config}", flush=True)
        for _ in range(args.calls):
            ssd_forward(**kwargs, config=config)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
