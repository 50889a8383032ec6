#!/usr/bin/python3
"""PyTorch twin of the TRM and HRM training steps, used to write parity fixtures for tinyrec.h.

This is an independent re-implementation of the math in
/work/shared/docs/reference-models.md sections 1-5 (forward_dtype float32, and bfloat16 / float16
through the rounding points listed at Round, sec. 1.5's dtype policy): input embedding,
post-norm blocks (attention+RoPE or mlp_t), the recursion with no-grad early cycles (TRM: one
module, T x (n+1) applications, the last cycle with grad; HRM, sec. 2.2: H_level and L_level with
their own weights, only the last f_L and f_H with grad), the ACT carry,
stablemax / softmax CE + BCE halting loss, HRM's Q-learning (halt on q_halt > q_continue, the
bootstrapped target from a second no-grad forward, q_continue loss), metrics,
AdamATan2 + sign-SGD puzzle table + cosine/warmup schedule + EMA.

Usage (needs the Debian torch: /usr/bin/python3):
    /usr/bin/python3 tools/torch_reference.py            # write tests/data/{trm,hrm}_tiny_{mlp,att}.trfx
                                                         # and the *_bf16 / *_fp16 ones (FIXTURES)
    /usr/bin/python3 tools/torch_reference.py --check    # re-read them; float64 replay + finite differences
    /usr/bin/python3 tools/torch_reference.py --only hrm_tiny_att   # one fixture
    /usr/bin/python3 tools/torch_reference.py --hrm-checkpoint DIR  # an HRM run directory as the
        reference writes it (DIR/checkpoint: torch.save(state_dict) with "_orig_mod.model.inner."
        keys; DIR/all_config.yaml), variants and DIR/expected.safetensors (the same tensors in
        F32), for the converter test in tests/test_tools.c
    /usr/bin/python3 tools/torch_reference.py --crosscheck-bf16  # the Round twin's bf16 forward
        against one with bf16 tensors (not in the fixture path)

File format (.trfx, little endian): 8-byte magic "TRFX0001", u32 record count, then per record:
u32 name_len, name bytes (no NUL), u32 dtype (0 f32, 1 i32, 2 f64), u32 ndim, u64 dims[ndim],
raw row-major data.

Record naming: initial weights and buffers are "model.inner.<name>"; gradients, final weights
and EMA use the bare name: "step1.grad.<name>", "final.<name>", "final.ema.<name>".
HRM fixtures add config.arch (1), config.H_layers and config.no_ACT_continue (0), and per step
next_q_halt / next_q_continue (the extra forward's Q values), target_q_continue (the sigmoid
target) and q_continue_loss. The TRM fixtures do not have these records (arch 0, no_ACT_continue 1).
The reduced-precision fixtures (trm_tiny_mlp_bf16, trm_tiny_att_bf16, hrm_tiny_att_bf16,
trm_tiny_mlp_fp16) have the records of their fp32 counterparts plus config.forward_dtype (f64:
0 float32, 1 bfloat16, 2 float16; after the other config records), their values those of the
rounded twin (weights, optimizer and EMA in fp32 as always).

Fixture data are chosen by a deterministic seed search: every step must have both halted and
running rows, and every discrete decision (q_halt sign, argmax, sign of each summed puzzle-row
grad, sign of each step-1 dense grad, which AdamATan2 turns into a +-lr/bc1*atan(0.1) step)
must sit well clear of fp32 rounding, measured against a float64 replay of the same data (HRM: q_halt - q_continue too,
the halting decision). The reduced-precision fixtures use other criteria, against the
low-precision noise (see K_LP), and half-scale block weights (LP_BLOCK_INIT_SCALE).
The runs use one thread, so the files are reproducible bit for bit (on one machine: the fp32 sums
of torch's CPU kernels differ between processors).
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
# config.forward_dtype (only in the reduced-precision fixtures; absent means float32).
FORWARD_DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}
_LP_TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16}

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
# Reduced forward precision (see Round below): the same configs, forward_dtype set. Appended after
# the fp32 ones so that the fp32 fixtures keep their seeds (base + 100000 * index + attempt).
FIXTURES.update({
    "trm_tiny_mlp_bf16": dict(FIXTURES["trm_tiny_mlp"], forward_dtype="bfloat16"),
    "trm_tiny_att_bf16": dict(FIXTURES["trm_tiny_att"], forward_dtype="bfloat16"),
    "hrm_tiny_att_bf16": dict(FIXTURES["hrm_tiny_att"], forward_dtype="bfloat16"),
    "trm_tiny_mlp_fp16": dict(FIXTURES["trm_tiny_mlp"], forward_dtype="float16"),
})
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


def forward_dtype(cfg):
    return cfg.get("forward_dtype", "float32")


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
    if "forward_dtype" in cfg:  # reduced-precision fixtures only (the fp32 ones keep their bytes)
        recs.append(("config.forward_dtype", np.float64(FORWARD_DTYPE_CODES[cfg["forward_dtype"]])))
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
    if "config.forward_dtype" in recs:
        cfg["forward_dtype"] = {c: n for n, c in FORWARD_DTYPE_CODES.items()}[
            int(recs["config.forward_dtype"])]
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


# Reduced-precision fixtures only: the block weights (H_level / L_level) are drawn as above, then
# scaled by this (the random draws, and so the rest of the data, are the same as unscaled). With
# the reference's scale the tiny recursions amplify rounding noise 10^2 (step 1) to 10^3 (step 3)
# times: the fp32 fixtures show it (|fp32 - f64| of the logits 1e-5..1e-4), and in bf16 it makes
# trm_tiny_mlp's steps 2-3 noise (median max |bf16 - f64| of the logits 0.4 / 2.5 / 2.2 in steps
# 1-3, against logits within +-3; fp16 0.05 / 0.57 / 0.39), so that no seed has clear decisions
# there and a C test could not hold it to anything near the rounding. At half scale the blocks are
# contractive enough that the drift stays at a few ulps of the logits in every step (bf16: 0.035 /
# 0.037 / 0.033; trm_tiny_att 0.025, hrm_tiny_att 0.022; fp16 0.005), while the carry still moves
# the logits by 1-4 (a carried row against a reset one), so the fixtures still test the carry.
LP_BLOCK_INIT_SCALE = 0.5


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
        if forward_dtype(cfg) != "float32" and ".layers." in name:
            w[name] *= np.float32(LP_BLOCK_INIT_SCALE)
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
class Round(torch.autograd.Function):
    """R(t): round an fp32 tensor to the forward dtype (bfloat16 or float16, round to nearest even,
    float16 with its subnormals) and back to fp32. The backward rounds the incoming gradient the
    same way: in the reference's bf16 autograd every activation gradient is a bf16 tensor, and each
    use of a weight (CastedLinear / CastedEmbedding cast it per call) hands back a bf16 gradient
    that AccumulateGrad sums in fp32 into the master grad; here R(W) is applied at each use, so each
    use's weight gradient is rounded and autograd sums them in fp32. The gradient of an activation
    is rounded once, where it was rounded in the forward, after the gradients of its uses are
    summed in fp32; bf16 autograd rounds each use's gradient and sums in bf16, and rounds a few
    more intermediate gradients (sqrt(D) * g of the embedding rows before their scatter-add into
    R(W_tok)'s gradient). So this equals bf16 autograd up to the order and the precision of such
    sums, and works for float16 (its subnormals included) on the CPU."""

    @staticmethod
    def forward(ctx, t, lp):
        ctx.lp = lp
        return t.to(lp).to(t.dtype)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.lp).to(g.dtype), None


def _no_round(t):
    return t


def rounder(cfg):
    """The rounding R of cfg's forward dtype; the identity for float32 (then every function below
    does exactly the fp32 twin's operations, so the fp32 fixtures keep their bits)."""
    lp = _LP_TORCH.get(forward_dtype(cfg))
    if lp is None:
        return _no_round
    return lambda t: Round.apply(t, lp)


# The rounding points of a reduced forward dtype (R; every activation is stored in that dtype, and
# every operation below is computed in fp32 from rounded operands, as the reference's bf16 kernels
# accumulate in fp32):
#   embedding     R(W_tok)[tok]; puzzle prefix R(puzzle row), zero-padded; learned positions
#                 e = R(0.707106781 * R(e + R(W_pos))); x = R(sqrt(D) * e)
#   carries       z_H = R(H_init), z_L = R(L_init) at a reset (later carries are block outputs)
#   adds          inj = R(z_H + x), h0 = R(z_L + inj), R(z_H + z_L)
#   linear        R(x @ R(W)^T), fp32 accumulation
#   post-norm     R(rms_fp32(R(a + b)))
#   SwiGLU        R(R(silu(g)) * u)
#   RoPE          R(rope in fp32) on q and k
#   attention     R(softmax(q k^T / sqrt(hd)) v) in fp32 from the rounded q, k, v
#   mlp_t         the same linear / SwiGLU / norm rules on the transposed [B, D, S] layout
#   heads         logits = R(z_H @ R(W_lm)^T); q = R(z_H[:, 0] @ R(W_q)^T + R(b_q)), used as fp32
# The losses take the rounded logits (stablemax in float64) and q values (BCE in fp32).
def rms_norm(x, eps):
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps)


