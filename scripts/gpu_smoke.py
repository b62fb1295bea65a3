"""GPU smoke test for a node set up from the offline bundle (README, "GPU nodes without internet").

Shows, with nothing but the bundle and the node's own torch/triton: a trivial cuTile kernel
compiles (tileiras 13.5) and runs; mamba_ssm's Triton forward agrees with our float64 reference at
a real shape (bf16, L=4096, H=64, P=64, N=128); our cuTile SSD forward agrees too.
Exit status 0 only if every check passes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import cuda.tile as ct
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.correctness import TOLERANCE, passes, relative_error  # noqa: E402
from harness.inputs import make_inputs  # noqa: E402
from harness.problem import Problem  # noqa: E402
from kernels.cutile.toolchain import tileiras_path, tileiras_version  # noqa: E402
from scripts.variants import require_gpu  # noqa: E402

TILE = 1024


@ct.kernel
def add_kernel(a, b, out, tile: ct.Constant[int]):
    block = ct.bid(0)
    total = ct.load(a, index=(block,), shape=(tile,)) + ct.load(b, index=(block,), shape=(tile,))
    ct.store(out, index=(block,), tile=total)


def check_cutile_add() -> bool:
    a = torch.rand(1 << 20, device="cuda")
    b = torch.rand_like(a)
    out = torch.full_like(a, float("nan"))
    start = time.perf_counter()
    ct.launch(torch.cuda.current_stream(), (a.numel() // TILE,), add_kernel, (a, b, out, TILE))
    torch.cuda.synchronize()
    ok = torch.equal(out, a + b)
    elapsed = time.perf_counter() - start
    print(f"cuTile vector add: {'OK' if ok else 'WRONG'} (compile+run {elapsed:.2f} s)")
    return ok


def check_ssd(name: str, forward, problem: Problem, reference) -> bool:
    inputs = make_inputs(problem, seed=2026, device="cuda")
    start = time.perf_counter()
    out = forward(**inputs.kwargs())
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    err = relative_error(out, reference)
    ok = passes(err, problem.dtype)
    print(
        f"{name} vs float64 reference: rel err {err:.3e} (tol {TOLERANCE[problem.dtype]:.0e}) "
        f"{'OK' if ok else 'WRONG'} (first call {first:.1f} s)"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    require_gpu(parser)
    props = torch.cuda.get_device_properties(0)
    print(
        f"GPU {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}; "
        f"cuda-tile {ct.__version__}; tileiras {tileiras_path()}: {tileiras_version()}"
    )
    from kernels.cutile.ssd import ssd_forward as cutile_forward
    from kernels.reference import ssd_forward as reference_forward
    from kernels.triton_ssd import ssd_forward as triton_forward

    problem = Problem(seqlen=4096, nheads=64, headdim=64, dstate=128, dtype="bfloat16")
    reference = reference_forward(**make_inputs(problem, seed=2026, device="cuda").kwargs())
    results = [
        check_cutile_add(),
        check_ssd("triton", triton_forward, problem, reference),
        check_ssd("cutile", cutile_forward, problem, reference),
    ]
    print("SMOKE", "PASSED" if all(results) else "FAILED")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
