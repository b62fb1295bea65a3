"""Run 148 probe: does a cuTile kernel with num_ctas > 1 run on this sm_90 GPU?
Each case runs in its own process (a misaligned address poisons the CUDA context)."""

import sys

import cuda.tile as ct
import torch

ConstInt = ct.Constant[int]


@ct.kernel
def copy_kernel(a, b, TM: ConstInt, TN: ConstInt):
    t = ct.load(a, index=(ct.bid(0), 0), shape=(TM, TN))
    ct.store(b, index=(ct.bid(0), 0), tile=t * 2.0)


@ct.kernel
def mm_kernel(a, b, c, TM: ConstInt, TN: ConstInt, TK: ConstInt, K: ConstInt):
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(K // TK):
        x = ct.load(a, index=(ct.bid(0), k), shape=(TM, TK))
        y = ct.load(b, index=(k, ct.bid(1)), shape=(TK, TN))
        acc = ct.mma(x, y, acc)
    ct.store(c, index=(ct.bid(0), ct.bid(1)), tile=acc.astype(c.dtype))


def main(case: str, ctas: int) -> None:
    s = torch.cuda.current_stream()
    if case == "copy":
        a = torch.randn(1024, 64, device="cuda")
        b = torch.empty_like(a)
        k = copy_kernel.replace_hints(num_ctas=ctas) if ctas > 1 else copy_kernel
        ct.launch(s, (1024 // 64, 1, 1), k, (a, b, 64, 64))
        torch.cuda.synchronize()
        print(case, ctas, "err", (b - 2 * a).abs().max().item())
    else:
        a = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(512, 128, device="cuda", dtype=torch.bfloat16)
        k = mm_kernel.replace_hints(num_ctas=ctas) if ctas > 1 else mm_kernel
        ct.launch(s, (512 // 64, 128 // 64, 1), k, (a, b, c, 64, 64, 64, 256))
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        print(case, ctas, "rel err", ((c.float() - ref).norm() / ref.norm()).item())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
