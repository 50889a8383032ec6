#!/usr/bin/python3
"""PyTorch twin of the TRM and HRM training steps, used to write parity fixtures for tinyrec.h.

This is an independent re-implementation of the math in
/work/shared/docs/reference-models.md sections 1-5 (forward_dtype float32):
input embedding, post-norm blocks (attention+RoPE or mlp_t), the recursion with no-grad early
cycles (TRM: one module, T x (n+1) applications, the last cycle with grad; HRM, sec. 2.2: H_level
and L_level with their own weights, only the last f_L and f_H with grad), the ACT carry,
stablemax / softmax CE + BCE halting loss, HRM's Q-learning (halt on q_halt > q_continue, the
bootstrapped target from a second no-grad forward, q_continue loss), metrics,
AdamATan2 + sign-SGD puzzle table + cosine/warmup schedule + EMA.

Usage (needs the Debian torch: /usr/bin/python3):
    /usr/bin/python3 tools/torch_reference.py            # write tests/data/{trm,hrm}_tiny_{mlp,att}.trfx
    /usr/bin/python3 tools/torch_reference.py --check    # re-read them; float64 replay + finite differences
    /usr/bin/python3 tools/torch_reference.py --only hrm_tiny_att   # one fixture
    /usr/bin/python3 tools/torch_reference.py --hrm-checkpoint DIR  # an HRM run directory as the
        reference writes it (DIR/checkpoint: torch.save(state_dict) with "_orig_mod.model.inner."
        keys; DIR/all_config.yaml), variants and DIR/expected.safetensors (the same tensors in
        F32), for the converter test in tests/test_tools.c

File format (.trfx, little endian): 8-byte magic "TRFX0001", u32 record count, then per record:
u32 name_len, name bytes (no NUL), u32 dtype (0 f32, 1 i32, 2 f64), u32 ndim, u64 dims[ndim],
raw row-major data.

Record naming: initial weights and buffers are "model.inner.<name>"; gradients, final weights
and EMA use the bare name: "step1.grad.<name>", "final.<name>", "final.ema.<name>".
HRM fixtures add config.arch (1), config.H_layers and config.no_ACT_continue (0), and per step
next_q_halt / next_q_continue (the extra forward's Q values), target_q_continue (the sigmoid
target) and q_continue_loss. The TRM fixtures do not have these records (arch 0, no_ACT_continue 1).

Fixture data are chosen by a deterministic seed search: every step must have both halted and
running rows, and every discrete decision (q_halt sign, argmax, sign of each summed puzzle-row
grad, sign of each step-1 dense grad, which AdamATan2 turns into a +-lr/bc1*atan(0.1) step)
must sit well clear of fp32 rounding, measured against a float64 replay of the same data (HRM: q_halt - q_continue too,
the halting decision).
The fp32 run uses one thread, so the files are reproducible bit for bit.
"""
import argparse
import collections
import fnmatch
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = b"TRFX0001"
DT_F32, DT_I32, DT_F64 = 0, 1, 2
_NP_OF_DT = {DT_F32: np.dtype("<f4"), DT_I32: np.dtype("<i4"), DT_F64: np.dtype("<f8")}
PREFIX = "model.inner."
IGNORE = -100

POS_CODES = {"none": 0, "rope": 1, "learned": 2}
LOSS_CODES = {"stablemax_cross_entropy": 0, "softmax_cross_entropy": 1}
ARCH_CODES = {"trm": 0, "hrm": 1}  # tr_arch

# Order of the config.* records.
CONFIG_FIELDS = [
    "vocab_size", "seq_len", "hidden_size", "num_heads", "expansion", "L_layers", "H_cycles",
    "L_cycles", "puzzle_emb_ndim", "puzzle_emb_len", "num_puzzle_identifiers", "pos_encodings",
    "mlp_t", "rope_theta", "rms_norm_eps", "halt_max_steps", "halt_exploration_prob", "loss_type",
    "lr", "puzzle_emb_lr", "weight_decay", "puzzle_emb_weight_decay", "lr_warmup_steps",
    "total_steps", "lr_min_ratio", "beta1", "beta2", "ema_decay", "batch_size",
]
# Appended for HRM only, so that the TRM fixtures keep their bytes.
HRM_CONFIG_FIELDS = ["arch", "H_layers", "no_ACT_continue"]

TINY = dict(
    vocab_size=6, seq_len=16, hidden_size=32, num_heads=2, expansion=4.0, L_layers=2,
    H_cycles=3, L_cycles=2, puzzle_emb_ndim=32, puzzle_emb_len=2, num_puzzle_identifiers=3,
    pos_encodings="none", mlp_t=True, rope_theta=10000.0, rms_norm_eps=1e-5, halt_max_steps=2,
    halt_exploration_prob=0.0, loss_type="stablemax_cross_entropy",
    lr=1e-3, puzzle_emb_lr=1e-2, weight_decay=0.1, puzzle_emb_weight_decay=0.1,
    lr_warmup_steps=2, total_steps=3, lr_min_ratio=0.1, beta1=0.9, beta2=0.95, ema_decay=0.999,
    batch_size=4,
)
# HRM: T = n = 2 as in hrm_v1.yaml; hidden 16 (half of TRM's: three to four blocks instead of two,
# same file size); puzzle_emb_len 0 = ceil(40 / 16) = 3 prefix slots (HRM's rule, the last one half
# padding); H_layers != L_layers so that a mix-up of the modules shows. halt_max_steps 2: rows that
# run on from step 1 reach the last step, so the target rule takes both branches (q_halt' alone,
# max(q_halt', q_continue')).
HRM_TINY = dict(TINY, arch="hrm", no_ACT_continue=False, hidden_size=16, H_cycles=2, L_cycles=2,
                puzzle_emb_ndim=40, puzzle_emb_len=0)
FIXTURES = {
    "trm_tiny_mlp": dict(TINY, mlp_t=True, pos_encodings="none"),
    "trm_tiny_att": dict(TINY, mlp_t=False, pos_encodings="rope"),
    "hrm_tiny_att": dict(HRM_TINY, mlp_t=False, pos_encodings="rope", H_layers=1, L_layers=2),
    "hrm_tiny_mlp": dict(HRM_TINY, mlp_t=True, pos_encodings="learned", H_layers=2, L_layers=1),
}
N_STEPS = 3
# Records the committed fixtures leave out to stay small: the final weights of the second L block
# and the EMA of the L module (the first L block's and the H module's final weights, and the EMA of
# the globals and H_level, stay; the EMA update is one formula for every tensor).
DEFAULT_OMIT = ["final.L_level.layers.1.*", "final.ema.L_level.*"]