def swiglu(x, w_gu, w_down, R=_no_round):
    gu = R(x @ R(w_gu).t())
    inter = w_gu.shape[0] // 2
    gate, up = gu[..., :inter], gu[..., inter:]
    return R(R(R(F.silu(gate)) * up) @ R(w_down).t())


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
    R = rounder(cfg)
    B, S, D = h.shape
    H = cfg["num_heads"]
    hd = D // H
    qkv = R(h @ R(w_qkv).t()).view(B, S, 3 * H, hd)
    q, k, v = qkv[:, :, :H], qkv[:, :, H:2 * H], qkv[:, :, 2 * H:]
    if rope is not None:
        cos, sin = rope[0].view(1, S, 1, hd), rope[1].view(1, S, 1, hd)
        q = R(q * cos + rotate_half(q) * sin)
        k = R(k * cos + rotate_half(k) * sin)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, hd]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    o = R(torch.softmax(scores, dim=-1) @ v)
    o = o.transpose(1, 2).reshape(B, S, D)
    return R(o @ R(w_o).t())


def block(cfg, W, p, h, rope):
    """One post-norm block; p: its name prefix, "L_level.layers.<i>." or "H_level.layers.<i>."."""
    eps = cfg["rms_norm_eps"]
    R = rounder(cfg)
    if cfg["mlp_t"]:
        ht = h.transpose(1, 2)  # [B, D, S]
        ht = R(rms_norm(R(ht + swiglu(ht, W[p + "mlp_t.gate_up_proj.weight"],
                                      W[p + "mlp_t.down_proj.weight"], R)), eps))  # RMS over S
        h = ht.transpose(1, 2)
    else:
        h = R(rms_norm(R(h + attention(cfg, h, W[p + "self_attn.qkv_proj.weight"],
                                       W[p + "self_attn.o_proj.weight"], rope)), eps))
    h = R(rms_norm(R(h + swiglu(h, W[p + "mlp.gate_up_proj.weight"], W[p + "mlp.down_proj.weight"],
                                R)), eps))
    return h


