"""Run 163 probe: the clustered graph replays fine but the process dies at exit (rc 139).
Is it the graph's destruction (freeing a clustered kernel node), or module unload with a live graph?
    python3 .scratch/probe_cluster_free.py copy 2 free|keep"""

import gc
import os
import sys

import torch

sys.path.insert(0, ".scratch")
import cuda.tile as ct  # noqa: E402
from probe_cluster import copy_kernel  # noqa: E402

ctas, mode = int(sys.argv[2]), sys.argv[3]
a = torch.randn(1024, 64, device="cuda")
out = torch.empty_like(a)
kernel = copy_kernel.replace_hints(num_ctas=ctas) if ctas > 1 else copy_kernel
grid, args = (16, 1, 1), (a, out, 64, 64)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    ct.launch(torch.cuda.current_stream(), grid, kernel, args)
for _ in range(3):
    graph.replay()
torch.cuda.synchronize()
print("replayed, max err", (out - a).abs().max().item(), flush=True)
if mode in ("free", "free_exit"):
    graph.reset()
    del graph
    gc.collect()
    torch.cuda.synchronize()
    print("graph freed", flush=True)
    out.zero_()
    ct.launch(torch.cuda.current_stream(), grid, kernel, args)
    torch.cuda.synchronize()
    print("eager after free, max err", (out - a).abs().max().item(), flush=True)
if mode == "free_exit":
    os._exit(0)
print("leaving", flush=True)