# Sensitivity requirements the fixture data must satisfy (seed search). Absolute floors:
MIN_ABS_Q_HALT = 0.02        # every q_halt of every step
MIN_LOGIT_GAP = 1e-3         # top-1 minus top-2 logit at every label-masked position
# Margins against rounding, measured as |quantity| / |fp32 value - float64 replay value|:
MARGIN_DECISION = 30.0       # q_halt signs, top-2 logit gaps, signs of summed puzzle-row grads
MARGIN_DENSE_SIGN = 10.0     # every nonzero step-1 dense grad (AdamATan2 step 1 is sign(g)-only)
MAX_LOGIT_DRIFT = 1e-3       # max |fp32 - float64| of the logits in every step (chaotic seeds out)


# ----------------------------------------------------------------------------------------------
# trfx I/O
# ----------------------------------------------------------------------------------------------
def write_trfx(path, records):
    """records: list of (name, np.ndarray of float32/int32/float64)."""
    names = [n for n, _ in records]
    assert len(names) == len(set(names)), "duplicate record names"
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<I", len(records)))
        for name, arr in records:
            arr = np.asarray(arr)
            if arr.dtype == np.float32:
                dt = DT_F32
            elif arr.dtype == np.int32:
                dt = DT_I32
            elif arr.dtype == np.float64:
                dt = DT_F64
            else:
                raise TypeError("%s: unsupported dtype %s" % (name, arr.dtype))
            nb = name.encode("ascii")
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<II", dt, arr.ndim))
            if arr.ndim:
                f.write(struct.pack("<%dQ" % arr.ndim, *arr.shape))
            f.write(np.ascontiguousarray(arr, dtype=_NP_OF_DT[dt]).tobytes())


def read_trfx(path):
    out = collections.OrderedDict()
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == MAGIC, "bad magic"
    (count,) = struct.unpack_from("<I", data, 8)
    off = 12
    for _ in range(count):
        (nl,) = struct.unpack_from("<I", data, off)
        off += 4
        name = data[off:off + nl].decode("ascii")
        off += nl
        dt, ndim = struct.unpack_from("<II", data, off)
        off += 8
        dims = struct.unpack_from("<%dQ" % ndim, data, off) if ndim else ()
        off += 8 * ndim
        npdt = _NP_OF_DT[dt]
        n = int(np.prod(dims)) if ndim else 1
        arr = np.frombuffer(data, dtype=npdt, count=n, offset=off).reshape(dims).copy()
        off += n * npdt.itemsize
        out[name] = arr
    assert off == len(data), "trailing bytes"
    return out


def is_hrm(cfg):
    return cfg.get("arch", "trm") == "hrm"


def config_records(cfg):
    recs = []
    for k in CONFIG_FIELDS + (HRM_CONFIG_FIELDS if is_hrm(cfg) else []):
        v = cfg[k]
        if k == "pos_encodings":
            v = POS_CODES[v]
        elif k == "loss_type":
            v = LOSS_CODES[v]
        elif k == "arch":
            v = ARCH_CODES[v]
        elif k in ("mlp_t", "no_ACT_continue"):
            v = 1 if v else 0
        recs.append(("config." + k, np.float64(v)))
    return recs


def config_from_records(recs):
    cfg = dict(arch="trm", H_layers=0, no_ACT_continue=True)
    for k in CONFIG_FIELDS + (HRM_CONFIG_FIELDS if "config.arch" in recs else []):
        v = float(recs["config." + k])
        if k == "pos_encodings":
            v = {c: n for n, c in POS_CODES.items()}[int(v)]
        elif k == "loss_type":
            v = {c: n for n, c in LOSS_CODES.items()}[int(v)]
        elif k == "arch":
            v = {c: n for n, c in ARCH_CODES.items()}[int(v)]
        elif k in ("mlp_t", "no_ACT_continue"):
            v = bool(v)
        elif k in ("expansion", "rope_theta", "rms_norm_eps", "halt_exploration_prob", "lr",
                   "puzzle_emb_lr", "weight_decay", "puzzle_emb_weight_decay", "lr_min_ratio",
                   "beta1", "beta2", "ema_decay"):
            pass
        else:
            v = int(v)
        cfg[k] = v
    return cfg


