#!/usr/bin/python3
"""Side-by-side: the same TRM or HRM config in PyTorch and in tinyrec.h, on this machine, in one run.

    /usr/bin/python3 bench/torch_compare.py [--preset trm-sudoku-mlp] [--batch 64] [--threads 2]
                                            [--reps 3] [--device cpu|cuda] [--peak-gflops G]
                                            [--simd avx2|avx512] [--attention auto|sdpa|explicit]
                                            [--dtype float32|bfloat16|float16] [--compile]

It times, in PyTorch (fp32; on CUDA with TF32 off, plus a bf16 autocast reference line):
  - one training supervision step (TRM: T-1 no-grad cycles, the last with grad; HRM: everything
    no-grad but the last L_level and H_level applications, plus the Q-learning target's second
    no-grad step; stablemax CE in float64 + 0.5 BCE on q_halt (and q_continue for HRM),
    backward, AdamATan2, EMA for TRM) at --batch,
  - one inference supervision step (no grad) at batch 1 and --batch,
  - x . W^T GEMMs at (M,K,N) = (6208,512,3072) and (6208,1536,512),
then runs build/tinyrec-bench --json with the same preset, batch and thread count, and prints
the ratios (tinyrec / PyTorch throughput). On the CPU it uses the "tuned" PyTorch setup of
../shared/docs/perf-baseline.md (OpenMP OpenBLAS, no mmap churn), re-executing itself with
those variables when they are missing. Needs Debian's python3-torch (and libopenblas0-openmp).
Presets: the reference ones (D=512) and the CPU-sized sudoku-tiny (the demo's model) and sudoku-small.
--dtype bfloat16|float16 runs PyTorch's training and inference steps and GEMMs under torch.autocast in that
precision (the reference's own setting; float16 needs CUDA or a torch whose CPU autocast has it) and
tinyrec-bench with --dtype; --compile also times the PyTorch training step under torch.compile where the
torch has it.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

TUNED = {
    "LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu/openblas-openmp",
    "GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736",
}

PRESETS = {  # the fields tinyrec's presets use (see tr_model_config_preset)
    "trm-sudoku-mlp": dict(V=11, L=81, mlp_t=True, rope=False, T=3, n=6),
    "trm-sudoku-att": dict(V=11, L=81, mlp_t=False, rope=True, T=3, n=6),
    "trm-maze": dict(V=6, L=900, mlp_t=False, rope=True, T=3, n=4),
    "trm-arc": dict(V=12, L=900, mlp_t=False, rope=True, T=3, n=4),
    # HRM: H_level and L_level of 4 blocks each, T = n = 2, a 1-token puzzle prefix, no EMA
    "hrm-sudoku": dict(V=11, L=81, mlp_t=False, rope=True, T=2, n=2, hrm=True, Lp=1, H_layers=4, L_layers=4),
    "hrm-maze": dict(V=6, L=900, mlp_t=False, rope=True, T=2, n=2, hrm=True, Lp=1, H_layers=4, L_layers=4),
    # the CPU-sized TRMs: the demo's model (sudoku-tiny, D=64) and sudoku-small (D=128); a 2-token puzzle prefix
    "sudoku-tiny": dict(V=11, L=81, mlp_t=True, rope=False, T=2, n=2, D=64, H=4, Lp=2),
    "sudoku-small": dict(V=11, L=81, mlp_t=True, rope=False, T=3, n=4, D=128, H=4, Lp=2),
}



# The twin's pieces that bench/ddp_compare.py shares. torch is imported where they run: main() sets the
# thread variables before the first import.
def width(d):
    """The SwiGLU's hidden width for model width d (the reference's rounding to 256)."""
    return 256 * math.ceil(round(4 * d * 2 / 3) / 256)


def rope_tables(S, hd, device):
    """RoPE's cos and sin for S positions and head size hd."""
    import torch
    pos = torch.arange(S, device=device, dtype=torch.float32)
    inv = 10000.0 ** (-torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd)
    ang = torch.cat([pos[:, None] * inv[None], pos[:, None] * inv[None]], -1)
    return ang.cos(), ang.sin()


