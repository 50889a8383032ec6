#!/usr/bin/python3
"""Writes (or --check's) the converted-checkpoint fixtures of tests/test_checkpoint.c.

For each of two tiny TRM configs (attention + RoPE stored as F32; mlp_t stored as BF16):
  1. tools/torch_reference.py's initialiser makes the weights (random puzzle table, q head and
     H_init/L_init so that every tensor matters);
  2. they are saved as the reference saves them: torch.save(state_dict) with
     "_orig_mod.model.inner." keys, plus the reference-style arch yaml (and a dataset.json);
  3. tools/convert_checkpoint.py converts that to tests/data/ckpt_tiny_<name>.safetensors;
  4. the twin's forward (torch_reference.py's math, fp32) computes the logits and q values of one
     ACT step from the initial carry for a fixed batch -> tests/data/ckpt_tiny_<name>.expected.safetensors
     (inputs, puzzle_identifiers, logits, q_halt, q_continue);
  5. the converted file goes back through --to-torch and must load in PyTorch with tensors
     identical (torch.equal, same dtype) to the state_dict of step 2.
The twin's fp32 vs float64 deviation of the logits is printed: it sizes the C test's tolerance.

    /usr/bin/python3 tools/checkpoint_fixture.py           # write the fixtures
    /usr/bin/python3 tools/checkpoint_fixture.py --check   # rebuild in a temp dir, compare bytes, round trip
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_reference as tref  # noqa: E402
import convert_checkpoint as conv  # noqa: E402

BASE = dict(vocab_size=6, seq_len=16, hidden_size=16, num_heads=2, expansion=4.0, L_layers=2,
            H_cycles=2, L_cycles=2, puzzle_emb_len=2, num_puzzle_identifiers=3, rope_theta=10000.0,
            rms_norm_eps=1e-5, halt_max_steps=4, halt_exploration_prob=0.1,
            loss_type="stablemax_cross_entropy")
FIXTURES = collections.OrderedDict([
    ("ckpt_tiny_att", dict(BASE, mlp_t=False, pos_encodings="rope", puzzle_emb_ndim=24, dtype="f32", seed=7)),
    ("ckpt_tiny_mlp", dict(BASE, mlp_t=True, pos_encodings="none", puzzle_emb_ndim=16, dtype="bf16", seed=8)),
])
BATCH = 4

ARCH_YAML = """# config/arch/trm.yaml style (the reference's file), for the fixture
name: recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1
loss:
  name: losses@ACTLossHead
  loss_type: {loss_type}

halt_exploration_prob: {halt_exploration_prob}
halt_max_steps: {halt_max_steps}

H_cycles: {H_cycles}
L_cycles: {L_cycles}

H_layers: 0
L_layers: {L_layers}

hidden_size: {hidden_size}
num_heads: {num_heads}  # min(2, hidden_size // 64)
expansion: {expansion}

puzzle_emb_ndim: {puzzle_emb_ndim_yaml}

pos_encodings: {pos_encodings}
forward_dtype: bfloat16