# ----------------------------------------------------------------------------------------------
# Shapes, names, initialisation
# ----------------------------------------------------------------------------------------------
def prefix_len(cfg):
    """Lp: puzzle_emb_len, or when 0, ceil(puzzle_emb_ndim / hidden_size) (HRM's rule)."""
    if cfg["puzzle_emb_len"] > 0:
        return cfg["puzzle_emb_len"]
    return -(-cfg["puzzle_emb_ndim"] // cfg["hidden_size"])


def seq_total(cfg):
    return cfg["seq_len"] + prefix_len(cfg)


def levels(cfg):
    """(module name, number of blocks): TRM has one shared module, HRM H_level and L_level."""
    if is_hrm(cfg):
        return [("H_level", cfg["H_layers"]), ("L_level", cfg["L_layers"])]
    return [("L_level", cfg["L_layers"])]


def swiglu_inter(expansion, d):
    # 256 * ceil(round(expansion * d * 2/3) / 256)
    return 256 * (-(round(expansion * d * 2 / 3) // -256))


def dense_param_shapes(cfg):
    """Ordered (bare name, shape) of every dense (AdamATan2 + EMA) parameter."""
    V, D, S = cfg["vocab_size"], cfg["hidden_size"], seq_total(cfg)
    I = swiglu_inter(cfg["expansion"], D)
    shapes = [("embed_tokens.embedding_weight", (V, D)),
              ("lm_head.weight", (V, D)),
              ("q_head.weight", (2, D)),
              ("q_head.bias", (2,))]
    if cfg["pos_encodings"] == "learned":
        shapes.append(("embed_pos.embedding_weight", (S, D)))
    for level, nl in levels(cfg):
        for i in range(nl):
            p = "%s.layers.%d." % (level, i)
            if cfg["mlp_t"]:
                It = swiglu_inter(cfg["expansion"], S)
                shapes += [(p + "mlp_t.gate_up_proj.weight", (2 * It, S)),
                           (p + "mlp_t.down_proj.weight", (S, It))]
            else:
                shapes += [(p + "self_attn.qkv_proj.weight", (3 * D, D)),
                           (p + "self_attn.o_proj.weight", (D, D))]
            shapes += [(p + "mlp.gate_up_proj.weight", (2 * I, D)),
                       (p + "mlp.down_proj.weight", (D, I))]
    return shapes


BUFFER_NAMES = ["puzzle_emb.weights", "H_init", "L_init"]


def trunc_normal(rng, shape, std):
    """JAX-style truncated normal (sec. 1.1): post-truncation std == std, cut at +-2 sigma."""
    if std == 0:
        return np.zeros(shape, np.float32)
    c = 1.1368472343
    lim = math.erf(math.sqrt(2.0))
    u = torch.from_numpy(rng.uniform(-lim, lim, size=shape))
    x = math.sqrt(2.0) * c * std * torch.erfinv(u)
    x = x.clamp(-2 * c * std, 2 * c * std)
    return x.numpy().astype(np.float32)


def gen_weights(cfg, rng):
    D = cfg["hidden_size"]
    w = collections.OrderedDict()
    for name, shape in dense_param_shapes(cfg):
        if name == "q_head.weight":
            # Deviation from the reference init (zeros) so that q_halt varies per row.
            w[name] = rng.normal(0.0, 1.0 / math.sqrt(D), size=shape).astype(np.float32)
        elif name == "q_head.bias":
            w[name] = np.zeros(shape, np.float32)
        elif name in ("embed_tokens.embedding_weight", "embed_pos.embedding_weight"):
            w[name] = trunc_normal(rng, shape, 1.0 / math.sqrt(D))
        else:  # CastedLinear: truncated LeCun normal, std = 1/sqrt(fan_in)
            w[name] = trunc_normal(rng, shape, 1.0 / math.sqrt(shape[1]))
    w["puzzle_emb.weights"] = rng.normal(
        0.0, 0.5, size=(cfg["num_puzzle_identifiers"], cfg["puzzle_emb_ndim"])).astype(np.float32)
    w["H_init"] = rng.normal(0.0, 1.0, size=(D,)).astype(np.float32)
    w["L_init"] = rng.normal(0.0, 1.0, size=(D,)).astype(np.float32)
    return w


def gen_batches(cfg, rng):
    B, L, V = cfg["batch_size"], cfg["seq_len"], cfg["vocab_size"]
    nid = cfg["num_puzzle_identifiers"]
    batches = []
    for k in range(N_STEPS):
        inputs = rng.integers(1, V, size=(B, L)).astype(np.int32)
        labels = rng.integers(1, V, size=(B, L)).astype(np.int32)
        labels[rng.random((B, L)) < 0.2] = IGNORE
        if k == 0:
            labels[B - 1, :] = IGNORE  # one fully ignored row (count_b == 0)
        while True:
            pids = rng.integers(0, nid, size=(B,)).astype(np.int32)
            if len(np.unique(pids)) < B:  # at least one duplicate id
                break
        batches.append(dict(inputs=inputs, labels=labels, puzzle_identifiers=pids))
    return batches


# ----------------------------------------------------------------------------------------------
# Model math
# ----------------------------------------------------------------------------------------------
def rms_norm(x, eps):
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps)


def swiglu(x, w_gu, w_down):
    gu = x @ w_gu.t()
    inter = w_gu.shape[0] // 2
    gate, up = gu[..., :inter], gu[..., inter:]
    return (F.silu(gate) * up) @ w_down.t()


def rope_tables(cfg, dtype):
    hd = cfg["hidden_size"] // cfg["num_heads"]
    S = seq_total(cfg)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=dtype) / hd))
    t = torch.arange(S, dtype=dtype)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # [S, hd], halves duplicated
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def attention(cfg, h, w_qkv, w_o, rope):
    B, S, D = h.shape
    H = cfg["num_heads"]
    hd = D // H
    qkv = (h @ w_qkv.t()).view(B, S, 3 * H, hd)
    q, k, v = qkv[:, :, :H], qkv[:, :, H:2 * H], qkv[:, :, 2 * H:]
    if rope is not None:
        cos, sin = rope[0].view(1, S, 1, hd), rope[1].view(1, S, 1, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, hd]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    o = torch.softmax(scores, dim=-1) @ v
    o = o.transpose(1, 2).reshape(B, S, D)
    return o @ w_o.t()


def block(cfg, W, p, h, rope):
    """One post-norm block; p: its name prefix, "L_level.layers.<i>." or "H_level.layers.<i>."."""
    eps = cfg["rms_norm_eps"]
    if cfg["mlp_t"]:
        ht = h.transpose(1, 2)  # [B, D, S]
        ht = rms_norm(ht + swiglu(ht, W[p + "mlp_t.gate_up_proj.weight"],
                                  W[p + "mlp_t.down_proj.weight"]), eps)  # RMS over S
        h = ht.transpose(1, 2)
    else:
        h = rms_norm(h + attention(cfg, h, W[p + "self_attn.qkv_proj.weight"],
                                   W[p + "self_attn.o_proj.weight"], rope), eps)
    h = rms_norm(h + swiglu(h, W[p + "mlp.gate_up_proj.weight"], W[p + "mlp.down_proj.weight"]), eps)
    return h


def net(cfg, W, h, inj, rope, level="L_level"):
    """A reasoning module: h + inj, then its blocks."""
    h = h + inj
    for i in range(cfg["H_layers"] if level == "H_level" else cfg["L_layers"]):
        h = block(cfg, W, "%s.layers.%d." % (level, i), h, rope)
    return h


def embed(cfg, W, prow, inputs):
    """prow: [B, Dp] looked-up puzzle vectors. Returns x = sqrt(D) * e, [B, S, D]."""
    B = inputs.shape[0]
    D, Lp, Dp = cfg["hidden_size"], prefix_len(cfg), cfg["puzzle_emb_ndim"]
    e = W["embed_tokens.embedding_weight"][inputs.long()]
    if Dp > 0:
        pad = Lp * D - Dp
        pe = F.pad(prow, (0, pad)) if pad > 0 else prow
        e = torch.cat([pe.view(B, Lp, D), e], dim=1)
    if cfg["pos_encodings"] == "learned":
        e = 0.707106781 * (e + W["embed_pos.embedding_weight"])
    return math.sqrt(D) * e


def last_cycle(cfg, W, zH, zL, x, rope):
    """TRM: one H cycle of the shared module (n z_L updates, then z_H)."""
    for _ in range(cfg["L_cycles"]):
        zL = net(cfg, W, zL, zH + x, rope)
    zH = net(cfg, W, zH, zL, rope)
    return zH, zL


def hrm_grad_step(cfg, W, zH, zL, x, rope):
    """HRM's 1-step gradient part: one f_L (injection z_H + x formed first), then one f_H."""
    zL = net(cfg, W, zL, zH + x, rope, "L_level")
    zH = net(cfg, W, zH, zL, rope, "H_level")
    return zH, zL


def grad_part(cfg, W, zH, zL, x, rope):
    """The part of one inner forward that runs with grad, from the carry the no-grad part left."""
    return (hrm_grad_step if is_hrm(cfg) else last_cycle)(cfg, W, zH, zL, x, rope)