def net(cfg, W, h, inj, rope, level="L_level"):
    """A reasoning module: h + inj, then its blocks."""
    h = rounder(cfg)(h + inj)
    for i in range(cfg["H_layers"] if level == "H_level" else cfg["L_layers"]):
        h = block(cfg, W, "%s.layers.%d." % (level, i), h, rope)
    return h


def embed(cfg, W, prow, inputs):
    """prow: [B, Dp] looked-up puzzle vectors. Returns x = sqrt(D) * e, [B, S, D]."""
    R = rounder(cfg)
    B = inputs.shape[0]
    D, Lp, Dp = cfg["hidden_size"], prefix_len(cfg), cfg["puzzle_emb_ndim"]
    e = R(W["embed_tokens.embedding_weight"])[inputs.long()]
    if Dp > 0:
        pad = Lp * D - Dp
        prow = R(prow)
        pe = F.pad(prow, (0, pad)) if pad > 0 else prow
        e = torch.cat([pe.view(B, Lp, D), e], dim=1)
    if cfg["pos_encodings"] == "learned":
        e = R(0.707106781 * R(e + R(W["embed_pos.embedding_weight"])))
    return R(math.sqrt(D) * e)


def last_cycle(cfg, W, zH, zL, x, rope):
    """TRM: one H cycle of the shared module (n z_L updates, then z_H)."""
    R = rounder(cfg)
    for _ in range(cfg["L_cycles"]):
        zL = net(cfg, W, zL, R(zH + x), rope)
    zH = net(cfg, W, zH, zL, rope)
    return zH, zL


def hrm_grad_step(cfg, W, zH, zL, x, rope):
    """HRM's 1-step gradient part: one f_L (injection z_H + x formed first), then one f_H."""
    zL = net(cfg, W, zL, rounder(cfg)(zH + x), rope, "L_level")
    zH = net(cfg, W, zH, zL, rope, "H_level")
    return zH, zL


def grad_part(cfg, W, zH, zL, x, rope):
    """The part of one inner forward that runs with grad, from the carry the no-grad part left."""
    return (hrm_grad_step if is_hrm(cfg) else last_cycle)(cfg, W, zH, zL, x, rope)


def inner_forward(cfg, W, zH, zL, x, rope):
    """One inner forward (sec. 2.1 / 2.2). Returns (z_H, z_L, the (z_H, z_L) after each z_H update
    (T of them, the last one the grad update), the z_H and z_L the grad part started from)."""
    T, n = cfg["H_cycles"], cfg["L_cycles"]
    R = rounder(cfg)
    cycles = []
    with torch.no_grad():
        if is_hrm(cfg):
            for t in range(T):
                for i in range(n):
                    if not (t == T - 1 and i == n - 1):
                        zL = net(cfg, W, zL, R(zH + x), rope, "L_level")
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
    R = rounder(cfg)
    Lp = prefix_len(cfg)
    logits = R(zH[:, Lp:] @ R(W["lm_head.weight"]).t())
    q = R(zH[:, 0] @ R(W["q_head.weight"]).t() + R(W["q_head.bias"]))
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


