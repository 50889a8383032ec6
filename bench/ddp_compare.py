#!/usr/bin/python3
"""PyTorch DistributedDataParallel twin of tinyrec-train's data-parallel training, for the scaling table
(docs/distributed.md): the model of bench/torch_compare.py (TRM or HRM, one supervision step from a fresh
carry, stablemax CE + BCE on q_halt, AdamATan2), one process per GPU, gradients all-reduced by DDP over NCCL.

    torchrun --standalone --nproc_per_node=N bench/ddp_compare.py --preset trm-sudoku-mlp --batch 768 \\
             --dtype bfloat16 [--steps 30] [--warmup 5]

--batch is the rows per GPU (the global batch is N x --batch). Rank 0 prints one JSON line: the step time
(median of --steps, every rank synchronized), samples/s of the job and per GPU, and the time of one NCCL
all-reduce of all the gradients (fp32, as DDP sends them) measured alone.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from torch_compare import PRESETS, rope_tables, twin_block, width


class Twin(nn.Module):
    """The parameters and the forward of one training supervision step (the graph torch_compare.py times)."""

    def __init__(self, p):
        super().__init__()
        self.p = p
        D, H, Lp = p.get("D", 512), p.get("H", 8), p.get("Lp", 16)
        self.D, self.H, self.Lp, self.S = D, H, Lp, p["L"] + Lp
        self.hd = D // H
        I, It = width(D), width(self.S)

        def lin(o, i):
            return nn.Parameter(torch.randn(o, i) / math.sqrt(i))

        def layer():
            ly = nn.ParameterDict({"gu": lin(2 * I, D), "down": lin(D, I)})
            if p["mlp_t"]:
                ly.update({"tgu": lin(2 * It, self.S), "tdown": lin(self.S, It)})
            else:
                ly.update({"qkv": lin(3 * D, D), "o": lin(D, D)})
            return ly

        self.layers = nn.ModuleList([layer() for _ in range(p.get("L_layers", 2))])
        self.H_mod = nn.ModuleList([layer() for _ in range(p.get("H_layers", 0))])
        self.W_tok, self.W_lm = lin(p["V"], D), lin(p["V"], D)
        self.W_q = nn.Parameter(torch.zeros(2, D))
        self.b_q = nn.Parameter(torch.full((2,), -5.0))
        self.register_buffer("H_init", torch.randn(D))
        self.register_buffer("L_init", torch.randn(D))
        cos, sin = rope_tables(self.S, self.hd, "cpu")
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def block(self, h, ly):
        return twin_block(h, ly, self.p["mlp_t"], self.H, self.cos, self.sin)

    def net(self, z, inj, mod):
        h = z + inj
        for ly in mod:
            h = self.block(h, ly)
        return h

    def inner(self, zH, zL, x, grad):
        p, T, n = self.p, self.p["T"], self.p["n"]
        if p.get("hrm"):  # the 1-step gradient: only the last L_level and H_level applications
            with torch.no_grad():
                for t in range(T):
                    for i in range(n):
                        if t < T - 1 or i < n - 1:
                            zL = self.net(zL, zH + x, self.layers)
                    if t < T - 1:
                        zH = self.net(zH, zL, self.H_mod)
            with torch.enable_grad() if grad else torch.no_grad():
                zL = self.net(zL, zH + x, self.layers)
                zH = self.net(zH, zL, self.H_mod)
        else:
            for t in range(T):
                with torch.enable_grad() if (grad and t == T - 1) else torch.no_grad():
                    for _ in range(n):
                        zL = self.net(zL, zH + x, self.layers)
                    zH = self.net(zH, zL, self.layers)
        logits = F.linear(zH[:, self.Lp:], self.W_lm)
        q = F.linear(zH[:, 0], self.W_q, self.b_q)
        return zH.detach(), zL.detach(), logits, q

    def forward(self, tokens, labels):
        B, S, D = tokens.shape[0], self.S, self.D
        x = math.sqrt(D) * torch.cat([torch.zeros(B, self.Lp, D, device=tokens.device), self.W_tok[tokens]], 1)
        zH = self.H_init.expand(B, S, D).clone()
        zL = self.L_init.expand(B, S, D).clone()
        zH, zL, logits, q = self.inner(zH, zL, x, True)
        xd = logits.double()
        sm = torch.where(xd < 0, 1 / (1 - xd + 1e-30), xd + 1)
        ce = -torch.log(sm / sm.sum(-1, keepdim=True)).gather(-1, labels[..., None]).squeeze(-1).mean(-1).sum()
        correct = (logits.argmax(-1) == labels).all(-1).to(q.dtype)
        loss = ce + 0.5 * F.binary_cross_entropy_with_logits(q[:, 0], correct, reduction="sum")
        if self.p.get("hrm"):  # the Q-learning target of q_continue: a second no-grad step from the new carry
            with torch.no_grad():
                q2 = self.inner(zH, zL, x.detach(), False)[3]
                target = torch.sigmoid(torch.maximum(q2[:, 0], q2[:, 1]))
            loss = loss + 0.5 * F.binary_cross_entropy_with_logits(q[:, 1], target, reduction="sum")
        return loss / B


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="trm-sudoku-mlp", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=768, help="rows per GPU")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    p = PRESETS[args.preset]
    model = Twin(p).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    params = [t for t in model.parameters()]
    state = [(torch.zeros_like(t), torch.zeros_like(t)) for t in params]
    ema = [t.detach().clone() for t in params]
    low = torch.bfloat16 if args.dtype == "bfloat16" else None
    g = torch.Generator(device=dev).manual_seed(1 + rank)
    tok = torch.randint(1, p["V"], (args.batch, p["L"]), device=dev, generator=g)
    lab = torch.randint(1, p["V"], (args.batch, p["L"]), device=dev, generator=g)

    def step(s):
        if low is not None:
            with torch.autocast("cuda", dtype=low, cache_enabled=False):
                loss = ddp(tok, lab)
        else:
            loss = ddp(tok, lab)
        loss.backward()  # DDP all-reduces the gradients (averaged) in buckets during the backward
        with torch.no_grad():
            bc1, bc2 = 1 - 0.9 ** s, 1 - 0.95 ** s
            for i, t in enumerate(params):
                m, v = state[i]
                t.mul_(1 - 1e-4)
                m.lerp_(t.grad, 0.1)
                v.lerp_(t.grad.square(), 0.05)
                t.sub_((1e-4 / bc1) * torch.atan2(m, v.sqrt() / math.sqrt(bc2)))
                t.grad = None
                if not p.get("hrm"):
                    ema[i].mul_(0.999).add_(t, alpha=0.001)

    for s in range(1, args.warmup + 1):
        step(s)
    torch.cuda.synchronize()
    ts = []
    for s in range(args.warmup + 1, args.warmup + args.steps + 1):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(s)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    step_s = ts[len(ts) // 2]
    # one all-reduce of every gradient (fp32), alone: what the step's communication costs when nothing hides it
    nparams = sum(t.numel() for t in params)
    buf = torch.ones(nparams, device=dev)
    for _ in range(3):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    ar = []
    for _ in range(10):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        torch.cuda.synchronize()
        ar.append(time.perf_counter() - t0)
    ar.sort()
    if rank == 0:
        print(json.dumps({"framework": "pytorch-ddp", "torch": torch.__version__, "preset": args.preset, "dtype": args.dtype,
                          "gpus": world, "rows_per_gpu": args.batch, "step_ms": round(1e3 * step_s, 2),
                          "samples_per_s": round(world * args.batch / step_s, 1), "samples_per_s_per_gpu": round(args.batch / step_s, 1),
                          "params": nparams, "allreduce_mb": round(4 * nparams / 1e6, 2), "allreduce_ms": round(1e3 * ar[len(ar) // 2], 3)}),
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
