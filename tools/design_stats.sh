#!/bin/sh
# Issue 39's "Done when" figures: header lines, lines naming fdt / x16 / 16-bit things, function definitions
# with 10+ and 15+ parameters, OpenCL branches inside the op layer, and `duplicates`' pair count. What each
# figure counts, and how, is in tools/design_stats.py.
# Usage: sh tools/design_stats.sh [REV] [--params N]
#   REV: the figures of that commit (its tree unpacked into a temporary folder); default: the working tree.
#   --params N: also list the definitions with N or more parameters.
# `duplicates` (a tool on PATH, optional: left out where absent) reads the whole tree; it takes a minute.
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
rev=
extra=
while [ $# -gt 0 ]; do
    case $1 in
    --params) extra="--params $2"; shift 2 ;;
    *) rev=$1; shift ;;
    esac
done
tree=$here
tmp=
if [ -n "$rev" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$here" && git archive "$rev") | tar -x -C "$tmp"
    tree=$tmp
    echo "at $(cd "$here" && git rev-parse --short "$rev")"
fi
# shellcheck disable=SC2086
python3 "$here/tools/design_stats.py" "$tree/tinyrec.h" $extra
if command -v duplicates >/dev/null 2>&1; then
    pairs=$(duplicates --repo "$tree" --seconds 300 | awk 'NR == 1 { print ($1 == "no" ? 0 : $1) }')
    printf 'duplicates pairs (whole tree)        %6s\n' "$pairs"
fi