def decision_margin(logits, labels):
    """logit[label] - max over the other classes of the logit: its sign is whether argmax == label
    (the is_correct of the metrics and the BCE target); labels: int64, no IGNORE."""
    lg = logits.detach()
    own = torch.gather(lg, -1, labels.unsqueeze(-1)).squeeze(-1)
    other = lg.scatter(-1, labels.unsqueeze(-1), -math.inf).max(-1).values
    return own - other


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
    A forward_dtype other than float32 rounds as the Round comment says, computing in dtype: the
    twin is dtype float32; dtype float64 is the jitter replay (the same rounding points, float64
    sums in between, as another implementation's other summation order), never written.
    Returns (records, diag)."""
    B, L, S, D = cfg["batch_size"], cfg["seq_len"], seq_total(cfg), cfg["hidden_size"]
    M = cfg["halt_max_steps"]
    names = [n for n, _ in dense_param_shapes(cfg)]
    W = collections.OrderedDict(
        (n, torch.tensor(init[n], dtype=dtype).requires_grad_(True)) for n in names)
    P = torch.tensor(init["puzzle_emb.weights"], dtype=dtype)
    H_init = torch.tensor(init["H_init"], dtype=dtype)
    L_init = torch.tensor(init["L_init"], dtype=dtype)
    H_init, L_init = rounder(cfg)(H_init), rounder(cfg)(L_init)
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
    diag = dict(halted_counts=[], q_halt=[], q_cont=[], q_diff=[], last=[], logits=[], mask=[],
                labels=[], src=[], G=[], exact=[], halted=[], seq_correct=[], step1=None)
    src = np.zeros(B, np.int64)  # the step whose batch each row's data came from
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
        diag["q_cont"].append(npf(q_cont))
        diag["q_diff"].append(npf(q_halt - q_cont))
        diag["labels"].append(data["labels"].numpy().copy())
        src = np.where(hb.numpy(), k - 1, src)
        diag["src"].append(src.copy())
        diag["halted"].append(halted.numpy().copy())
        diag["seq_correct"].append(lt["seq_correct"].numpy().copy())
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
    """Absolute criteria on a run (reduced precision: the top-2 gap is left to lp_margins, which
    bounds the decision that matters, label against the rest; a tie of two other logits is
    harmless)."""
    B = cfg["batch_size"]
    gaps = []
    for lg, mk in zip(diag["logits"], diag["mask"]):
        top2 = np.sort(lg, axis=-1)[..., -2:]
        gaps.append((top2[..., 1] - top2[..., 0])[mk].min() if mk.any() else -math.inf)
    ok = (all(0 < c < B for c in diag["halted_counts"])
          and min(np.abs(q).min() for q in diag["q_halt"]) > MIN_ABS_Q_HALT
          and (min(gaps) > MIN_LOGIT_GAP or forward_dtype(cfg) != "float32")
          and sum(diag["exact"]) > 0 and all(mk.any() for mk in diag["mask"]))
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


# ----------------------------------------------------------------------------------------------
# Reduced forward precision: the discrete decisions against the low-precision noise
# ----------------------------------------------------------------------------------------------
# A C implementation with the same rounding points differs from the twin only in the order of its
# fp32 sums. Where that moves a value across a rounding boundary of the forward dtype the two runs
# part by one ulp (with bf16 a few per thousand rounded values, in every layer), and the network
# carries that on as it carries any rounding error (see LP_BLOCK_INIT_SCALE for how much). Two
# replays of the fixture data measure that noise, per step and per quantity X (over the step's
# whole tensor: all rows, all positions):
#   drift(X)  = max |X_twin - X_f64|, the float64 replay without rounding: the twin's whole
#               rounding error;
#   jitter(X) = max |X_twin - X_jit|, the jitter replay: the same rounding points with float64
#               sums between them, i.e. one other implementation of them, the kind of difference
#               that C will have (measured: 0.1 to 1.5 x drift; exactly 0 in some steps).
# noise(X) = max(drift(X), jitter(X)). C's value lies within about noise(X) of the twin's, but a
# maximum over a few values (q: 8 per step) from one sample is itself uncertain by a factor of
# ~1.5-2 (seen between replays), so a decision counts as clear only if the quantity it is taken on
# is at least K_LP = 3 times the noise that can reach it:
#   q_halt sign (halting; the q_halt_accuracy metric):   |q_halt| >= K_LP * nq,
#       nq = max(noise(q_halt), noise(q_continue)) of the step;
#   HRM q_halt - q_continue (halting):                   |q_halt - q_cont| >= K_LP * 2 nq;
#   argmax at a label-masked position (is_correct, seq_correct: the metrics and the BCE target):
#       it changes only if the sign of dec = logit[label] - max_{j != label} logit[j] does, and
#       |change of dec| <= 2 noise(logits), so |dec| >= K_LP * 2 noise(logits) of the step.
# Labels do not enter the forward, so the search makes the argmax decisions clear by construction:
# a label whose |dec| is under LP_LABEL_SAFETY times that bound at any step it is used becomes
# IGNORE in its batch and the three runs are repeated (the trajectory moves a little with the
# loss; labels only ever go, so this ends).
# Two kinds of sign cannot be made clear, and are reported, not required: the sign of every step-1
# dense grad (AdamATan2's first step is +-lr/bc1*atan(0.1) per entry, whatever |g|) and of every
# summed puzzle-row grad (sign-SGD, every step): 40-77k and a few hundred values spread down to
# zero, the gradients carrying the rounding of every activation gradient, so every seed has
# thousands of dense entries and a few puzzle entries inside the noise (the committed fixtures:
# 7.5k-33k dense step-1 grads under 3 x noise, 31-348 dense signs that differ between the twin and
# the float64 replay, 0-93 from the jitter replay; 0-3 puzzle entries per step). Each such flip
# moves one weight by twice its step, 2 lr_1/bc1 atan(0.1) = 1e-3 for a dense weight in step 1,
# 2 puzzle_emb_lr_k (1e-2, 2e-2, 2e-3 in steps 1-3) for a puzzle-table entry (and AdamATan2's later
# steps, atan2 of noisy tiny m and v, move such entries by up to a few 1e-3 more); the effect on
# later steps is of the size of rounding that weight, and is part of the measured drift of those
# steps. A C test must allow the final weights and puzzle table that much (absolute), or count
# such entries.
K_LP = 3.0
LP_LABEL_SAFETY = 1.25   # label floor = 1.25 * K_LP * 2 noise(logits): the trajectory moves a bit
LP_LABEL_ROUNDS = 8      # label-filter rounds before a seed is given up


def exact_cfg(cfg):
    """The config of the float64 replay and of the fp32 twin run of a reduced-precision fixture."""
    return dict(cfg, forward_dtype="float32")


def lp_margins(cfg, d, d64, djit):
    """Margins of a reduced-precision run d against the float64 replay d64 and the jitter replay
    djit (see above). Per step lists; ok says whether the seed is acceptable."""
    tiny = 1e-30
    refs = (d64, djit)
    nst = len(d["q_halt"])

    def noise(key, k):
        a = d[key][k]
        if any(r[key][k].shape != a.shape for r in refs):
            return math.inf
        return max(float(np.abs(a - r[key][k]).max()) for r in refs)

    m = collections.OrderedDict((key, []) for key in (
        "noise_q", "noise_logits", "q_halt", "q_diff", "argmax", "puzzle_flips", "puzzle_ratio"))
    m["same_halted"] = m["same_q"] = m["same_argmax"] = True
    amb = []  # (source step, row, position) of unclear labels
    for k in range(nst):
        nq = max(noise("q_halt", k), noise("q_cont", k), tiny)
        nl = max(noise("logits", k), tiny)
        m["noise_q"].append(nq)
        m["noise_logits"].append(nl)
        m["q_halt"].append(float(np.abs(d["q_halt"][k]).min()) / nq)
        if is_hrm(cfg):
            m["q_diff"].append(float(np.abs(d["q_diff"][k]).min()) / (2 * nq))
        lab, mk = d["labels"][k], d["mask"][k]
        dec = decision_margin(torch.from_numpy(d["logits"][k]),
                              torch.from_numpy(np.where(mk, lab, 0)).long()).numpy()
        m["argmax"].append(float((np.abs(dec) / (2 * nl))[mk].min()) if mk.any() else math.inf)
        for r, pos in zip(*np.nonzero(mk & (np.abs(dec) < LP_LABEL_SAFETY * K_LP * 2 * nl))):
            amb.append((int(d["src"][k][r]), int(r), int(pos)))
        G = d["G"][k]
        m["puzzle_flips"].append(sum(int((np.sign(G) != np.sign(r["G"][k])).sum())
                                     if r["G"][k].shape == G.shape else G.size for r in refs))
        m["puzzle_ratio"].append(float(np.abs(G).min()) / max(noise("G", k), tiny))
        for r in refs:
            m["same_halted"] &= bool(np.array_equal(d["halted"][k], r["halted"][k]))
            m["same_q"] &= all(np.array_equal(np.sign(d[key][k]), np.sign(r[key][k]))
                               for key in (("q_halt", "q_diff") if is_hrm(cfg) else ("q_halt",)))
            rdec = decision_margin(torch.from_numpy(r["logits"][k]),
                                   torch.from_numpy(np.where(mk, lab, 0)).long()).numpy()
            m["same_argmax"] &= bool(np.array_equal(d["seq_correct"][k], r["seq_correct"][k])
                                     and np.array_equal(np.sign(dec[mk]), np.sign(rdec[mk])))
    flips, band, total = [0, 0], 0, 0
    for n, g in d["step1"]["grads"].items():
        a = g.double().numpy()
        for i, r in enumerate(refs):
            flips[i] += int((np.sign(a) != np.sign(r["step1"]["grads"][n].double().numpy())).sum())
        nz = max(float(np.abs(a - r["step1"]["grads"][n].double().numpy()).max()) for r in refs)
        band += int(((a != 0) & (np.abs(a) < K_LP * nz)).sum())
        total += a.size
    m["dense_flips_f64"], m["dense_flips_jit"], m["dense_in_noise"], m["dense_total"] = (
        flips[0], flips[1], band, total)
    m["ambiguous_labels"] = sorted(set(amb))
    m["same_decisions"] = m["same_halted"] and m["same_q"] and m["same_argmax"]
    m["ok"] = bool(m["same_decisions"] and not amb
                   and min(m["q_halt"]) >= K_LP and min(m["argmax"]) >= K_LP
                   and (not is_hrm(cfg) or min(m["q_diff"]) >= K_LP))
    return m


def print_lp_margins(m, indent="  "):
    f = lambda xs: ", ".join("%.3g" % x for x in xs)
    print("%snoise = max(|twin - f64|, |twin - jitter replay|) per step: q %s; logits %s" % (
        indent, f(m["noise_q"]), f(m["noise_logits"])))
    print("%smargins per step (clear at >= %g): |q_halt|/nq %s;%s |dec|/(2 noise(logits)) %s" % (
              indent, K_LP, f(m["q_halt"]),
              " |q_halt-q_continue|/(2 nq) %s;" % f(m["q_diff"]) if m["q_diff"] else "",
              f(m["argmax"])))
    print("%shalting, q signs and argmax decisions identical in the twin, the float64 and the "
          "jitter replay: %s" % (indent, m["same_decisions"]))
    print("%snot required (see above): puzzle-grad signs min |G|/noise(G) per step %s, entries "
          "whose sign differs from f64 + from jitter replay %s; step-1 dense grads: %d of %d "
          "within %g x noise, signs differing from f64 %d, from the jitter replay %d" % (
              indent, f(m["puzzle_ratio"]), m["puzzle_flips"], m["dense_in_noise"],
              m["dense_total"], K_LP, m["dense_flips_f64"], m["dense_flips_jit"]))


def search_lp(cfg, init, batches):
    """One candidate of the reduced-precision seed search: runs, filters unclear labels (in place
    in batches) until none is left, returns (records, diag, margins) or None."""
    recs, d = run_pipeline(cfg, init, batches, torch.float32, relabel=True)
    for _round in range(LP_LABEL_ROUNDS):
        if not acceptable(cfg, d):
            return None
        _, d64 = run_pipeline(exact_cfg(cfg), init, batches, torch.float64)
        _, djit = run_pipeline(cfg, init, batches, torch.float64)
        m = lp_margins(cfg, d, d64, djit)
        if not m["ambiguous_labels"]:
            return (recs, d, m) if m["ok"] else None
        if not (m["same_halted"] and m["same_q"]) or min(m["q_halt"]) < K_LP or (
                is_hrm(cfg) and min(m["q_diff"]) < K_LP):
            return None  # labels cannot help
        for ks, r, pos in m["ambiguous_labels"]:
            batches[ks]["labels"][r, pos] = IGNORE
        recs, d = run_pipeline(cfg, init, batches, torch.float32)
    return None


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
        lp = forward_dtype(cfg) != "float32"
        for attempt in range(max_tries):
            seed = base_seed + 100000 * fi + attempt
            rng = np.random.default_rng(seed)
            init = gen_weights(cfg, rng)
            batches = gen_batches(cfg, rng)
            if lp:
                found = search_lp(cfg, init, batches)
                if found:
                    recs, diag, m = found
                    break
                continue
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
        if lp:
            print("  label-masked positions per step (unclear labels made IGNORE): %s" % [
                int(mk.sum()) for mk in diag["mask"]])
            print_lp_margins(m)
        else:
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
    print("  %s re-run from stored weights/batches: %d of %d records differ bitwise" % (
        "fp32" if forward_dtype(cfg) == "float32" else forward_dtype(cfg) + " twin", n_bad,
        len(present)))
    ok &= n_bad == 0

    if forward_dtype(cfg) != "float32":
        ok_lp, d64 = check_lp(cfg, stored, init, batches, d32)
        ok &= ok_lp
    else:
        ok &= check_fp32(cfg, stored, init, batches, d32)
        _, d64 = run_pipeline(cfg, init, batches, torch.float64)
    ok &= check_gradients(cfg, stored, init, names, d64)
    print("  %s" % ("PASS" if ok else "FAIL"))
    return ok


def check_fp32(cfg, stored, init, batches, d32):
    """--check of an fp32 fixture, (b): the float64 replay takes the same discrete decisions and
    stays within 1e-3 (relative to each record's largest value); the margins."""
    ok = True
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
    return ok


def lp_kind(n):
    """Row of the reduced-precision drift table: step records per step and name (the carries
    stepK.cycleT.z_H / z_L), step-1 grads dense / puzzle rows, final weights dense / puzzle table /
    EMA."""
    if n.startswith("step1.grad."):
        return n if n.endswith("puzzle_emb_rows") else "step1.grad (dense)"
    if n.startswith("step"):
        return n
    if n.startswith("final.ema."):
        return "final.ema"
    return n if n == "final.puzzle_emb.weights" else "final (dense)"


# --check of a reduced-precision fixture: the largest allowed max|diff|/max|ref| of any record
# against the float64 replay, in unit roundoffs of the forward dtype (bf16 2^-9, fp16 2^-12): a
# loose sanity bound (the measured worst, final weights after sign flips aside, is under 16 u).
LP_MAX_REL_U = 64


def check_lp(cfg, stored, init, batches, dlp):
    """--check of a reduced-precision fixture, (b): the float64 replay, the fp32 twin and the
    jitter replay take the stored discrete decisions; the drift of the stored (twin) records
    against each, per record kind; the margins. Returns (ok, the float64 replay's diag)."""
    ok = True
    u = {"bfloat16": 2.0 ** -9, "float16": 2.0 ** -12}[forward_dtype(cfg)]
    runs = collections.OrderedDict()
    runs["float64 replay"] = run_pipeline(exact_cfg(cfg), init, batches, torch.float64)
    runs["fp32 twin"] = run_pipeline(exact_cfg(cfg), init, batches, torch.float32)
    runs["jitter replay"] = run_pipeline(cfg, init, batches, torch.float64)
    tables = collections.OrderedDict()
    for rname, (recs, _) in runs.items():
        worst = collections.OrderedDict()
        for n, a in recs:
            if n not in stored:
                continue
            s = stored[n]
            a64, s64 = np.asarray(a, np.float64), np.asarray(s, np.float64)
            if n.endswith(DISCRETE_SUFFIXES):
                if not np.array_equal(a64, s64):
                    ok = False
                    print("  DISCRETE MISMATCH %s: %s %s vs stored %s" % (n, rname, a, s))
                continue
            diff = float(np.abs(a64 - s64).max())
            rel = diff / max(float(np.abs(a64).max()), 1e-30)
            w = worst.setdefault(lp_kind(n), [0.0, 0.0, n])
            if diff >= w[0]:
                w[0], w[2] = diff, n
            w[1] = max(w[1], rel)
        tables[rname] = worst
    print("  %s twin against each run, per record kind: max|diff| and max over records of "
          "max|diff|/max|value| (u = %g)" % (forward_dtype(cfg), u))
    print("    %-34s" % "kind" + "".join("  %-21s" % r for r in tables))
    for kind in tables["float64 replay"]:
        print("    %-34s" % kind + "".join("  %.2e  %.2e   " % tuple(t[kind][:2])
                                            for t in tables.values()))
    worst64 = max(w[1] for kind, w in tables["float64 replay"].items()
                  if not kind.startswith("final"))
    print("  largest relative drift against float64 (final weights aside): %.2e = %.1f u" % (
        worst64, worst64 / u))
    ok &= worst64 < LP_MAX_REL_U * u
    m = lp_margins(cfg, dlp, runs["float64 replay"][1], runs["jitter replay"][1])
    print_lp_margins(m, "  ")
    ok &= m["ok"]
    return ok, runs["float64 replay"][1]


def check_gradients(cfg, stored, init, names, d64):
    """--check (c), (d): finite differences of step 1 in float64 against float64 autograd, and the
    stored step-1 grads against float64 autograd."""
    ok = True
    # (c) finite differences of step-1 (total/B) in float64 vs float64 autograd.
    #     The early cycles run without grad, so the function differentiated is the last H cycle
    #     from the fixed entry state (z_H, z_L), with x recomputed from the perturbed weights.
    st = d64["step1"]
    W0 = {n: torch.tensor(init[n], dtype=torch.float64) for n in names}
    rope = rope_tables(cfg, torch.float64) if cfg["pos_encodings"] == "rope" else None
    B = cfg["batch_size"]

    xc = exact_cfg(cfg)  # the float64 replay's math: no rounding

    def loss_of(Wd, prow):  # HRM: the target Q is a constant of the step (computed without grad)
        x = embed(xc, Wd, prow, st["data"]["inputs"])
        zH, _ = grad_part(xc, Wd, st["zH_in"], st["zL_in"], x, rope)
        logits, qh, qc = heads(xc, Wd, zH)
        return ((1.0 / B) * loss_terms(xc, logits, qh, st["data"]["labels"], qc,
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
    print("  stored %s step-1 grads vs float64 autograd: max rel err %.2e" % (
        "fp32" if forward_dtype(cfg) == "float32" else forward_dtype(cfg) + " twin", worst_g))
    return ok


# ----------------------------------------------------------------------------------------------
# Cross-check of the Round twin against a true bf16 forward (not in the fixture path)
# ----------------------------------------------------------------------------------------------
def true_bf16_forward(cfg, init, batch, avoid_cpu_quirks=False):
    """One inner forward from the reset carry with bf16 tensors, as the reference runs it: weights
    .to(bfloat16), bf16 matmuls / adds / products / silu / products with a Python scalar (torch's
    CPU kernels), RMSNorm, RoPE and attention upcast to fp32 and cast back, the q head as F.linear
    (one addmm). avoid_cpu_quirks: three CPU bf16 kernels of torch 1.13 are not what the reference's
    CUDA kernels (fp32 opmath, fp32 accumulation) do, so compute silu and the products with a
    Python scalar in fp32 and round once (the CPU kernels round the scalar to bf16 first, 5.65625
    for sqrt(32), and do not give R(silu_fp32(g))), and make the SwiGLU inputs contiguous (mlp_t
    transposes: a bf16 matmul on a strided view loses 1-3%, it does not accumulate in fp32).
    Returns (cycles [(z_H, z_L)], logits, q) as fp32 tensors."""
    bf = torch.bfloat16

    def silu(g):
        return F.silu(g.float()).to(bf) if avoid_cpu_quirks else F.silu(g)

    def smul(c, t):
        return (c * t.float()).to(bf) if avoid_cpu_quirks else c * t
    W = {n: torch.tensor(init[n]).to(bf) for n, _ in dense_param_shapes(cfg)}
    B, S, D = cfg["batch_size"], seq_total(cfg), cfg["hidden_size"]
    Lp, Dp, H = prefix_len(cfg), cfg["puzzle_emb_ndim"], cfg["num_heads"]
    hd, eps = D // H, cfg["rms_norm_eps"]
    rope = rope_tables(cfg, torch.float32) if cfg["pos_encodings"] == "rope" else None

    def rms(x):
        return rms_norm(x.float(), eps).to(bf)

    def swi(x, gu_w, down_w):
        gu = (x.contiguous() if avoid_cpu_quirks else x) @ gu_w.t()
        i = gu_w.shape[0] // 2
        return (silu(gu[..., :i]) * gu[..., i:]) @ down_w.t()

    def attn(h, w_qkv, w_o):
        qkv = (h @ w_qkv.t()).view(B, S, 3 * H, hd)
        q, k, v = qkv[:, :, :H], qkv[:, :, H:2 * H], qkv[:, :, 2 * H:]
        if rope is not None:
            cos, sin = rope[0].view(1, S, 1, hd), rope[1].view(1, S, 1, hd)
            q = (q.float() * cos + rotate_half(q.float()) * sin).to(bf)
            k = (k.float() * cos + rotate_half(k.float()) * sin).to(bf)
        q, k, v = (t.transpose(1, 2).float() for t in (q, k, v))
        o = (torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(hd), dim=-1) @ v).to(bf)
        return o.transpose(1, 2).reshape(B, S, D) @ w_o.t()

    def netb(h, inj, level):
        h = h + inj
        for i in range(cfg["H_layers"] if level == "H_level" else cfg["L_layers"]):
            p = "%s.layers.%d." % (level, i)
            if cfg["mlp_t"]:
                ht = h.transpose(1, 2)
                h = rms(ht + swi(ht, W[p + "mlp_t.gate_up_proj.weight"],
                                 W[p + "mlp_t.down_proj.weight"])).transpose(1, 2)
            else:
                h = rms(h + attn(h, W[p + "self_attn.qkv_proj.weight"],
                                 W[p + "self_attn.o_proj.weight"]))
            h = rms(h + swi(h, W[p + "mlp.gate_up_proj.weight"], W[p + "mlp.down_proj.weight"]))
        return h

    inputs = torch.from_numpy(batch["inputs"]).long()
    e = W["embed_tokens.embedding_weight"][inputs]
    if Dp > 0:
        prow = torch.tensor(init["puzzle_emb.weights"])[torch.from_numpy(
            batch["puzzle_identifiers"]).long()].to(bf)
        e = torch.cat([F.pad(prow, (0, Lp * D - Dp)).view(B, Lp, D), e], dim=1)
    if cfg["pos_encodings"] == "learned":
        e = smul(0.707106781, e + W["embed_pos.embedding_weight"])
    x = smul(math.sqrt(D), e)
    zH = torch.tensor(init["H_init"]).to(bf).view(1, 1, D).expand(B, S, D)
    zL = torch.tensor(init["L_init"]).to(bf).view(1, 1, D).expand(B, S, D)
    cycles = []
    with torch.no_grad():
        for t in range(cfg["H_cycles"]):
            for _ in range(cfg["L_cycles"]):
                zL = netb(zL, zH + x, "L_level")
            zH = netb(zH, zL, "H_level" if is_hrm(cfg) else "L_level")
            cycles.append((zH.float(), zL.float()))
        logits = zH[:, Lp:] @ W["lm_head.weight"].t()
        q = F.linear(zH[:, 0], W["q_head.weight"], W["q_head.bias"])
    return cycles, logits.float(), q.float()


def crosscheck_bf16(names):
    """--crosscheck-bf16: for each named bf16 fixture, its step-1 forward by the Round twin and by
    true_bf16_forward (as torch's CPU kernels do it, and with their quirks avoided), compared in
    bf16 ulps of the twin's values (|value| floored at 1/64)."""
    ok = True
    for fname in names:
        cfg = FIXTURES[fname]
        if forward_dtype(cfg) != "bfloat16":
            continue
        fi = list(FIXTURES).index(fname)
        rng = np.random.default_rng(1 + 100000 * fi)
        init, batch = gen_weights(cfg, rng), gen_batches(cfg, rng)[0]
        W = {n: torch.tensor(init[n]) for n, _ in dense_param_shapes(cfg)}
        B, S, D = cfg["batch_size"], seq_total(cfg), cfg["hidden_size"]
        R = rounder(cfg)
        rope = rope_tables(cfg, torch.float32) if cfg["pos_encodings"] == "rope" else None
        with torch.no_grad():
            prow = torch.tensor(init["puzzle_emb.weights"])[torch.from_numpy(
                batch["puzzle_identifiers"]).long()]
            x = embed(cfg, W, prow, torch.from_numpy(batch["inputs"]))
            zH = R(torch.tensor(init["H_init"])).view(1, 1, D).expand(B, S, D)
            zL = R(torch.tensor(init["L_init"])).view(1, 1, D).expand(B, S, D)
            zH, _, cycles, _, _ = inner_forward(cfg, W, zH, zL, x, rope)
            logits, qh, qc = heads(cfg, W, zH)
        print("== %s: step-1 forward (seed %d data), Round twin against a true bf16 forward: "
              "max bf16 ulps, share of values that differ" % (fname, 1 + 100000 * fi))
        print("    %-12s  %-24s  %-24s" % ("", "CPU bf16 kernels", "CPU quirks avoided"))
        res = [true_bf16_forward(cfg, init, batch, v) for v in (False, True)]
        rows = [("cycle%d.z_H" % (t + 1), cycles[t][0], [r[0][t][0] for r in res])
                for t in range(len(cycles))]
        rows += [("cycle%d.z_L" % (t + 1), cycles[t][1], [r[0][t][1] for r in res])
                 for t in range(len(cycles))]
        rows += [("logits", logits, [r[1] for r in res]),
                 ("q", torch.stack([qh, qc], -1), [r[2] for r in res])]
        for nm, a, bs in rows:
            ulp = torch.exp2(torch.floor(torch.log2(a.abs().clamp_min(1.0 / 64))) - 7)
            cols = []
            for b in bs:
                du = float(((a - b).abs() / ulp).max())
                cols.append("%8.1f ulp  %5.1f%%" % (du, 100.0 * float((a != b).double().mean())))
            print("    %-12s  %-24s  %-24s" % (nm, cols[0], cols[1]))
            ok &= du <= 4  # the variant without the CPU quirks: a few ulps at most
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
    ap.add_argument("--crosscheck-bf16", action="store_true",
                    help="compare the Round twin's step-1 forward of the bf16 fixtures' first "
                         "seed with a true bf16 forward (weights .to(bfloat16)); not in the "
                         "fixture path")
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
    if args.crosscheck_bf16:
        ok = crosscheck_bf16([n for n in FIXTURES if not args.only or n in args.only])
        print("cross-check: %s" % ("PASS" if ok else "FAIL"))
        sys.exit(0 if ok else 1)
    if args.check:
        ok = all([check_file(os.path.join(outdir, n + ".trfx"), args.omit) for n in FIXTURES
                  if not args.only or n in args.only])
        print("self-check: %s" % ("PASS" if ok else "FAIL"))
        sys.exit(0 if ok else 1)
    os.makedirs(outdir, exist_ok=True)
    generate(outdir, args.seed, args.max_tries, args.omit, args.only)


if __name__ == "__main__":
    main()
