#!/usr/bin/env bash
# A/B of `audit verify`: the audit library of git revision REV against the
# working tree, on the same log, in the same run, beside `openssl speed`.
# On a shared machine only such side-by-side figures mean anything.
#
#   bench/audit/verify-ab.sh [REV] [MEGABYTES] [ROUNDS]
#
# REV defaults to 467cd41 (the verifier before the two-message SHA rounds,
# the windowed tree and the streamed reads); MEGABYTES to 256; ROUNDS to 3
# (each round runs A and B alternately, best of each is kept).  The log
# format is the same on both sides.  BENCH_DIR (default /var/tmp) holds the
# log; REL_DIR the build folder (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
REV=${1:-467cd41}
MB=${2:-256}
ROUNDS=${3:-3}
REL_DIR=${REL_DIR:-build}

make -s REL_DIR="$REL_DIR" "$REL_DIR/libkosa8.a" >/dev/null
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kosa8-verify-ab.XXXXXX")
trap 'rm -rf "$work"' EXIT
export KOSA8_CONFIG_DIR=$work/config

# B: this tree.  A: src/audit and the bench driver as of REV, with today's
# src/common.
cc -O2 -std=gnu11 -Isrc -D_GNU_SOURCE -pthread bench/audit/bench_audit.c "$REL_DIR/libkosa8.a" \
	-lcjson -lssl -lcrypto -lpthread -o "$work/b"
mkdir -p "$work/a/src/audit"
for f in $(git ls-tree --name-only "$REV" src/audit/); do git show "$REV:$f" >"$work/a/$f"; done
git show "$REV:bench/audit/bench_audit.c" >"$work/a/bench_audit.c"
cc -O2 -std=gnu11 -I"$work/a/src" -Isrc -D_GNU_SOURCE -pthread "$work/a/bench_audit.c" \
	"$work/a/src/audit/"*.c src/common/*.c -lcjson -lssl -lcrypto -lpthread -o "$work/a/a"

"$work/b" gen "$work/v.log" "$MB"
# Flushed before timing, as in run.sh (which says why).
sync "$work/v.log"
sha() {
	openssl speed -seconds 2 "$@" -evp sha256 2>/dev/null |
		awk '$1 == "sha256" {v = $NF; sub("k", "", v); printf "%.0f", v * 1000 / 1e6}'
}
best() { sort -n | tail -1; }
load0=$(cut -d' ' -f1 /proc/loadavg)
sha_cpu=$(sha)
sha_wall=$(sha -elapsed)
: >"$work/r"
for i in $(seq "$ROUNDS"); do
	for side in a1 b1 b2; do
		bin=$work/b
		[ "${side:0:1}" = a ] && bin=$work/a/a
		echo "$side $(KOSA8_VERIFY_THREADS=${side:1} "$bin" verify "$work/v.log" 1 2>/dev/null)" >>"$work/r"
	done
done
sha_cpu2=$(sha)
load1=$(cut -d' ' -f1 /proc/loadavg)
col() { awk -v s="$1" -v c="$2" '$1 == s {print $c}' "$work/r" | best; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

echo "## verify A/B, $(date -u +%Y-%m-%dT%H:%M:%SZ), load average $load0 -> $load1"
echo
echo "log: $(stat -c %s "$work/v.log") bytes, $MB MB asked; best of $ROUNDS rounds each; A = $REV, B = working tree"
echo
echo "| | MB/s by the wall clock | MB per CPU-second | ratio to raw SHA-256 (wall / CPU) |"
echo "|---|---:|---:|---:|"
echo "| raw SHA-256, \`openssl speed -evp sha256\`, 16 KiB blocks (CPU: before / after) | $sha_wall | $sha_cpu / $sha_cpu2 | |"
for s in "a1 A, one thread" "b1 B, one thread" "b2 B, two threads"; do
	set -- $s
	w=$(col "$1" 2)
	c=$(col "$1" 3)
	echo "| verify, ${s#* } | $w | $c | $(ratio "$w" "$sha_wall") / $(ratio "$c" "$sha_cpu") |"
done