def inner_forward(cfg, W, zH, zL, x, rope):
    """One inner forward (sec. 2.1 / 2.2). Returns (z_H, z_L, the (z_H, z_L) after each z_H update
    (T of them, the last one the grad update), the z_H and z_L the grad part started from)."""
    T, n = cfg["H_cycles"], cfg["L_cycles"]
    cycles = []
    with torch.no_grad():
        if is_hrm(cfg):
            for t in range(T):
                for i in range(n):
                    if not (t == T - 1 and i == n - 1):
                        zL = net(cfg, W, zL, zH + x, rope, "L_level")
                if t != T - 1:
                    zH = net(cfg, W, zH, zL, rope, "H_level")
                    cycles.append((zH.clone(), zL.clone()))
        else:
            for _t in range(T - 1):
                zH, zL = last_cycle(cfg, W, zH, zL, x, rope)
                cycles.append((zH.clone(), zL.clone()))
    zH_in, zL_in = zH.detach().clone(), zL.detach().clone()
    zH, zL = grad_part(cfg, W, zH, zL, x, rope)
    cycles.append((zH.detach().clone(), zL.detach().clone()))
    return zH, zL, cycles, zH_in, zL_in


def heads(cfg, W, zH):
    Lp = prefix_len(cfg)
    logits = zH[:, Lp:] @ W["lm_head.weight"].t()
    q = zH[:, 0] @ W["q_head.weight"].t() + W["q_head.bias"]
    return logits, q[:, 0], q[:, 1]


def log_stablemax(x):
    s = torch.where(x >= 0, x + 1, 1 / (1 - x + 1e-30))
    return torch.log(s / s.sum(-1, keepdim=True))


def loss_terms(cfg, logits, q_halt, labels, q_cont=None, target=None):
    """Returns dict with lm_loss, q_halt_loss, total (tensors) and discrete per-row quantities.
    With a target (HRM, training): q_continue_loss = sum BCE(q_cont, target), in the total."""
    mask = labels != IGNORE
    counts = mask.sum(-1)
    div = counts.clamp_min(1).unsqueeze(-1)
    safe = torch.where(mask, labels, torch.zeros_like(labels)).long()
    if cfg["loss_type"] == "stablemax_cross_entropy":
        logp = log_stablemax(logits.to(torch.float64))
    else:
        logp = torch.log_softmax(logits.to(torch.float32), dim=-1)
    tok = -torch.where(mask, torch.gather(logp, -1, safe.unsqueeze(-1)).squeeze(-1),
                       torch.zeros((), dtype=logp.dtype))
    lm_loss = (tok / div).sum()
    with torch.no_grad():
        is_correct = mask & (torch.argmax(logits, dim=-1) == labels)
        seq_correct = is_correct.sum(-1) == counts
    q_halt_loss = F.binary_cross_entropy_with_logits(
        q_halt, seq_correct.to(q_halt.dtype), reduction="sum")
    if target is None:
        q_continue_loss = None
        total = lm_loss + 0.5 * q_halt_loss
    else:
        q_continue_loss = F.binary_cross_entropy_with_logits(q_cont, target, reduction="sum")
        total = lm_loss + 0.5 * (q_halt_loss + q_continue_loss)
    return dict(lm_loss=lm_loss, q_halt_loss=q_halt_loss, q_continue_loss=q_continue_loss,
                total=total, mask=mask, counts=counts, div=div, is_correct=is_correct,
                seq_correct=seq_correct)


def lr_at(base, s, cfg):
    W, total, r = cfg["lr_warmup_steps"], cfg["total_steps"], cfg["lr_min_ratio"]
    if s < W:
        return base * s / max(1, W)
    prog = (s - W) / max(1, total - W)
    return base * (r + max(0.0, (1 - r) * 0.5 * (1.0 + math.cos(math.pi * prog))))