def rms(x):
    import torch
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5)


def swiglu(x, gu, down):
    import torch.nn.functional as F
    g, u = F.linear(x, gu).chunk(2, -1)
    return F.linear(F.silu(g) * u, down)


def rot(x):
    import torch
    a, b = x.chunk(2, -1)
    return torch.cat([-b, a], -1)


def twin_block(h, ly, mlp_t, H, cos, sin, sdpa=True):
    """One post-norm block on h (B, S, D): the token mix (an MLP over positions, or RoPE attention with H
    heads), then the SwiGLU MLP. sdpa: PyTorch's fused attention, else the plain softmax product."""
    import torch
    import torch.nn.functional as F
    if mlp_t:
        ht = h.transpose(1, 2)
        h = rms(ht + swiglu(ht, ly["tgu"], ly["tdown"])).transpose(1, 2)
    else:
        B, S, D = h.shape
        hd = D // H
        qkv = F.linear(h, ly["qkv"]).view(B, S, 3 * H, hd)
        q, k, v = qkv[:, :, :H], qkv[:, :, H:2 * H], qkv[:, :, 2 * H:]
        q, k = q * cos[:, None] + rot(q) * sin[:, None], k * cos[:, None] + rot(k) * sin[:, None]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if sdpa:  # fused attention, as a careful port of the reference's flash_attn would run it
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), -1) @ v
        h = rms(h + F.linear(a.transpose(1, 2).reshape(B, S, D), ly["o"]))
    return rms(h + swiglu(h, ly["gu"], ly["down"]))


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="trm-sudoku-mlp", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--peak-gflops", type=float, default=0.0)
    ap.add_argument("--bench", default="build/tinyrec-bench")
    ap.add_argument("--skip-tinyrec", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also print PyTorch's N slowest kernels (torch.profiler) over one training step")
    ap.add_argument("--tinyrec-device", default=None,
                    help="device for tinyrec-bench (default: opencl with --device cuda, else cpu)")
    ap.add_argument("--attention", default="auto", choices=["auto", "sdpa", "explicit"],
                    help="PyTorch's attention: F.scaled_dot_product_attention (auto: where this torch has it) or softmax(QK^T)V")
    ap.add_argument("--simd", default=None, choices=["avx2", "avx512"],
                    help="CPU: both sides limited to this vector set (tinyrec --simd; PyTorch ATEN_CPU_CAPABILITY and "
                         "OpenBLAS OPENBLAS_CORETYPE), to stand in for a CPU without AVX-512")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="both sides in this forward precision (PyTorch: torch.autocast; tinyrec: --dtype)")
    ap.add_argument("--compile", action="store_true", help="also time PyTorch's training step under torch.compile")
    ap.add_argument("--json-out", default=None, metavar="FILE",
                    help="also write the summary (the JSON line) to FILE, for tinyrec-bench --svg and docs/perf/")
    return ap.parse_args()


