#!/usr/bin/python3
"""Convert reference TRM and HRM checkpoints (torch.save state_dicts) to tinyrec safetensors, and back.

PyTorch -> tinyrec:
    /usr/bin/python3 tools/convert_checkpoint.py CKPT OUT.safetensors [--config config/arch/trm.yaml] \
        [--dataset-json data/sudoku/train/dataset.json] [--seq-len N] [--vocab-size N] \
        [--num-puzzle-identifiers N] [--arch trm|hrm] [--set key=value ...] [--dtype keep|f32|bf16|f16]

    CKPT is what the reference's pretrain.py writes (torch.save(model.state_dict())): keys
    "_orig_mod.model.inner.<name>" (the prefix comes from torch.compile and is stripped) or
    "model.inner.<name>". It may be a run directory, as the released HRM checkpoints are laid out
    (DIR/checkpoint, or the newest DIR/step_N, beside DIR/all_config.yaml). The architecture comes
    from the reference's yaml: --config (an arch file such as config/arch/trm.yaml or
    config/arch/hrm_v1.yaml, or a run's all_config.yaml), else the all_config.yaml next to CKPT;
    `${.hidden_size}` style references are resolved. The model kind comes from the arch name
    (hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1, hrm_v1, ...@TinyRecursiveReasoningModel_ACTV1),
    else from the tensor names (H_level.* is HRM), or --arch. vocab_size, seq_len and
    num_puzzle_identifiers come from the dataset (--dataset-json: the reference's dataset.json; by
    default the all_config.yaml's data_path/{train,test}/dataset.json when that exists, relative to
    the current folder), from flags, or from the tensor shapes (the embedding and puzzle tables, the
    mlp_t or learned-position weights). --set overrides any field. Every tensor is checked against
    the shapes the config implies before anything is written. BF16/F16 tensors stay as they are
    unless --dtype says otherwise (HRM's H_init/L_init are bfloat16); tinyrec loads F32, BF16 and
    F16 (converting to fp32).

tinyrec -> PyTorch:
    /usr/bin/python3 tools/convert_checkpoint.py --to-torch IN.safetensors OUT.pt [--no-prefix] \
        [--config-out arch.yaml] [--dtype keep|f32|bf16|f16]

    Writes a state_dict with "_orig_mod.model.inner." keys (what the reference's load_checkpoint
    expects; --no-prefix for plain "model.inner." keys), and optionally the arch config as the
    reference's yaml.

The safetensors files are read and written here directly (numpy + struct), with the layout and
__metadata__ (format=tinyrec, format_version, model=trm or hrm, config=<JSON>; for HRM the JSON
also has "arch":"hrm") that tinyrec.h expects.
Needs torch only for the .pt side (Debian's /usr/bin/python3 has it) and PyYAML for --config.
"""
import argparse
import collections
import json
import math
import os
import re
import struct
import sys

import numpy as np

FORMAT_VERSION = 1
ORIG_MOD = "_orig_mod."
INNER = "model.inner."

# The metadata config: the reference's arch field names (in this order) plus the dataset sizes.
CONFIG_FIELDS = [
    "hidden_size", "num_heads", "expansion", "L_layers", "H_layers", "H_cycles", "L_cycles",
    "puzzle_emb_ndim", "puzzle_emb_len", "pos_encodings", "mlp_t", "rope_theta", "rms_norm_eps",
    "halt_max_steps", "halt_exploration_prob", "forward_dtype", "no_ACT_continue", "loss_type",
    "vocab_size", "seq_len", "num_puzzle_identifiers",
]
INT_FIELDS = {"hidden_size", "num_heads", "L_layers", "H_layers", "H_cycles", "L_cycles",
              "puzzle_emb_ndim", "puzzle_emb_len", "halt_max_steps", "vocab_size", "seq_len",
              "num_puzzle_identifiers"}
FLOAT_FIELDS = {"expansion", "rope_theta", "rms_norm_eps", "halt_exploration_prob"}
BOOL_FIELDS = {"mlp_t", "no_ACT_continue"}
# config/arch/trm.yaml and the model class's defaults
DEFAULTS = dict(hidden_size=512, num_heads=8, expansion=4.0, L_layers=2, H_layers=0, H_cycles=3,
                L_cycles=6, puzzle_emb_ndim=512, puzzle_emb_len=16, pos_encodings="rope",
                mlp_t=False, rope_theta=10000.0, rms_norm_eps=1e-5, halt_max_steps=16,
                halt_exploration_prob=0.1, forward_dtype="bfloat16", no_ACT_continue=True,
                loss_type="stablemax_cross_entropy")