# ----------------------------------------------------------------------------------------------
# The training pipeline: 3 ACT steps with optimizer updates
# ----------------------------------------------------------------------------------------------
def run_pipeline(cfg, init, batches, dtype, relabel=False, explore_rng=None):
    """Runs N_STEPS training steps. init: dict bare name -> np array (params and buffers).
    batches: list of dicts of np int32 arrays (modified in place when relabel=True).
    Returns (records, diag)."""
    B, L, S, D = cfg["batch_size"], cfg["seq_len"], seq_total(cfg), cfg["hidden_size"]
    M = cfg["halt_max_steps"]
    names = [n for n, _ in dense_param_shapes(cfg)]
    W = collections.OrderedDict(
        (n, torch.tensor(init[n], dtype=dtype).requires_grad_(True)) for n in names)
    P = torch.tensor(init["puzzle_emb.weights"], dtype=dtype)
    H_init = torch.tensor(init["H_init"], dtype=dtype)
    L_init = torch.tensor(init["L_init"], dtype=dtype)
    rope = rope_tables(cfg, dtype) if cfg["pos_encodings"] == "rope" else None
    m = {n: torch.zeros_like(W[n]) for n in names}
    v = {n: torch.zeros_like(W[n]) for n in names}
    ema = {n: W[n].detach().clone() for n in names}
    b1, b2, mu = cfg["beta1"], cfg["beta2"], cfg["ema_decay"]
    if explore_rng is None:
        explore_rng = np.random.default_rng(0)

    carry = dict(zH=torch.zeros(B, S, D, dtype=dtype), zL=torch.zeros(B, S, D, dtype=dtype),
                 steps=torch.zeros(B, dtype=torch.int32), halted=torch.ones(B, dtype=torch.bool),
                 inputs=torch.zeros(B, L, dtype=torch.int32),
                 labels=torch.full((B, L), IGNORE, dtype=torch.int32),
                 puzzle_identifiers=torch.zeros(B, dtype=torch.int32))
    recs = []
    diag = dict(halted_counts=[], q_halt=[], q_diff=[], last=[], logits=[], mask=[], G=[], exact=[],
                step1=None)
    opt_step = 0
    for k in range(1, N_STEPS + 1):
        inc = {key: torch.from_numpy(val) for key, val in batches[k - 1].items()}
        hb = carry["halted"].clone()
        # 1. reset halted rows
        zH = torch.where(hb.view(B, 1, 1), H_init.view(1, 1, D).expand(B, S, D), carry["zH"])
        zL = torch.where(hb.view(B, 1, 1), L_init.view(1, 1, D).expand(B, S, D), carry["zL"])
        steps = torch.where(hb, torch.zeros_like(carry["steps"]), carry["steps"])
        data = {}
        for key in ("inputs", "labels", "puzzle_identifiers"):
            sel = hb.view(B, *([1] * (inc[key].dim() - 1)))
            data[key] = torch.where(sel, inc[key], carry[key])
        # 2. inner forward
        prow = P[data["puzzle_identifiers"].long()].clone().requires_grad_(True)
        x = embed(cfg, W, prow, data["inputs"])
        zH, zL, cycles, zH_in, zL_in = inner_forward(cfg, W, zH, zL, x, rope)
        logits, q_halt, q_cont = heads(cfg, W, zH)
        # 3. halting (no grad)
        q_learning = M > 1 and not cfg.get("no_ACT_continue", True)
        with torch.no_grad():
            steps = steps + 1
            halted = steps >= M
            if M > 1:
                halted = halted | (q_halt > (0 if cfg.get("no_ACT_continue", True) else q_cont))
                eps = cfg["halt_exploration_prob"]
                if eps > 0:
                    r = torch.from_numpy(explore_rng.random(B))
                    mins = torch.from_numpy(explore_rng.integers(2, M + 1, size=B)).to(torch.int32)
                    min_steps = torch.where(r < eps, mins, torch.zeros_like(mins))
                    halted = halted & (steps >= min_steps)
            # HRM's target Q: a second inner forward from the new (detached) carry on the same
            # rows, no reset; sigmoid of q_halt' at the last step, else of max(q_halt', q_cont').
            target = next_qh = next_qc = None
            if q_learning:
                x2 = embed(cfg, W, prow, data["inputs"])
                zH2, _, _, _, _ = inner_forward(cfg, W, zH.detach(), zL.detach(), x2, rope)
                _, next_qh, next_qc = heads(cfg, W, zH2)
                target = torch.sigmoid(torch.where(steps >= M, next_qh, torch.maximum(next_qh, next_qc)))
        # Optional: make one freshly loaded row exactly correct (labels do not affect the forward).
        if relabel:
            with torch.no_grad():
                pred = torch.argmax(logits, dim=-1).to(torch.int32)
                for r in range(B):
                    lab = data["labels"][r]
                    if hb[r] and bool((lab != IGNORE).any()):
                        new = torch.where((lab != IGNORE) & (pred[r] != 0), pred[r],
                                          torch.full_like(lab, IGNORE))
                        data["labels"][r] = new
                        batches[k - 1]["labels"][r] = new.numpy()
                        inc["labels"][r] = new
                        break
        # 4. loss + metrics
        lt = loss_terms(cfg, logits, q_halt, data["labels"], q_cont, target)
        for n in names:
            W[n].grad = None
        ((1.0 / B) * lt["total"]).backward()
        grads = {n: (W[n].grad.clone() if W[n].grad is not None else torch.zeros_like(W[n]))
                 for n in names}
        gprow = prow.grad.clone()
        with torch.no_grad():
            valid = halted & (lt["counts"] > 0)
            acc_row = (lt["is_correct"].to(dtype) / lt["div"]).sum(-1)
            metrics = collections.OrderedDict(
                count=valid.sum(),
                accuracy=torch.where(valid, acc_row, torch.zeros_like(acc_row)).sum(),
                exact_accuracy=(valid & lt["seq_correct"]).sum(),
                q_halt_accuracy=(valid & ((q_halt >= 0) == lt["seq_correct"])).sum(),
                steps=torch.where(valid, steps, torch.zeros_like(steps)).sum())
        # 5. optimizers
        opt_step += 1
        lr = lr_at(cfg["lr"], opt_step, cfg)
        lrp = lr_at(cfg["puzzle_emb_lr"], opt_step, cfg)
        bc1, bc2 = 1 - b1 ** opt_step, 1 - b2 ** opt_step
        with torch.no_grad():
            for n in names:
                p, g = W[n], grads[n]
                p.mul_(1 - lr * cfg["weight_decay"])
                m[n].add_((1 - b1) * (g - m[n]))
                v[n].add_((1 - b2) * (g * g - v[n]))
                p.sub_((lr / bc1) * torch.atan2(m[n], v[n].sqrt() / math.sqrt(bc2)))
            ids = data["puzzle_identifiers"].long()
            G = torch.zeros_like(P).index_add_(0, ids, gprow)
            uniq = torch.unique(ids)
            P[uniq] = P[uniq] * (1 - lrp * cfg["puzzle_emb_weight_decay"]) - lrp * torch.sign(G[uniq])
            for n in names:
                ema[n] = mu * ema[n] + (1 - mu) * W[n].detach()
        # records
        f = lambda t: t.detach().numpy().astype(np.float32)
        i32 = lambda t: t.detach().numpy().astype(np.int32)
        pre = "step%d." % k
        recs += [(pre + "inputs", batches[k - 1]["inputs"].astype(np.int32)),
                 (pre + "labels", batches[k - 1]["labels"].astype(np.int32)),
                 (pre + "puzzle_identifiers", batches[k - 1]["puzzle_identifiers"].astype(np.int32)),
                 (pre + "halted_before", i32(hb)),
                 (pre + "x", f(x))]
        for t, (ch, cl) in enumerate(cycles, 1):
            recs += [(pre + "cycle%d.z_H" % t, f(ch)), (pre + "cycle%d.z_L" % t, f(cl))]
        recs += [(pre + "logits", f(logits)), (pre + "q_halt", f(q_halt)),
                 (pre + "q_continue", f(q_cont))]
        if target is not None:
            recs += [(pre + "next_q_halt", f(next_qh)), (pre + "next_q_continue", f(next_qc)),
                     (pre + "target_q_continue", f(target))]
        recs += [(pre + "halted_after", i32(halted)),
                 (pre + "steps", i32(steps)),
                 (pre + "lm_loss", np.float64(lt["lm_loss"].item())),
                 (pre + "q_halt_loss", np.float64(lt["q_halt_loss"].item()))]
        if target is not None:
            recs.append((pre + "q_continue_loss", np.float64(lt["q_continue_loss"].item())))
        recs += [(pre + "loss", np.float64(lt["total"].item()))]
        for mk, mv in metrics.items():
            recs.append((pre + "metrics." + mk, np.float64(mv.item())))
        recs += [(pre + "lr", np.float64(lr)), (pre + "puzzle_emb_lr", np.float64(lrp))]
        if k == 1:
            for n in names:
                recs.append((pre + "grad." + n, f(grads[n])))
            recs.append((pre + "grad.puzzle_emb_rows", f(gprow)))
            diag["step1"] = dict(zH_in=zH_in, zL_in=zL_in, data={kk: vv.clone() for kk, vv in data.items()},
                                 grads=grads, gprow=gprow, prow=prow.detach().clone(),
                                 target=None if target is None else target.clone())
        # diagnostics for the seed search and the robustness margins
        npf = lambda t: t.detach().to(torch.float64).numpy().copy()
        diag["halted_counts"].append(int(halted.sum()))
        diag["q_halt"].append(npf(q_halt))
        diag["q_diff"].append(npf(q_halt - q_cont))
        diag["last"].append((steps >= M).numpy().copy())
        diag["logits"].append(npf(logits))
        diag["mask"].append(lt["mask"].numpy().copy())
        diag["G"].append(npf(G[uniq]))
        diag["exact"].append(int(metrics["exact_accuracy"].item()))
        # 6. new carry
        carry = dict(zH=zH.detach(), zL=zL.detach(), steps=steps, halted=halted, **data)

    for n in names:
        recs.append(("final." + n, W[n].detach().numpy().astype(np.float32)))
    recs.append(("final.puzzle_emb.weights", P.numpy().astype(np.float32)))
    for n in names:
        recs.append(("final.ema." + n, ema[n].numpy().astype(np.float32)))
    return recs, diag