def main():
    args = parse()
    if args.device == "cpu" and os.environ.get("TINYREC_TUNED") != "1":
        env = dict(os.environ, TINYREC_TUNED="1", OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads), **TUNED)
        # OpenBLAS's kernels for the vector set PyTorch may use: a machine-wide OPENBLAS_CORETYPE=Haswell
        # (this project's machines set one) would hold PyTorch's GEMMs to AVX2 on an AVX-512 CPU
        # (208 against 338 GFLOP/s for x.W^T (6208,512,3072) on 2 Zen 5 cores).
        avx512 = " avx512f" in open("/proc/cpuinfo").read()
        if args.simd == "avx2":
            env.update(ATEN_CPU_CAPABILITY="avx2", OPENBLAS_CORETYPE="Haswell")
        elif avx512:
            env.update(ATEN_CPU_CAPABILITY="avx512", OPENBLAS_CORETYPE="SkylakeX")
        os.execve(sys.executable, [sys.executable] + sys.argv, env)

    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = torch.device(args.device)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    p = PRESETS[args.preset]
    D, H, Lp = p.get("D", 512), p.get("H", 8), p.get("Lp", 16)
    hrm = p.get("hrm", False)
    S, V, L = p["L"] + Lp, p["V"], p["L"]
    hd = D // H
    SDPA = args.attention == "sdpa" or (args.attention == "auto" and hasattr(F, "scaled_dot_product_attention"))

    I, It = width(D), width(S)

    def lin(o, i):
        return (torch.randn(o, i, device=dev) / math.sqrt(i)).requires_grad_()

    def make_layer():
        ly = {"gu": lin(2 * I, D), "down": lin(D, I)}
        if p["mlp_t"]:
            ly.update(tgu=lin(2 * It, S), tdown=lin(S, It))
        else:
            ly.update(qkv=lin(3 * D, D), o=lin(D, D))
        return ly

    layers = [make_layer() for _ in range(p.get("L_layers", 2))]  # TRM's shared module, HRM's L_level
    H_mod = [make_layer() for _ in range(p.get("H_layers", 0))]  # HRM's H_level
    W_tok, W_lm = lin(V, D), lin(V, D)
    W_q = torch.zeros(2, D, device=dev, requires_grad=True)
    b_q = torch.full((2,), -5.0, device=dev, requires_grad=True)
    params = [W_tok, W_lm, W_q, b_q] + [t for ly in layers + H_mod for t in ly.values()]
    puzzle = torch.zeros(1, D, device=dev)  # every preset here has puzzle_emb_ndim = D: one token holds it
    H_init, L_init = torch.randn(D, device=dev), torch.randn(D, device=dev)
    cos, sin = rope_tables(S, hd, dev)

    def block(h, ly):
        return twin_block(h, ly, p["mlp_t"], H, cos, sin, SDPA)

    def net(z, inj, mod=None):
        h = z + inj
        for ly in layers if mod is None else mod:
            h = block(h, ly)
        return h

    def inner(zH, zL, x, grad):
        if hrm:  # the 1-step gradient: only the last L_level and H_level applications
            with torch.no_grad():
                for t in range(p["T"]):
                    for i in range(p["n"]):
                        if t < p["T"] - 1 or i < p["n"] - 1:
                            zL = net(zL, zH + x)
                    if t < p["T"] - 1:
                        zH = net(zH, zL, H_mod)
            with torch.enable_grad() if grad else torch.no_grad():
                zL = net(zL, zH + x)
                zH = net(zH, zL, H_mod)
            logits = F.linear(zH[:, Lp:], W_lm)
            q = F.linear(zH[:, 0], W_q, b_q)
            return zH.detach(), zL.detach(), logits, q
        for t in range(p["T"]):
            ctx = torch.enable_grad() if (grad and t == p["T"] - 1) else torch.no_grad()
            with ctx:
                for _ in range(p["n"]):
                    zL = net(zL, zH + x)
                zH = net(zH, zL)
        logits = F.linear(zH[:, Lp:], W_lm)
        q = F.linear(zH[:, 0], W_q, b_q)
        return zH.detach(), zL.detach(), logits, q

    def embed(tokens):
        B = tokens.shape[0]
        e = torch.cat([puzzle[torch.zeros(B, dtype=torch.long, device=dev)].view(B, 1, D).expand(B, 1, D),
                       torch.zeros(B, Lp - 1, D, device=dev), W_tok[tokens]], 1)
        return math.sqrt(D) * e

    def stablemax_ce(logits, labels):
        x = logits.double()
        s = torch.where(x < 0, 1 / (1 - x + 1e-30), x + 1)
        logp = torch.log(s / s.sum(-1, keepdim=True))
        return -logp.gather(-1, labels[..., None]).squeeze(-1)

    state = {id(t): (torch.zeros_like(t), torch.zeros_like(t)) for t in params}
    ema = [t.detach().clone() for t in params]
    step_count = [0]

    def train_step(tokens, labels):
        B = tokens.shape[0]
        zH = H_init.expand(B, S, D).clone()
        zL = L_init.expand(B, S, D).clone()
        x = embed(tokens)
        zH, zL, logits, q = inner(zH, zL, x, True)
        ce = stablemax_ce(logits, labels).mean(-1).sum()
        correct = (logits.argmax(-1) == labels).all(-1).to(q.dtype)
        loss = ce + 0.5 * F.binary_cross_entropy_with_logits(q[:, 0], correct, reduction="sum")
        if hrm:  # the Q-learning target of q_continue: a second no-grad step from the new carry
            with torch.no_grad():
                q2 = inner(zH, zL, x.detach(), False)[3]
                target = torch.sigmoid(torch.maximum(q2[:, 0], q2[:, 1]))
            loss = loss + 0.5 * F.binary_cross_entropy_with_logits(q[:, 1], target, reduction="sum")
        (loss / B).backward()
        step_count[0] += 1
        s = step_count[0]
        with torch.no_grad():
            bc1, bc2 = 1 - 0.9 ** s, 1 - 0.95 ** s
            for i, t in enumerate(params):
                m, v = state[id(t)]
                t.mul_(1 - 1e-4 * 1.0)
                m.lerp_(t.grad, 0.1)
                v.lerp_(t.grad.square(), 0.05)
                t.sub_((1e-4 / bc1) * torch.atan2(m, v.sqrt() / math.sqrt(bc2)))
                t.grad = None
                if not hrm:
                    ema[i].mul_(0.999).add_(t, alpha=0.001)

    def infer_step(tokens):
        B = tokens.shape[0]
        with torch.no_grad():
            zH = H_init.expand(B, S, D).clone()
            zL = L_init.expand(B, S, D).clone()
            inner(zH, zL, embed(tokens), False)

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    def timeit(fn, reps):
        fn()
        sync()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        return ts[len(ts) // 2]

    def gen(B):
        tok = torch.randint(1, V, (B, L), device=dev)
        lab = torch.randint(1, V, (B, L), device=dev)
        return tok, lab

    T, n = p["T"], p["n"]
    if p["mlp_t"]:
        F_blk = 6.0 * S * D * I + 6.0 * D * S * It
    else:
        F_blk = 6.0 * S * D * I + 8.0 * S * D * D + 4.0 * S * S * D
    F_h = 2.0 * L * D * V + 4 * D
    if hrm:  # as tr_model_flops: blocks applied per step, the recorded ones (backward ~ 2x), the target's forward
        nL, nH = p["L_layers"], p["H_layers"]
        blocks = T * n * nL + T * nH
        F_fwd = blocks * F_blk + F_h
        F_train = (2 * blocks + 2 * (nL + nH)) * F_blk + 4 * F_h
    else:
        F_fwd = T * (n + 1) * 2 * F_blk + F_h
        F_train = (T * (n + 1) + 2 * (n + 1)) * 2 * F_blk + 3 * F_h

    import contextlib
    low = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(args.dtype)

    def autocast():  # the reference's precision: matmuls in low, norms and losses as autocast decides
        # no cast cache: a weight first cast inside a no-grad cycle would be reused, without its autograd link, by
        # the cycle with grad (torch 1.13's CPU autocast then leaves the weights without gradients)
        return torch.autocast(args.device, dtype=low, cache_enabled=False) if low is not None else contextlib.nullcontext()

    def in_dtype(fn):
        def run(*a):
            with autocast():
                return fn(*a)
        return run
    train_step, infer_step = in_dtype(train_step), in_dtype(infer_step)

    res = {}
    tok, lab = gen(args.batch)
    t = timeit(lambda: train_step(tok, lab), args.reps)
    def profile_step(step, what):  # where a training step spends its time, kernel by kernel
        from torch.profiler import profile, ProfilerActivity
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
        sync()
        t0 = time.perf_counter()
        with profile(activities=acts) as prof:
            step(tok, lab)
            sync()
        wall = time.perf_counter() - t0
        key = "self_cuda_time_total" if args.device == "cuda" else "self_cpu_time_total"
        print("PyTorch profile, %s training step:" % what)
        print(prof.key_averages().table(sort_by=key, row_limit=args.profile, max_name_column_width=70))
        if args.device == "cuda":  # launches, their summed time, and the step's wall time (the rest: the GPU idle)
            ks = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            busy = sum(getattr(e, "device_time", getattr(e, "cuda_time", 0)) for e in ks) / 1e3
            print("PyTorch %s step: %d kernels, %.2f ms in kernels, %.2f ms wall (profiled)" % (what, len(ks), busy, wall * 1e3))
    if args.profile > 0:
        profile_step(train_step, "eager")
    res["train"] = (t, args.batch / t, F_train * args.batch / t / 1e9)
    mem = None
    if args.device == "cuda":  # the training step's peak beyond what lives between steps (weights, optimizer state), per sample
        sync()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        train_step(tok, lab)
        sync()
        mem = (torch.cuda.max_memory_allocated() - base) / args.batch / 1048576.0
    for B in (1, args.batch):
        tk, _ = gen(B)
        t = timeit(lambda: infer_step(tk), args.reps)
        res["infer%d" % B] = (t, B / t, F_fwd * B / t / 1e9)
    for (M, K, N) in ((6208, 512, 3072), (6208, 1536, 512)):
        a = torch.randn(M, K, device=dev, dtype=low or torch.float32)
        w = torch.randn(N, K, device=dev, dtype=low or torch.float32)
        t = timeit(lambda: F.linear(a, w), args.reps + 2)
        res["sgemm%dx%dx%d" % (M, K, N)] = (t, 0.0, 2.0 * M * N * K / t / 1e9)
    bf16 = {}
    compiled = None
    if args.compile and hasattr(torch, "compile"):
        ct = torch.compile(train_step)
        t = timeit(lambda: ct(tok, lab), args.reps)
        compiled = (t, args.batch / t, F_train * args.batch / t / 1e9)
        if args.profile > 0:
            profile_step(ct, "compiled")
    if args.device == "cuda" and low is None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            t = timeit(lambda: train_step(tok, lab), args.reps)
        bf16["train"] = (t, args.batch / t, F_train * args.batch / t / 1e9)

    ours = None
    if args.device == "cuda":  # PyTorch's cached blocks back to the GPU: tinyrec-bench needs the memory (fp32 at B=768: ~46 GB)
        import gc
        gc.collect()
        torch.cuda.empty_cache()
    if not args.skip_tinyrec:
        tdev = args.tinyrec_device or ("opencl" if args.device == "cuda" else "cpu")
        cmd = [args.bench, "--preset", args.preset, "--batch", str(args.batch), "--threads", str(args.threads), "--reps", str(args.reps),
               "--device", tdev, "--json", "--dtype", args.dtype] + (["--simd", args.simd] if args.simd else [])
        env = {k: v for k, v in os.environ.items() if k not in TUNED and k not in ("ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE")}
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        ours = json.loads(out)

    print("PyTorch %s on %s, %d threads, preset %s, batch %d (%s%s%s)" % (
        torch.__version__, torch.cuda.get_device_name() if args.device == "cuda" else args.device, args.threads, args.preset, args.batch,
        "fp32" if low is None else "autocast " + args.dtype,
        ", TF32 off" if args.device == "cuda" else "",
        "" if p["mlp_t"] else (", attention: scaled_dot_product_attention" if SDPA else ", attention: softmax(QK^T)V")))
    if args.device == "cpu":
        print("PyTorch's vector set: ATEN_CPU_CAPABILITY=%s, OPENBLAS_CORETYPE=%s%s" % (
            os.environ.get("ATEN_CPU_CAPABILITY", "default"), os.environ.get("OPENBLAS_CORETYPE", "default"),
            "; tinyrec --simd " + args.simd if args.simd else ""))
    if ours:
        print("tinyrec on %s" % ours.get("device", "cpu"))
    names = [("train", "train step B=%d" % args.batch), ("infer1", "infer sup. step B=1"),
             ("infer%d" % args.batch, "infer sup. step B=%d" % args.batch),
             ("sgemm6208x512x3072", "gemm 6208x512x3072 (M,K,N)"), ("sgemm6208x1536x512", "gemm 6208x1536x512 (M,K,N)")]
    peak = args.peak_gflops
    print("%-30s %12s %12s %10s | %12s %10s | %8s" % ("case", "torch ms", "torch /s", "GFLOP/s", "tinyrec ms", "GFLOP/s", "ratio"))
    summary = {"torch": {}, "tinyrec": {}, "ratio": {}, "meta": {
        "title": "%s, batch %d, %s: PyTorch %s on %s, tinyrec on %s" % (
            args.preset, args.batch, args.dtype, torch.__version__, torch.cuda.get_device_name() if args.device == "cuda" else "cpu (%d threads)" % args.threads,
            ours.get("device", "?") if ours else "-"),
        "preset": args.preset, "batch": args.batch, "dtype": args.dtype, "threads": args.threads, "device": args.device, "torch": torch.__version__,
        "tinyrec_run": ours.get("run") if ours else None}}
    for key, label in names:
        t, per_s, gf = res[key]
        line = "%-30s %12.2f %12.3f %10.1f" % (label, t * 1e3, per_s, gf)
        summary["torch"][label] = {"ms": t * 1e3, "per_s": per_s, "gflops": gf}
        if ours:
            r = next((x for x in ours["results"] if x["name"] == label), None)
            if r:
                ratio = (t * 1e3) / r["ms"]
                line += " | %12.2f %10.1f | %7.2fx" % (r["ms"], r["gflops"], ratio)
                summary["tinyrec"][label] = r
                summary["ratio"][label] = ratio
        if peak > 0:
            line += "   (torch %.0f%% of peak)" % (100 * gf / peak)
        print(line)
    if bf16:
        t, per_s, gf = bf16["train"]
        line = "%-30s %12.2f %12.3f %10.1f" % ("train step bf16", t * 1e3, per_s, gf)
        r = ours and next((x for x in ours["results"] if x["name"].startswith("train step")), None)
        if r:
            line += " | %12.2f %10.1f | %7.2fx" % (r["ms"], r["gflops"], t * 1e3 / r["ms"])
            summary["ratio"]["train step vs torch bf16"] = t * 1e3 / r["ms"]
        print(line + "   (PyTorch bf16 autocast: a reference line; tinyrec stays fp32)")
    if compiled:
        t, per_s, gf = compiled
        line = "%-30s %12.2f %12.3f %10.1f" % ("train step, torch.compile", t * 1e3, per_s, gf)
        r = ours and next((x for x in ours["results"] if x["name"].startswith("train step")), None)
        if r:
            line += " | %12.2f %10.1f | %7.2fx" % (r["ms"], r["gflops"], t * 1e3 / r["ms"])
            summary["ratio"]["train step vs torch.compile"] = t * 1e3 / r["ms"]
        print(line)
    print("ratio = PyTorch time / tinyrec time (higher is better for tinyrec)")
    if mem is not None:
        print("training step memory per sample: PyTorch %.1f MB (CUDA peak beyond the steady state)%s" % (
            mem, ", tinyrec %.1f MB (its recorded cycle, workspace, ACT carry and device scratch)" % ours["mem_per_sample_mb"] if ours and "mem_per_sample_mb" in ours else ""))
    print("JSON " + json.dumps(summary))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