# config/arch/hrm_v1.yaml and HierarchicalReasoningModel_ACTV1Config's defaults. HRM has no
# puzzle_emb_len (0: ceil(puzzle_emb_ndim / hidden_size) slots), no mlp_t, and halts on
# q_halt > q_continue (no_ACT_continue false).
HRM_DEFAULTS = dict(hidden_size=512, num_heads=8, expansion=4.0, L_layers=4, H_layers=4, H_cycles=2,
                    L_cycles=2, puzzle_emb_ndim=512, puzzle_emb_len=0, pos_encodings="rope",
                    mlp_t=False, rope_theta=10000.0, rms_norm_eps=1e-5, halt_max_steps=16,
                    halt_exploration_prob=0.1, forward_dtype="bfloat16", no_ACT_continue=False,
                    loss_type="stablemax_cross_entropy")
ARCH_NAMES = {"trm": "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1",
              "hrm": "hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1"}

ST_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "I32": ("<i4", 4),
             "I64": ("<i8", 8), "U8": ("u1", 1), "BOOL": ("u1", 1)}


def die(msg):
    sys.exit("convert_checkpoint: " + msg)


# ----------------------------------------------------------------------------------------------
# safetensors, by hand
# ----------------------------------------------------------------------------------------------
def bf16_bits_from_f32(a):
    """Round-to-nearest-even f32 -> bf16 bit patterns (uint16), NaN kept quiet."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def f32_from_bf16_bits(b):
    return (np.asarray(b, dtype=np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, metadata):
    """tensors: ordered list of (name, dtype string, shape tuple, bytes)."""
    header = collections.OrderedDict()
    if metadata:
        header["__metadata__"] = metadata
    off = 0
    for name, dt, shape, data in tensors:
        n = int(np.prod(shape)) if len(shape) else 1
        assert len(data) == n * ST_DTYPES[dt][1], name
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_safetensors(path):
    """Returns (metadata dict, OrderedDict name -> (dtype string, shape, numpy array of raw
    values: uint16 bit patterns for BF16))."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        die("%s: too short" % path)
    (hl,) = struct.unpack_from("<Q", data, 0)
    if hl > 100000000 or 8 + hl > len(data):
        die("%s: bad header length %d" % (path, hl))
    header = json.loads(data[8:8 + hl].decode("utf-8"), object_pairs_hook=collections.OrderedDict)
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + hl
    out = collections.OrderedDict()
    spans = []
    for name, e in header.items():
        dt, shape, (b, en) = e["dtype"], tuple(e["shape"]), e["data_offsets"]
        if dt not in ST_DTYPES:
            die("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        npdt, size = ST_DTYPES[dt]
        n = int(np.prod(shape)) if len(shape) else 1
        if en - b != n * size or base + en > len(data):
            die("%s: tensor %s: bad data_offsets" % (path, name))
        arr = np.frombuffer(data, dtype=npdt, count=n, offset=base + b).reshape(shape).copy()
        out[name] = (dt, shape, arr)
        spans.append((b, en))
    spans.sort()
    pos = 0
    for b, en in spans:
        if b != pos:
            die("%s: data section has a gap or overlap at byte %d" % (path, b))
        pos = en
    if base + pos != len(data):
        die("%s: %d trailing bytes" % (path, len(data) - base - pos))
    return meta, out


# ----------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------
def load_yaml(path):
    """The arch fields of a reference yaml."""
    return load_yaml_info(path)[0]


def load_yaml_info(path):
    """(arch fields, {"name": the arch name, "data_path": the run's data_path} where present)."""
    try:
        import yaml
    except ImportError:
        die("--config needs PyYAML (apt install python3-yaml)")
    with open(path) as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict):
        die("%s: not a yaml mapping" % path)
    root = doc
    if isinstance(doc.get("arch"), dict):  # a run's all_config.yaml
        doc = doc["arch"]

    ref = re.compile(r"^\$\{\s*(\.?)([A-Za-z0-9_.]+)\s*\}$")

    def resolve(v, depth=0):
        if isinstance(v, str):
            m = ref.match(v.strip())
            if m:
                if depth > 10:
                    die("%s: interpolation loop at %s" % (path, v))
                scope = doc if m.group(1) else root
                cur = scope
                for part in m.group(2).split("."):
                    if not isinstance(cur, dict) or part not in cur:
                        # ${arch.x} from the root, or ${.x} within the section
                        cur = None
                        break
                    cur = cur[part]
                if cur is None and not m.group(1):
                    cur = doc.get(m.group(2))
                if cur is None:
                    die("%s: cannot resolve %s" % (path, v))
                return resolve(cur, depth + 1)
        return v

    cfg, info = {}, {}
    if isinstance(doc.get("name"), str):
        info["name"] = doc["name"]
    if root is not doc and isinstance(root.get("data_path"), str):
        info["data_path"] = root["data_path"]
    for k, v in doc.items():
        if k == "loss" and isinstance(v, dict):
            if "loss_type" in v:
                cfg["loss_type"] = resolve(v["loss_type"])
            continue
        if k in CONFIG_FIELDS:
            cfg[k] = resolve(v)
    return cfg, info


