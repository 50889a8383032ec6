#!/usr/bin/env python3
"""docs/performance.md's tables, from the records in docs/perf/*.json.

  python3 tools/perf_docs.py --write   rewrites each table between its markers from its record
  python3 tools/perf_docs.py --check   fails (exit 1, naming the table and the row) when a table no longer
                                       matches its record, or a record has no table (make test runs it)
  python3 tools/perf_docs.py --self-test   the check on a copy with one figure changed must fail

A record: {"title", "command", "columns", "notes", "rows": [{"cells", "machine", "date", "commit"
[, "command"]}]}, or a bench/torch_compare.py --json-out summary with "date", "commit" and "machine" added
(its "meta" gives the command); each row is rendered with its machine, date and commit.
"""
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "performance.md")


def short(machine):
    """The machine's name without its details ("NVIDIA H200 (OpenCL ...); ..." -> "NVIDIA H200")."""
    return machine.split(" (")[0].split(";")[0]


def from_compare(rec):
    """A torch_compare.py summary as a record: a row per case, PyTorch's time beside ours."""
    meta = rec.get("meta", {})
    cmd = "python3 bench/torch_compare.py --device %s --preset %s --batch %s --dtype %s --json-out FILE" % (
        meta.get("device", "?"), meta.get("preset", "?"), meta.get("batch", "?"), meta.get("dtype", "?"))
    rows = []
    for case, t in rec["torch"].items():
        ours = rec["tinyrec"].get(case)
        if not ours:
            continue
        rows.append({"cells": [case, "%.2f ms" % t["ms"], "%.2f ms" % ours["ms"], "%.2fx" % (t["ms"] / ours["ms"])],
                     "machine": rec["machine"], "date": rec["date"], "commit": rec["commit"]})
    return {"title": meta.get("title", "PyTorch and tinyrec"), "command": cmd, "columns": ["case", "PyTorch", "tinyrec", "ratio"],
            "notes": "ratio = PyTorch time / tinyrec time.", "rows": rows}


def render(name, rec):
    if "torch" in rec:
        rec = from_compare(rec)
    machines = []
    out = ["<!-- perf:%s (generated from docs/perf/%s.json by tools/perf_docs.py; edit the record, then --write) -->" % (name, name),
           "### %s" % rec["title"], "", "Command: `%s`" % rec["command"], ""]
    out.append("| " + " | ".join(rec["columns"] + ["machine", "date", "commit"]) + " |")
    out.append("|" + "---|" * (len(rec["columns"]) + 3))
    for r in rec["rows"]:
        if r["machine"] not in machines:
            machines.append(r["machine"])
        out.append("| " + " | ".join(r["cells"] + [short(r["machine"]), r["date"], "`%s`" % r["commit"]]) + " |")
    out.append("")
    for m in machines:
        out.append("- %s: %s" % (short(m), m))
    if rec.get("notes"):
        out += ["", rec["notes"]]
    out.append("<!-- /perf -->")
    return "\n".join(out)


def records():
    recs = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "perf", "*.json"))):
        with open(path) as f:
            recs[os.path.basename(path)[:-5]] = json.load(f)
    return recs


def blocks(text):
    """name -> (start, end) of each marked block in the document."""
    out, pos = {}, 0
    while True:
        s = text.find("<!-- perf:", pos)
        if s < 0:
            return out
        name = text[s + 10:].split(" ", 1)[0].split("-->", 1)[0].strip()
        e = text.find("<!-- /perf -->", s)
        if e < 0:
            raise SystemExit("perf_docs: %s: the block of %s has no end marker" % (DOC, name))
        e += len("<!-- /perf -->")
        out[name] = (s, e)
        pos = e


def problems(text, recs, mode):
    """What does not match (check), or the rewritten text (write)."""
    have = blocks(text)
    bad = []
    for name in recs:
        if name not in have:
            bad.append("docs/perf/%s.json has no table in docs/performance.md (add a line <!-- perf:%s --> <!-- /perf --> and run --write)" % (name, name))
    for name in have:
        if name not in recs:
            bad.append("docs/performance.md has a table %s without docs/perf/%s.json" % (name, name))
    if mode == "--write":
        for name, (s, e) in sorted(have.items(), key=lambda kv: -kv[1][0]):
            if name in recs:
                text = text[:s] + render(name, recs[name]) + text[e:]
        return bad, text
    else:
        for name, (s, e) in have.items():
            if name not in recs:
                continue
            want, got = render(name, recs[name]).split("\n"), text[s:e].split("\n")
            for i in range(max(len(want), len(got))):
                w, g = want[i] if i < len(want) else "", got[i] if i < len(got) else ""
                if w != g:
                    bad.append("docs/performance.md, table %s, line %d: %r, but its record gives %r" % (name, i + 1, g, w))
                    break
    return bad, text


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    if mode not in ("--check", "--write", "--self-test"):
        raise SystemExit(__doc__)
    with open(DOC) as f:
        text = f.read()
    recs = records()
    if mode == "--self-test":  # a figure changed in the document: the check names it
        row = text.index("\n| ", text.index("|---"))
        digit = next(i for i in range(row, len(text)) if text[i].isdigit())
        changed = text[:digit] + ("1" if text[digit] != "1" else "2") + text[digit + 1:]
        bad, _ = problems(changed, recs, "--check")
        if not bad or "line" not in bad[0]:
            raise SystemExit("perf_docs: --self-test: a changed figure was not found")
        print("perf_docs: a changed figure is found: " + bad[0][:100])
        return
    bad, text = problems(text, recs, mode)
    if mode == "--write" and not bad:
        with open(DOC, "w") as f:
            f.write(text)
    for b in bad:
        print("perf_docs: " + b, file=sys.stderr)
    if bad:
        sys.exit(1)
    print("perf_docs: %d tables match their records" % len(recs))


if __name__ == "__main__":
    main()