def init_records(cfg, init):
    recs = []
    for n, _ in dense_param_shapes(cfg):
        recs.append((PREFIX + n, init[n]))
    for n in BUFFER_NAMES:
        recs.append((PREFIX + n, init[n]))
    return recs


def acceptable(cfg, diag):
    """Absolute criteria on a (fp32) run."""
    B = cfg["batch_size"]
    gaps = []
    for lg, mk in zip(diag["logits"], diag["mask"]):
        top2 = np.sort(lg, axis=-1)[..., -2:]
        gaps.append((top2[..., 1] - top2[..., 0])[mk].min())
    ok = (all(0 < c < B for c in diag["halted_counts"])
          and min(np.abs(q).min() for q in diag["q_halt"]) > MIN_ABS_Q_HALT
          and min(gaps) > MIN_LOGIT_GAP
          and sum(diag["exact"]) > 0)
    if is_hrm(cfg):  # halting on q_halt - q_continue; both branches of the target rule taken
        last = np.concatenate(diag["last"])
        ok = (ok and min(np.abs(q).min() for q in diag["q_diff"]) > MIN_ABS_Q_HALT
              and last.any() and not last.all())
    return ok


def margins(cfg, d32, d64):
    """Robustness of every discrete decision of the fp32 run, using the float64 replay (same
    stored weights and batches) as the estimate of fp32 rounding error."""
    tiny = 1e-30
    out = collections.OrderedDict()
    out["q_halt"] = min(float((np.abs(a) / np.maximum(np.abs(a - b), tiny)).min())
                        for a, b in zip(d32["q_halt"], d64["q_halt"]))
    if is_hrm(cfg):
        out["q_diff"] = min(float((np.abs(a) / np.maximum(np.abs(a - b), tiny)).min())
                            for a, b in zip(d32["q_diff"], d64["q_diff"]))
    gm = []
    for a, b, mk in zip(d32["logits"], d64["logits"], d32["mask"]):
        top2 = np.sort(a, axis=-1)[..., -2:]
        gap = top2[..., 1] - top2[..., 0]
        err = 2 * np.abs(a - b).max(-1)
        gm.append(float((gap / np.maximum(err, tiny))[mk].min()))
    out["logit_gap"] = min(gm)
    out["puzzle_grad_sign"] = min(float((np.abs(a) / np.maximum(np.abs(a - b), tiny)).min())
                                  for a, b in zip(d32["G"], d64["G"]))
    dense, zero_mismatch = float("inf"), 0
    for n, g in d32["step1"]["grads"].items():
        a = g.double().numpy()
        b = d64["step1"]["grads"][n].numpy()
        zero_mismatch += int(((a == 0) != (b == 0)).sum())
        nz = a != 0
        if nz.any():
            dense = min(dense, float((np.abs(a[nz]) / np.maximum(np.abs(a - b)[nz], tiny)).min()))
    out["dense_grad_sign"] = dense
    out["zero_grad_mismatch"] = zero_mismatch
    out["logit_drift"] = [float(np.abs(a - b).max()) for a, b in zip(d32["logits"], d64["logits"])]
    out["same_halting"] = all(np.array_equal(a, b) for a, b in
                              zip(d32["halted_counts"], d64["halted_counts"]))
    return out


def margins_ok(m):
    return (m["q_halt"] >= MARGIN_DECISION and m.get("q_diff", math.inf) >= MARGIN_DECISION
            and m["logit_gap"] >= MARGIN_DECISION
            and m["puzzle_grad_sign"] >= MARGIN_DECISION
            and m["dense_grad_sign"] >= MARGIN_DENSE_SIGN and m["zero_grad_mismatch"] == 0
            and max(m["logit_drift"]) <= MAX_LOGIT_DRIFT and m["same_halting"])


def print_margins(m, indent="  "):
    print("%smargins |x|/|fp32-f64|: q_halt %.3g,%s top-2 logit gap %.3g, puzzle-grad sign %.3g, "
          "step-1 dense-grad sign %.3g (zero-pattern mismatches %d)" % (
              indent, m["q_halt"], " q_halt-q_continue %.3g," % m["q_diff"] if "q_diff" in m else "",
              m["logit_gap"], m["puzzle_grad_sign"], m["dense_grad_sign"], m["zero_grad_mismatch"]))
    print("%smax |fp32-f64| of logits per step: %s" % (
        indent, ", ".join("%.2e" % x for x in m["logit_drift"])))


def omitted(name, omit):
    return any(fnmatch.fnmatchcase(name, g) for g in omit)


# ----------------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------------
def generate(outdir, base_seed, max_tries, omit, only):
    total_bytes = 0
    for fi, (fname, cfg) in enumerate(FIXTURES.items()):
        if only and fname not in only:
            continue
        for attempt in range(max_tries):
            seed = base_seed + 100000 * fi + attempt
            rng = np.random.default_rng(seed)
            init = gen_weights(cfg, rng)
            batches = gen_batches(cfg, rng)
            recs, diag = run_pipeline(cfg, init, batches, torch.float32, relabel=True)
            if not acceptable(cfg, diag):
                continue
            _, diag64 = run_pipeline(cfg, init, batches, torch.float64)
            m = margins(cfg, diag, diag64)
            if margins_ok(m):
                break
        else:
            sys.exit("%s: no acceptable seed in %d tries" % (fname, max_tries))
        records = config_records(cfg) + init_records(cfg, init) + recs
        records = [(n, a) for n, a in records if not omitted(n, omit)]
        path = os.path.join(outdir, fname + ".trfx")
        write_trfx(path, records)
        size = os.path.getsize(path)
        total_bytes += size
        print("%s: seed %d (attempt %d), %d records, %d bytes" % (path, seed, attempt + 1,
                                                                 len(records), size))
        print("  halted after each step (of %d): %s" % (cfg["batch_size"], diag["halted_counts"]))
        print("  exact-correct halted rows per step: %s" % diag["exact"])
        print("  min |q_halt| per step: %s" % ", ".join(
            "%.4f" % np.abs(q).min() for q in diag["q_halt"]))
        if is_hrm(cfg):
            print("  min |q_halt - q_continue| per step: %s" % ", ".join(
                "%.4f" % np.abs(q).min() for q in diag["q_diff"]))
            print("  rows at the last step (target = sigmoid(q_halt')) per step: %s" % [
                int(a.sum()) for a in diag["last"]])
        gaps = []
        for lg, mk in zip(diag["logits"], diag["mask"]):
            top2 = np.sort(lg, axis=-1)[..., -2:]
            gaps.append((top2[..., 1] - top2[..., 0])[mk].min())
        print("  min masked top-2 logit gap per step: %s" % ", ".join("%.4g" % g for g in gaps))
        print_margins(m)
        if size > 2**20:
            print("  ** over 1 MiB **")
    print("total size of fixtures: %d bytes (%.3f MiB)" % (total_bytes, total_bytes / 2**20))