def normalise(cfg):
    out = collections.OrderedDict()
    for k in CONFIG_FIELDS:
        if k not in cfg or cfg[k] is None:
            if k in ("vocab_size", "seq_len", "num_puzzle_identifiers"):
                die("config field %s is unknown: it is the dataset's; give --dataset-json "
                    "DATA/train/dataset.json or --%s N" % (k, k.replace("_", "-")))
            die("config field %s is unknown: give it with --set %s=... (or a flag)" % (k, k))
        v = cfg[k]
        if k in INT_FIELDS:
            if isinstance(v, bool) or float(v) != int(float(v)):
                die("config field %s = %r is not an integer" % (k, v))
            v = int(float(v))
        elif k in FLOAT_FIELDS:
            v = float(v)
        elif k in BOOL_FIELDS:
            if isinstance(v, str):
                if v.lower() not in ("true", "false", "1", "0"):
                    die("config field %s = %r is not a boolean" % (k, v))
                v = v.lower() in ("true", "1")
            v = bool(v)
        elif k == "pos_encodings":
            if v not in ("rope", "none", "learned"):
                die("pos_encodings %r: expected rope, none or learned" % (v,))
        elif k == "loss_type":
            v = {"stablemax": "stablemax_cross_entropy", "softmax": "softmax_cross_entropy"}.get(v, v)
            if v not in ("stablemax_cross_entropy", "softmax_cross_entropy"):
                die("loss_type %r: expected stablemax_cross_entropy or softmax_cross_entropy" % (v,))
        elif k == "forward_dtype":
            if v not in ("float32", "bfloat16", "float16"):
                die("forward_dtype %r: expected float32, bfloat16 or float16" % (v,))
        out[k] = v
    return out


def arch_of_name(name):
    """The model kind an arch name means, or None: hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1,
    hrm_v1, recursive_reasoning.hrm@... are HRM; ...trm@TinyRecursiveReasoningModel_ACTV1 is TRM."""
    n = name.lower()
    if "hierarchicalreasoning" in n or re.search(r"(^|[._/@])hrm", n):
        return "hrm"
    if "tinyrecursive" in n or re.search(r"(^|[._/@])trm", n):
        return "trm"
    return None


def config_json(cfg, arch="trm"):
    parts = ['"arch":"hrm"'] if arch == "hrm" else []
    for k in CONFIG_FIELDS:
        v = cfg[k]
        if isinstance(v, bool):
            s = "true" if v else "false"
        elif isinstance(v, int):
            s = str(v)
        elif isinstance(v, float):
            s = repr(v)
            if s.endswith(".0"):
                s = s[:-2]
        else:
            s = json.dumps(v)
        parts.append('"%s":%s' % (k, s))
    return "{" + ",".join(parts) + "}"


