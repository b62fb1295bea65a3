"""For the next session (after run 162): is capturing any clustered cuTile launch into a CUDA
graph what aborts, or only the walk's? One process per case:
    python3 .scratch/probe_cluster_capture.py copy 2    (copy | mm, num_ctas 1 | 2 | 4)
Runs the kernel eagerly, then captures one launch in torch.cuda.graph and replays it."""

import sys

import torch

sys.path.insert(0, ".scratch")
import cuda.tile as ct  # noqa: E402
from probe_cluster import copy_kernel, mm_kernel  # noqa: E402

case, ctas = sys.argv[1], int(sys.argv[2])
if case == "copy":
    a = torch.randn(1024, 64, device="cuda")
    out = torch.empty_like(a)
    kernel, grid, args = copy_kernel, (1024 // 64, 1, 1), (a, out, 64, 64)
else:
    a = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(512, 128, device="cuda", dtype=torch.bfloat16)
    kernel, grid, args = mm_kernel, (512 // 64, 128 // 64, 1), (a, b, out, 64, 64, 64, 256)
kernel = kernel.replace_hints(num_ctas=ctas) if ctas > 1 else kernel
ct.launch(torch.cuda.current_stream(), grid, kernel, args)
torch.cuda.synchronize()
print(case, ctas, "eager ok", flush=True)
out.zero_()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    ct.launch(torch.cuda.current_stream(), grid, kernel, args)
graph.replay()
torch.cuda.synchronize()
print(case, ctas, "graph ok, output sum", out.float().sum().item(), flush=True)