# ----------------------------------------------------------------------------------------------
# Self-check
# ----------------------------------------------------------------------------------------------
DISCRETE_SUFFIXES = ("halted_before", "halted_after", "steps", "inputs", "labels",
                     "puzzle_identifiers", "metrics.count", "metrics.exact_accuracy",
                     "metrics.q_halt_accuracy", "metrics.steps", ".lr", "puzzle_emb_lr")
# Continuous records compared against the float64 replay with a relative bound of 1e-3 of the
# tensor's largest value.


def record_kind(n):
    parts = n.split(".")
    if parts[0].startswith("step"):
        return parts[1]
    if n.startswith("final.ema."):
        return "final.ema"
    return parts[0]


def check_file(path, omit):
    print("== %s (%d bytes)" % (path, os.path.getsize(path)))
    stored = read_trfx(path)
    cfg = config_from_records(stored)
    names = [n for n, _ in dense_param_shapes(cfg)]
    init = {n: stored[PREFIX + n] for n in names + BUFFER_NAMES}
    batches = [dict(inputs=stored["step%d.inputs" % k].copy(),
                    labels=stored["step%d.labels" % k].copy(),
                    puzzle_identifiers=stored["step%d.puzzle_identifiers" % k].copy())
               for k in range(1, N_STEPS + 1)]
    ok = True

    # (a) the fp32 twin reproduces every stored record bit for bit from the stored inputs
    recs32, d32 = run_pipeline(cfg, init, [dict((k, v.copy()) for k, v in b.items())
                                           for b in batches], torch.float32)
    expected = [n for n, _ in config_records(cfg) + init_records(cfg, init) + recs32
                if not omitted(n, omit)]
    if list(stored) != expected:
        ok = False
        print("  record list mismatch: missing %s, extra %s" % (
            sorted(set(expected) - set(stored)), sorted(set(stored) - set(expected))))
    present = [(n, a) for n, a in recs32 if n in stored]
    n_bad = sum(1 for n, a in present if not np.array_equal(a, stored[n]))
    print("  fp32 re-run from stored weights/batches: %d of %d records differ bitwise" % (
        n_bad, len(present)))
    ok &= n_bad == 0

    # (b) float64 replay: identical discrete outcomes, close continuous values
    recs64, d64 = run_pipeline(cfg, init, batches, torch.float64)
    worst = collections.OrderedDict()
    for n, a in recs64:
        if n not in stored:
            continue
        s = stored[n]
        if n.endswith(DISCRETE_SUFFIXES):
            if not np.array_equal(np.asarray(a, np.float64), np.asarray(s, np.float64)):
                ok = False
                print("  DISCRETE MISMATCH %s: f64 %s vs stored %s" % (n, a, s))
            continue
        a64, s64 = np.asarray(a, np.float64), np.asarray(s, np.float64)
        diff = float(np.abs(a64 - s64).max())
        rel = diff / max(float(np.abs(a64).max()), 1e-30)
        kind = record_kind(n)
        if kind not in worst or rel > worst[kind][0]:
            worst[kind] = (rel, diff, n)
    print("  float64 replay vs stored fp32, worst record per kind "
          "(max|diff|/max|value|, max|diff|):")
    for kind, (rel, diff, n) in worst.items():
        print("    %-12s %.2e  %.2e  (%s)" % (kind, rel, diff, n))
        ok &= rel < 1e-3
    m = margins(cfg, d32, d64)
    print_margins(m, "  ")
    ok &= margins_ok(m)

    # (c) finite differences of step-1 (total/B) in float64 vs float64 autograd.
    #     The early cycles run without grad, so the function differentiated is the last H cycle
    #     from the fixed entry state (z_H, z_L), with x recomputed from the perturbed weights.
    st = d64["step1"]
    W0 = {n: torch.tensor(init[n], dtype=torch.float64) for n in names}
    rope = rope_tables(cfg, torch.float64) if cfg["pos_encodings"] == "rope" else None
    B = cfg["batch_size"]

    def loss_of(Wd, prow):  # HRM: the target Q is a constant of the step (computed without grad)
        x = embed(cfg, Wd, prow, st["data"]["inputs"])
        zH, _ = grad_part(cfg, Wd, st["zH_in"], st["zL_in"], x, rope)
        logits, qh, qc = heads(cfg, Wd, zH)
        return ((1.0 / B) * loss_terms(cfg, logits, qh, st["data"]["labels"], qc,
                                       st["target"])["total"]).item()

    picks = []
    gen = np.random.default_rng(123)
    for n in names:
        for _ in range(2):
            idx = tuple(int(gen.integers(0, d)) for d in init[n].shape)
            if n == "embed_tokens.embedding_weight":
                idx = (int(st["data"]["inputs"][0, idx[1] % cfg["seq_len"]]),) + idx[1:]
            picks.append((n, idx))
    results = []
    h = 1e-6
    for n, idx in picks:
        Wp = {kk: vv.clone() for kk, vv in W0.items()}
        Wm = {kk: vv.clone() for kk, vv in W0.items()}
        Wp[n][idx] += h
        Wm[n][idx] -= h
        fd = (loss_of(Wp, st["prow"]) - loss_of(Wm, st["prow"])) / (2 * h)
        results.append((n, idx, fd, st["grads"][n][idx].item()))
    for r, c in ((0, 0), (1, 5), (3, 17)):
        pp, pm = st["prow"].clone(), st["prow"].clone()
        pp[r, c] += h
        pm[r, c] -= h
        fd = (loss_of(W0, pp) - loss_of(W0, pm)) / (2 * h)
        results.append(("puzzle_emb_rows", (r, c), fd, st["gprow"][r, c].item()))
    max_rel = 0.0
    for n, idx, fd, ad in results:
        rel = abs(fd - ad) / max(abs(ad), 1e-8)
        max_rel = max(max_rel, rel)
        print("    FD %-44s %-10s fd % .9e  autograd % .9e  rel %.1e" % (n, idx, fd, ad, rel))
    print("  finite differences vs float64 autograd (%d entries): max rel err %.2e" % (
        len(results), max_rel))
    ok &= max_rel < 1e-5
    # (d) the stored fp32 step-1 grads agree with float64 autograd
    worst_g = max(float(np.abs(st["grads"][n].numpy() - stored["step1.grad." + n]).max() /
                        max(np.abs(st["grads"][n].numpy()).max(), 1e-30))
                  for n in names if "step1.grad." + n in stored)
    print("  stored fp32 step-1 grads vs float64 autograd: max rel err %.2e" % worst_g)
    print("  %s" % ("PASS" if ok else "FAIL"))
    return ok