def swiglu_width(expansion, d):
    return 256 * (-(round(expansion * d * 2 / 3) // -256))


def prefix_len(cfg):
    if cfg["puzzle_emb_ndim"] <= 0:
        return 0
    if cfg["puzzle_emb_len"] > 0:
        return cfg["puzzle_emb_len"]
    return -(-cfg["puzzle_emb_ndim"] // cfg["hidden_size"])


def expected_shapes(cfg, arch="trm"):
    """name (without prefix) -> shape, as tinyrec's model has them."""
    V, D, L = cfg["vocab_size"], cfg["hidden_size"], cfg["seq_len"]
    S = L + prefix_len(cfg)
    I = swiglu_width(cfg["expansion"], D)
    sh = collections.OrderedDict()
    sh[INNER + "embed_tokens.embedding_weight"] = (V, D)
    if cfg["pos_encodings"] == "learned":
        sh[INNER + "embed_pos.embedding_weight"] = (S, D)
    levels = [("H_level", cfg["H_layers"]), ("L_level", cfg["L_layers"])] if arch == "hrm" else \
        [("L_level", cfg["L_layers"])]
    for level, n_layers in levels:
        for i in range(n_layers):
            p = INNER + "%s.layers.%d." % (level, i)
            if cfg["mlp_t"]:
                It = swiglu_width(cfg["expansion"], S)
                sh[p + "mlp_t.gate_up_proj.weight"] = (2 * It, S)
                sh[p + "mlp_t.down_proj.weight"] = (S, It)
            else:
                sh[p + "self_attn.qkv_proj.weight"] = (3 * D, D)
                sh[p + "self_attn.o_proj.weight"] = (D, D)
            sh[p + "mlp.gate_up_proj.weight"] = (2 * I, D)
            sh[p + "mlp.down_proj.weight"] = (D, I)
    sh[INNER + "lm_head.weight"] = (V, D)
    sh[INNER + "q_head.weight"] = (2, D)
    sh[INNER + "q_head.bias"] = (2,)
    sh[INNER + "H_init"] = (D,)
    sh[INNER + "L_init"] = (D,)
    if cfg["puzzle_emb_ndim"] > 0:
        sh[INNER + "puzzle_emb.weights"] = (cfg["num_puzzle_identifiers"], cfg["puzzle_emb_ndim"])
    return sh


def infer_sizes(cfg, shapes):
    """Fills vocab_size, num_puzzle_identifiers and seq_len from tensor shapes where missing."""
    emb = shapes.get(INNER + "embed_tokens.embedding_weight")
    if cfg.get("vocab_size") is None and emb is not None:
        cfg["vocab_size"] = emb[0]
    pz = shapes.get(INNER + "puzzle_emb.weights")
    if cfg.get("num_puzzle_identifiers") is None:
        cfg["num_puzzle_identifiers"] = pz[0] if pz is not None else 1
    if cfg.get("seq_len") is None:
        lp = None
        try:
            lp = prefix_len(normalise_partial(cfg))
        except (KeyError, TypeError, ValueError):
            pass
        pos = shapes.get(INNER + "embed_pos.embedding_weight")
        mt = shapes.get(INNER + "L_level.layers.0.mlp_t.gate_up_proj.weight",
                        shapes.get(INNER + "H_level.layers.0.mlp_t.gate_up_proj.weight"))
        if lp is not None and pos is not None:
            cfg["seq_len"] = pos[0] - lp
        elif lp is not None and mt is not None:
            cfg["seq_len"] = mt[1] - lp
    return cfg


def normalise_partial(cfg):
    return dict(puzzle_emb_ndim=int(cfg["puzzle_emb_ndim"]), puzzle_emb_len=int(cfg["puzzle_emb_len"]),
                hidden_size=int(cfg["hidden_size"]))


def parse_set(items):
    out = {}
    for it in items:
        if "=" not in it:
            die("--set %r: expected key=value" % it)
        k, v = it.split("=", 1)
        if k not in CONFIG_FIELDS:
            die("--set %s: unknown field (known: %s)" % (k, ", ".join(CONFIG_FIELDS)))
        out[k] = v
    return out


# ----------------------------------------------------------------------------------------------
# torch side
# ----------------------------------------------------------------------------------------------
def torch_to_record(name, t, want):
    """A torch tensor -> (name, dtype string, shape, bytes), in the wanted dtype."""
    import torch
    t = t.detach().cpu().contiguous()
    src = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}.get(t.dtype)
    if src is None:
        die("tensor %s has dtype %s; a model tensor must be float32, bfloat16 or float16" % (name, t.dtype))
    dst = src if want == "keep" else want
    shape = tuple(t.shape)
    if dst == src == "bf16":
        data = t.view(torch.int16).numpy().astype("<i2").tobytes()
    elif dst == "bf16":
        data = bf16_bits_from_f32(t.float().numpy()).astype("<u2").tobytes()
    elif dst == "f16":
        data = t.to(torch.float16).numpy().astype("<f2").tobytes()
    else:
        data = t.float().numpy().astype("<f4").tobytes()
    return name, {"f32": "F32", "bf16": "BF16", "f16": "F16"}[dst], shape, data


def record_to_torch(name, dt, arr, want):
    import torch
    if dt == "BF16":
        t = torch.from_numpy(arr.astype(np.int16)).view(torch.bfloat16)
    elif dt == "F16":
        t = torch.from_numpy(arr.astype(np.float16))
    elif dt == "F32":
        t = torch.from_numpy(arr.astype(np.float32))
    else:
        die("tensor %s has dtype %s, not a model tensor" % (name, dt))
    if want != "keep":
        t = t.to({"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[want])
    return t.contiguous()


def load_state_dict(path):
    import torch
    sd = torch.load(path, map_location="cpu")
    if not all(isinstance(v, torch.Tensor) for v in sd.values()):
        for key in ("state_dict", "model", "model_state_dict"):
            if isinstance(sd.get(key), dict):
                sd = sd[key]
                break
        else:
            die("%s: not a state_dict (values are not all tensors)" % path)
    return sd


def locate(path, config):
    """(checkpoint file, config yaml or None). A directory is a reference run directory: its
    `checkpoint` (the released checkpoints' name) or newest `step_N`, and its all_config.yaml."""
    if os.path.isdir(path):
        ck = os.path.join(path, "checkpoint")
        if not os.path.isfile(ck):
            steps = sorted((int(m.group(1)), f) for f in os.listdir(path)
                           for m in [re.match(r"^step_(\d+)$", f)] if m)
            if not steps:
                die("%s: a directory without a 'checkpoint' or 'step_N' file" % path)
            ck = os.path.join(path, steps[-1][1])
        if config is None:
            config = os.path.join(path, "all_config.yaml")
            if not os.path.isfile(config):
                die("%s: no all_config.yaml in the run directory (the reference writes it beside "
                    "the weights; give the arch yaml with --config)" % config)
        return ck, config
    if not os.path.isfile(path):
        die("%s: no such file or directory" % path)
    if config is None:
        beside = os.path.join(os.path.dirname(os.path.abspath(path)), "all_config.yaml")
        if os.path.isfile(beside):
            config = beside
    return path, config


def dataset_json_of(data_path):
    """The reference's dataset.json under a run's data_path, when it is there."""
    for split in ("train", "test"):
        p = os.path.join(data_path, split, "dataset.json")
        if os.path.isfile(p):
            return p
    return None


def to_tinyrec(args):
    ckpt, config = locate(args.input, args.config)
    sd = load_state_dict(ckpt)
    bare = collections.OrderedDict()
    for k, v in sd.items():
        name = k[len(ORIG_MOD):] if k.startswith(ORIG_MOD) else k
        if name in bare:
            die("%s: tensor %s is there twice (with and without %s)" % (ckpt, name, ORIG_MOD))
        bare[name] = v
    shapes = {k: tuple(v.shape) for k, v in bare.items()}
    yml, info = load_yaml_info(config) if config else ({}, {})
    keys_hrm = any(n.startswith(INNER + "H_level.") for n in bare)
    arch = args.arch or (arch_of_name(info["name"]) if "name" in info else None) or \
        ("hrm" if keys_hrm else "trm")
    if arch == "hrm" and not config:
        die("%s: no all_config.yaml next to this HRM checkpoint (the reference writes it beside the "
            "weights; give the arch yaml with --config)" %
            os.path.join(os.path.dirname(os.path.abspath(ckpt)), "all_config.yaml"))
    cfg = dict(HRM_DEFAULTS if arch == "hrm" else DEFAULTS)
    cfg.update(yml)
    dataset_json = args.dataset_json
    if not dataset_json and "data_path" in info:
        dataset_json = dataset_json_of(info["data_path"])
    if dataset_json:
        with open(dataset_json) as f:
            ds = json.load(f)
        for k in ("vocab_size", "seq_len", "num_puzzle_identifiers"):
            if k in ds:
                cfg[k] = ds[k]
    for k, flag in (("vocab_size", args.vocab_size), ("seq_len", args.seq_len),
                    ("num_puzzle_identifiers", args.num_puzzle_identifiers)):
        if flag is not None:
            cfg[k] = flag
    cfg.update(parse_set(args.set))
    cfg = normalise(infer_sizes(cfg, shapes))
    want = expected_shapes(cfg, arch)
    missing = [n for n in want if n not in bare]
    unexpected = [n for n in bare if n not in want]
    bad = ["%s %s (expected %s)" % (n, list(shapes[n]), list(want[n])) for n in want
           if n in bare and shapes[n] != want[n]]
    problems = []
    if missing:
        problems.append("missing: " + ", ".join(missing))
    if unexpected:
        problems.append("unexpected: " + ", ".join(unexpected))
    if bad:
        problems.append("mis-shaped: " + "; ".join(bad))
    if problems and not args.no_check:
        die("%s does not match the %s config%s %s:\n  %s" % (
            ckpt, arch.upper(), " of " + config if config else "", config_json(cfg, arch),
            "\n  ".join(problems)))
    records = [torch_to_record(n, bare[n], args.dtype) for n in bare]
    meta = collections.OrderedDict([
        ("format", "tinyrec"), ("format_version", str(FORMAT_VERSION)), ("model", arch),
        ("config", config_json(cfg, arch)), ("converted_from", os.path.basename(ckpt))])
    write_safetensors(args.output, records, meta)
    print("%s: %d tensors (%s), model %s, config %s" % (
        args.output, len(records), ", ".join(sorted({r[1] for r in records})), arch,
        config_json(cfg, arch)))


def to_torch(args):
    import torch
    meta, tensors = read_safetensors(args.input)
    if meta.get("format") not in (None, "tinyrec"):
        print("warning: %s: format is %r, not tinyrec" % (args.input, meta.get("format")), file=sys.stderr)
    sd = collections.OrderedDict()
    for name, (dt, shape, arr) in tensors.items():
        bare = name[len(ORIG_MOD):] if name.startswith(ORIG_MOD) else name
        sd[("" if args.no_prefix else ORIG_MOD) + bare] = record_to_torch(name, dt, arr, args.dtype)
    torch.save(sd, args.output)
    print("%s: %d tensors" % (args.output, len(sd)))
    if args.config_out:
        if "config" not in meta:
            die("%s has no config in its metadata" % args.input)
        cfg = json.loads(meta["config"])
        import yaml
        arch = collections.OrderedDict()
        arch["name"] = ARCH_NAMES["hrm" if meta.get("model") == "hrm" else "trm"]
        arch["loss"] = {"name": "losses@ACTLossHead", "loss_type": cfg.get("loss_type", "stablemax_cross_entropy")}
        for k in CONFIG_FIELDS:
            if k in ("loss_type", "vocab_size", "seq_len", "num_puzzle_identifiers", "arch"):
                continue
            if k in cfg:
                arch[k] = cfg[k]
        with open(args.config_out, "w") as f:
            yaml.safe_dump(dict(arch), f, sort_keys=False)
            f.write("# from the dataset: vocab_size %s, seq_len %s, num_puzzle_identifiers %s\n" % (
                cfg.get("vocab_size"), cfg.get("seq_len"), cfg.get("num_puzzle_identifiers")))
        print("%s: arch config" % args.config_out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("input", help="a state_dict file or a run directory (checkpoint + all_config.yaml)")
    ap.add_argument("output")
    ap.add_argument("--to-torch", action="store_true", help="tinyrec safetensors -> torch state_dict")
    ap.add_argument("--config", help="reference yaml: config/arch/{trm,hrm_v1}.yaml or a run's "
                                     "all_config.yaml (default: the all_config.yaml beside the input)")
    ap.add_argument("--arch", choices=("trm", "hrm"), help="model kind (default: from the arch name, "
                                                           "else from the tensor names)")
    ap.add_argument("--dataset-json", help="the reference's dataset.json (vocab_size, seq_len, num_puzzle_identifiers)")
    ap.add_argument("--vocab-size", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--num-puzzle-identifiers", type=int)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    ap.add_argument("--dtype", choices=("keep", "f32", "bf16", "f16"), default="keep")
    ap.add_argument("--no-check", action="store_true", help="write even if the tensors do not match the config")
    ap.add_argument("--no-prefix", action="store_true", help="--to-torch: keys without _orig_mod.")
    ap.add_argument("--config-out", help="--to-torch: also write the arch config as yaml")
    args = ap.parse_args(argv)
    if args.to_torch:
        to_torch(args)
    else:
        to_tinyrec(args)


if __name__ == "__main__":
    main()
