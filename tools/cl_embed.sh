#!/bin/sh
# Writes the OpenCL C of tools/opencl/*.cl into tinyrec.h as C string literals, so that users still
# get one header while developers edit real .cl files. `make` runs it when a .cl file is newer
# than the header; the generated header is committed.
#
#   tools/cl_embed.sh [--check] [HEADER]      (HEADER: tinyrec.h by default)
#
# Every block of HEADER between
#   /* >>cl-embed tools/opencl/NAME.cl <any words> */
#   /* >>cl-embed-end */
# is replaced by the file's text as fragments tr__cl_src_NAME_1, _2, ... of at most 4000 characters
# (ISO C99 compilers need accept no longer string literal than 4095; clCreateProgramWithSource
# joins the fragments again) and `#define TR__CL_SRC_NAME_LIST` naming them in order. The first
# fragment starts with `#line 1 "tools/opencl/NAME.cl"`, so the OpenCL compiler's log names the
# .cl file and line (the numbering runs on across fragments, which are one text). Paths are
# relative to HEADER's directory. The output depends only on the inputs (deterministic).
#
# --check writes nothing and exits 1, naming each stale block, when HEADER differs from what would
# be written. Exit status 2: a usage error, a missing .cl file or a malformed block.
set -eu
LC_ALL=C # lengths in bytes
export LC_ALL
check=0
if [ "${1:-}" = --check ]; then
    check=1
    shift
fi
case "${1:-}" in -*) echo "usage: $0 [--check] [HEADER]" >&2; exit 2 ;; esac
hdr=${1:-tinyrec.h}
if [ ! -f "$hdr" ]; then
    echo "$0: no such header: $hdr" >&2
    exit 2
fi
root=$(dirname "$hdr")
tmp="$hdr.cl_embed.tmp"
out=$tmp
[ $check = 1 ] && out=/dev/null

set +e
awk -v root="$root" -v hdr="$hdr" -v out="$out" -v check=$check '
function fail(msg) { print hdr ":" NR ": " msg | "cat 1>&2"; err = 1; exit 2 }
# One line of the .cl file as the body of a C string literal.
function esc(s,    r, i, c, p) {
    r = ""; p = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\") r = r "\\\\"
        else if (c == "\"") r = r "\\\""
        else if (c == "\t") r = r "\\t"
        else if (c == "\r") r = r "\\r"
        else if (c == "?" && p == "?") r = r "\\?" # no trigraphs
        else r = r c
        p = c
    }
    return r
}
# g[1..ng]: the generated lines of the block for path.
function gen(path,    name, f, r, n, size, k, list, w, i, body, len) {
    name = path
    sub(/.*\//, "", name)
    if (name !~ /^[a-z][a-z0-9_]*\.cl$/) fail("cl-embed: " path ": the file name must be [a-z][a-z0-9_]*.cl")
    sub(/\.cl$/, "", name)
    f = (path ~ /^\// ? path : root "/" path)
    ng = 0; k = 0; n = 0; size = MAX + 1
    body = "#line 1 \"" path "\""
    while (1) {
        len = length(body) + 1
        if (len > MAX) fail("cl-embed: " path ":" n ": line longer than " MAX " characters")
        if (size + len > MAX) { # a new fragment
            if (k) g[ng] = g[ng] ";"
            k++
            g[++ng] = "static const char tr__cl_src_" name "_" k "[] ="
            size = 0
        }
        g[++ng] = "\"" esc(body) "\\n\""
        size += len
        r = (getline body < f)
        if (r < 0) fail("cl-embed: cannot read " f)
        if (r == 0) break
        n++
    }
    close(f)
    if (n == 0) fail("cl-embed: " f " is empty")
    g[ng] = g[ng] ";"
    list = "#define TR__CL_SRC_" toupper(name) "_LIST"
    if (k > 4) { g[++ng] = list " \\"; list = "   " }
    for (i = 1; i <= k; i++) {
        w = " tr__cl_src_" name "_" i (i < k ? "," : "")
        if (length(list w) > 110) { g[++ng] = list " \\"; list = "   " }
        list = list w
    }
    g[++ng] = list
}
BEGIN { MAX = 4000; blocks = 0; stale = "" }
inblk == 0 && /^\/\* >>cl-embed [^ ]/ {
    path = $3
    sub(/\*\/$/, "", path)
    if (check == 0) print > out
    gen(path)
    inblk = 1; no = 0; start = NR; blocks++
    next
}
inblk && /^\/\* >>cl-embed/ {
    if ($0 != "/* >>cl-embed-end */") fail("cl-embed: expected /* >>cl-embed-end */ to close the block of line " start)
    same = (no == ng)
    for (i = 1; same && i <= ng; i++) same = (o[i] == g[i])
    if (!same) stale = stale " " path
    if (check == 0) { for (i = 1; i <= ng; i++) print g[i] > out; print > out }
    inblk = 0
    next
}
inblk { o[++no] = $0; next }
check == 0 { print > out }
END {
    if (err) exit 2
    if (inblk) fail("cl-embed: the block of line " start " has no /* >>cl-embed-end */")
    if (blocks == 0) fail("cl-embed: no /* >>cl-embed PATH */ blocks")
    if (check && stale != "") {
        print hdr " is out of date with" stale ": run make (or tools/cl_embed.sh " hdr ")" | "cat 1>&2"
        exit 1
    }
}' "$hdr"
rc=$?
set -e
if [ $check = 1 ] || [ $rc != 0 ]; then
    rm -f "$tmp"
    exit $rc
fi
if cmp -s "$tmp" "$hdr"; then
    rm -f "$tmp"
    touch "$hdr" # make: up to date now
else
    mv "$tmp" "$hdr"
fi