mlp_t: {mlp_t_yaml} # use mlp on L instead of transformer
puzzle_emb_len: {puzzle_emb_len} # if non-zero, its specified to this value
no_ACT_continue: True
"""


def forward(cfg, W, inputs, pids, dtype):
    """One ACT step from the initial carry (every row freshly loaded), like tr_model_eval_step."""
    B, S, D = inputs.shape[0], tref.seq_total(cfg), cfg["hidden_size"]
    Wt = {k: torch.tensor(v, dtype=dtype) for k, v in W.items()}
    rope = tref.rope_tables(cfg, dtype) if cfg["pos_encodings"] == "rope" else None
    inp = torch.from_numpy(inputs)
    prow = Wt["puzzle_emb.weights"][torch.from_numpy(pids).long()]
    x = tref.embed(cfg, Wt, prow, inp)
    zH = Wt["H_init"].view(1, 1, D).expand(B, S, D).clone()
    zL = Wt["L_init"].view(1, 1, D).expand(B, S, D).clone()
    with torch.no_grad():
        for _ in range(cfg["H_cycles"]):
            zH, zL = tref.last_cycle(cfg, Wt, zH, zL, x, rope)
        logits, qh, qc = tref.heads(cfg, Wt, zH)
    return logits.numpy(), qh.numpy(), qc.numpy()


def build(name, fx, outdir, workdir, verbose=True):
    cfg = {k: v for k, v in fx.items() if k not in ("dtype", "seed")}
    rng = np.random.default_rng(fx["seed"])
    W = tref.gen_weights(cfg, rng)
    W["q_head.bias"] = rng.normal(0.0, 0.5, size=(2,)).astype(np.float32)
    if fx["dtype"] == "bf16":  # the checkpoint holds bf16 tensors; the math uses their exact values
        W = collections.OrderedDict((k, conv.f32_from_bf16_bits(conv.bf16_bits_from_f32(v)).reshape(v.shape))
                                    for k, v in W.items())
    # 2. the reference's way of saving: a torch.compile'd module's state_dict
    sd = collections.OrderedDict()
    for k, v in W.items():
        t = torch.from_numpy(np.ascontiguousarray(v))
        sd[conv.ORIG_MOD + conv.INNER + k] = t.to(torch.bfloat16) if fx["dtype"] == "bf16" else t.clone()
    pt = os.path.join(workdir, name + ".pt")
    torch.save(sd, pt)
    yml = os.path.join(workdir, name + ".yaml")
    with open(yml, "w") as f:
        f.write(ARCH_YAML.format(
            puzzle_emb_ndim_yaml="${.hidden_size}" if cfg["puzzle_emb_ndim"] == cfg["hidden_size"] else cfg["puzzle_emb_ndim"],
            mlp_t_yaml="True" if cfg["mlp_t"] else "False", **cfg))
    # 3. convert (dataset sizes from a dataset.json for one fixture, from the shapes for the other)
    out = os.path.join(outdir, name + ".safetensors")
    argv = [sys.executable, os.path.join(HERE, "convert_checkpoint.py"), pt, out, "--config", yml]
    if not cfg["mlp_t"]:
        dsj = os.path.join(workdir, name + ".dataset.json")
        with open(dsj, "w") as f:
            json.dump(dict(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=cfg["vocab_size"],
                           seq_len=cfg["seq_len"], num_puzzle_identifiers=cfg["num_puzzle_identifiers"],
                           total_groups=3, mean_puzzle_examples=1.0, sets=["all"]), f)
        argv += ["--dataset-json", dsj]
    subprocess.run(argv, check=True, stdout=subprocess.PIPE if not verbose else None)
    meta, _ = conv.read_safetensors(out)
    got = json.loads(meta["config"])
    for k, v in cfg.items():
        assert got[k] == v, (name, k, got[k], v)
    # 4. expected outputs for a fixed batch
    brng = np.random.default_rng(1000 + fx["seed"])
    inputs = brng.integers(0, cfg["vocab_size"], size=(BATCH, cfg["seq_len"])).astype(np.int32)
    pids = np.array([0, 1, 2, 1], dtype=np.int32)
    lg, qh, qc = forward(cfg, W, inputs, pids, torch.float32)
    lg64, qh64, _ = forward(cfg, W, inputs, pids, torch.float64)
    mx = float(np.abs(lg).max())
    drift = float(np.abs(lg.astype(np.float64) - lg64).max())
    if verbose:
        print("%s: max|logit| %.4f, twin fp32 vs float64: max|diff| %.2e = %.2e of max|logit|; q %.2e" % (
            name, mx, drift, drift / mx, float(np.abs(qh.astype(np.float64) - qh64).max())))
    recs = [("inputs", "I32", inputs.shape, inputs.astype("<i4").tobytes()),
            ("puzzle_identifiers", "I32", pids.shape, pids.astype("<i4").tobytes()),
            ("logits", "F32", lg.shape, lg.astype("<f4").tobytes()),
            ("q_halt", "F32", qh.shape, qh.astype("<f4").tobytes()),
            ("q_continue", "F32", qc.shape, qc.astype("<f4").tobytes())]
    conv.write_safetensors(os.path.join(outdir, name + ".expected.safetensors"), recs,
                           {"about": "tools/checkpoint_fixture.py: one ACT step of %s.safetensors in the fp32 twin" % name})
    # 5. back to PyTorch: identical tensors
    back = os.path.join(workdir, name + ".back.pt")
    subprocess.run([sys.executable, os.path.join(HERE, "convert_checkpoint.py"), "--to-torch", out, back,
                    "--config-out", os.path.join(workdir, name + ".back.yaml")],
                   check=True, stdout=subprocess.PIPE if not verbose else None)
    sd2 = torch.load(back)
    assert list(sd2.keys()) == list(sd.keys()), (name, "keys differ")
    for k in sd:
        a, b = sd[k], sd2[k]
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            raise SystemExit("%s: %s differs after the round trip" % (name, k))
    if verbose:
        print("%s: round trip .pt -> safetensors -> .pt: %d tensors identical (%s)" % (
            name, len(sd), ", ".join(sorted({str(v.dtype) for v in sd.values()}))))
        with open(os.path.join(workdir, name + ".back.yaml")) as f:
            back_cfg = conv.load_yaml(f.name)
        print("%s: arch yaml written back: %s" % (name, json.dumps(back_cfg, sort_keys=True)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outdir", default=os.path.normpath(os.path.join(HERE, "..", "tests", "data")))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as work:
        if not args.check:
            total = 0
            for name, fx in FIXTURES.items():
                build(name, fx, args.outdir, work)
                for suffix in (".safetensors", ".expected.safetensors"):
                    total += os.path.getsize(os.path.join(args.outdir, name + suffix))
            print("fixtures: %d bytes" % total)
            return
        out2 = os.path.join(work, "out")
        os.makedirs(out2)
        ok = True
        for name, fx in FIXTURES.items():
            build(name, fx, out2, work)
            for suffix in (".safetensors", ".expected.safetensors"):
                a = open(os.path.join(args.outdir, name + suffix), "rb").read()
                b = open(os.path.join(out2, name + suffix), "rb").read()
                same = a == b
                ok &= same
                print("%s%s: %s" % (name, suffix, "identical to the committed file" if same else "DIFFERS"))
        print("check: %s" % ("PASS" if ok else "FAIL"))
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