# ----------------------------------------------------------------------------------------------
# A tiny HRM run directory in the reference's layout (tests/test_tools.c converts it)
# ----------------------------------------------------------------------------------------------
HRM_CKPT = dict(vocab_size=7, seq_len=12, hidden_size=16, num_heads=2, expansion=4, H_layers=2,
                L_layers=1, H_cycles=2, L_cycles=2, puzzle_emb_ndim=16, puzzle_emb_len=0,
                num_puzzle_identifiers=5, pos_encodings="rope", mlp_t=False, arch="hrm",
                halt_max_steps=4, halt_exploration_prob=0.1)


def hrm_all_config(cfg, data_path):
    """What the reference's pretrain.py dumps (yaml.dump(PretrainConfig.model_dump()), keys sorted):
    the arch block has hrm_v1.yaml's fields, interpolations resolved; no vocab or sequence sizes."""
    arch = dict(name="hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1",
                loss=dict(name="losses@ACTLossHead", loss_type="stablemax_cross_entropy"))
    for k in ("halt_exploration_prob", "halt_max_steps", "H_cycles", "L_cycles", "H_layers",
              "L_layers", "hidden_size", "num_heads", "expansion", "puzzle_emb_ndim", "pos_encodings"):
        arch[k] = cfg[k]
    return dict(arch=arch, data_path=data_path, global_batch_size=768, epochs=20000, lr=7e-05,
                lr_min_ratio=1.0, lr_warmup_steps=2000, weight_decay=1.0, beta1=0.9, beta2=0.95,
                puzzle_emb_lr=7e-05, puzzle_emb_weight_decay=1.0, project_name="Hrm-tiny ACT-torch",
                run_name="HierarchicalReasoningModel_ACTV1 tiny-twin",
                checkpoint_path="checkpoints/Hrm-tiny ACT-torch/HierarchicalReasoningModel_ACTV1 tiny-twin",
                seed=0, checkpoint_every_eval=True, eval_interval=2000, eval_save_outputs=[])


def write_hrm_checkpoint(root):
    """root/run/{checkpoint, all_config.yaml}: the released layout, "_orig_mod.model.inner." keys,
    H_init/L_init in bfloat16 as the reference creates them; root/plain/{step_10, all_config.yaml}:
    the same weights without "_orig_mod."; root/noconfig/checkpoint: no all_config.yaml;
    root/badshape: H_level.layers.1.mlp.down_proj.weight has half its columns; root/dataset.json:
    the dataset sizes; root/expected.safetensors: every tensor as F32 ("model.inner.<name>"; the
    bf16 buffers widened exactly), the config (HRM_CKPT) as JSON in its metadata."""
    import yaml
    cfg = dict(HRM_CKPT)
    W = gen_weights(cfg, np.random.default_rng(14))
    W["H_init"] = torch.tensor(W["H_init"]).to(torch.bfloat16)
    W["L_init"] = torch.tensor(W["L_init"]).to(torch.bfloat16)
    order = ["H_init", "L_init", "embed_tokens.embedding_weight", "lm_head.weight", "q_head.weight",
             "q_head.bias", "puzzle_emb.weights"] + [n for n, _ in dense_param_shapes(cfg)
                                                     if n.startswith(("H_level.", "L_level."))]
    assert sorted(order) == sorted(W), "state_dict keys"

    def sd(prefix, bad=False):
        out = collections.OrderedDict()
        for n in order:
            t = W[n] if isinstance(W[n], torch.Tensor) else torch.tensor(W[n])
            if bad and n == "H_level.layers.1.mlp.down_proj.weight":
                t = t[:, : t.shape[1] // 2]
            out[prefix + PREFIX + n] = t.clone()
        return out

    all_config = yaml.dump(hrm_all_config(cfg, "data/hrm-tiny-twin"))
    for sub, fname, prefix, bad, conf in (("run", "checkpoint", "_orig_mod.", False, True),
                                          ("plain", "step_10", "", False, True),
                                          ("noconfig", "checkpoint", "_orig_mod.", False, False),
                                          ("badshape", "checkpoint", "_orig_mod.", True, True)):
        d = os.path.join(root, sub)
        os.makedirs(d, exist_ok=True)
        torch.save(sd(prefix, bad), os.path.join(d, fname))
        if conf:
            with open(os.path.join(d, "all_config.yaml"), "w") as f:
                f.write(all_config)
    with open(os.path.join(root, "dataset.json"), "w") as f:
        json.dump(dict(pad_id=0, ignore_label_id=-100, blank_identifier_id=0,
                       vocab_size=cfg["vocab_size"], seq_len=cfg["seq_len"],
                       num_puzzle_identifiers=cfg["num_puzzle_identifiers"], total_groups=4,
                       mean_puzzle_examples=1.0, sets=["all"]), f)
    import convert_checkpoint as conv  # tools/, beside this file
    recs = []
    for n in order:
        a = (W[n] if isinstance(W[n], torch.Tensor) else torch.tensor(W[n])).float().numpy()
        recs.append((PREFIX + n, "F32", a.shape, a.astype("<f4").tobytes()))
    conv.write_safetensors(os.path.join(root, "expected.safetensors"), recs,
                           {"config": json.dumps({k: v for k, v in cfg.items()})})
    print("%s: run/checkpoint, plain/step_10, noconfig/, badshape/, dataset.json, "
          "expected.safetensors" % root)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outdir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "tests", "data"))
    ap.add_argument("--seed", type=int, default=1, help="first seed of the search")
    ap.add_argument("--max-tries", type=int, default=20000)
    ap.add_argument("--omit", action="append", default=None, metavar="GLOB",
                    help="leave out records whose name matches GLOB (repeatable; pass the same "
                         "globs to --check); default: %s" % " ".join(DEFAULT_OMIT))
    ap.add_argument("--check", action="store_true", help="verify the written fixtures")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", choices=list(FIXTURES),
                    help="only this fixture (repeatable)")
    ap.add_argument("--hrm-checkpoint", metavar="DIR",
                    help="write a tiny HRM run directory in the reference's layout (converter test)")
    args = ap.parse_args()
    if args.omit is None:
        args.omit = list(DEFAULT_OMIT)
    torch.set_num_threads(1)  # one thread: fixed reduction order, reproducible bits
    torch.manual_seed(0)
    outdir = os.path.normpath(args.outdir)
    if args.hrm_checkpoint:
        write_hrm_checkpoint(args.hrm_checkpoint)
        return
    if args.check:
        ok = all([check_file(os.path.join(outdir, n + ".trfx"), args.omit) for n in FIXTURES
                  if not args.only or n in args.only])
        print("self-check: %s" % ("PASS" if ok else "FAIL"))
        sys.exit(0 if ok else 1)
    os.makedirs(outdir, exist_ok=True)
    generate(outdir, args.seed, args.max_tries, args.omit, args.only)


if __name__ == "__main__":
    main()
