#!/usr/bin/env python3
"""cuBLAS (PyTorch, bfloat16 in and out) at tinyrec-gemm16's products: x W^T, dX = dY W and dW = dY^T X for
(M,K,N) = (6208,512,3072) and (6208,1536,512). Per product: the median wall time of a call followed by a
synchronisation (as tinyrec-gemm16's wall figure and torch_compare.py's gemm rows), and the time per call of 20
calls back to back (CUDA events: the kernel with its launch hidden, nearest tinyrec-gemm16's kernel figure).

  python3 bench/gemm16_torch.py            (on a CUDA device)
"""
import time

import torch


def wall(f, reps=20):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def back_to_back(f, reps=20):
    for _ in range(3):
        f()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        f()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps / 1e3


def main():
    print("PyTorch %s on %s" % (torch.__version__, torch.cuda.get_device_name()))
    for (M, K, N) in ((6208, 512, 3072), (6208, 1536, 512)):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        g = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        flops = 2.0 * M * N * K
        for name, f in (("x W^T", lambda: torch.nn.functional.linear(x, w)), ("dX = dY W", lambda: g @ w),
                        ("dW = dY^T X", lambda: g.t() @ x)):
            t, k = wall(f), back_to_back(f)
            print("(%d,%d,%d) %-12s wall %8.1f us %7.1f TFLOP/s; back to back %8.1f us %7.1f TFLOP/s"
                  % (M, K, N, name, t * 1e6, flops / t / 1e12, k * 1e6, flops / k / 1e12))


if __name__ == "__main__":
    main()
