#!/usr/bin/env bash
# verify beside openssl, round after round on one log: each line is one
# round of `openssl speed -evp sha256` (per CPU-second, then by the wall
# clock) followed at once by verify with one thread and with two (best of 3
# each), and the ratios of that round.  On a shared machine the ratio of
# figures taken seconds apart is the one that means something.
#
#   bench/audit/verify-pairs.sh [ROUNDS] [MEGABYTES]
#
# BENCH_DIR (default /var/tmp) holds the log; REL_DIR the build folder;
# HEAD_EVERY, if set, a signed head every that many records instead of the
# library's default (4096; it was 1000 before 2026-12-05).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-4}
MB=${2:-256}
REL_DIR=${REL_DIR:-build}

make -s REL_DIR="$REL_DIR" "$REL_DIR/libkosa8.a" >/dev/null
work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kosa8-verify-pairs.XXXXXX")
trap 'rm -rf "$work"' EXIT
export KOSA8_CONFIG_DIR=$work/config
bin=$work/bench_audit
cc -O2 -std=gnu11 -Isrc -D_GNU_SOURCE -pthread bench/audit/bench_audit.c "$REL_DIR/libkosa8.a" \
	-lcjson -lssl -lcrypto -lpthread -o "$bin"
"$bin" gen "$work/v.log" "$MB" ${HEAD_EVERY:+"$HEAD_EVERY"}
# Flushed before timing, as in run.sh (which says why).
sync "$work/v.log"

sha() {
	openssl speed -seconds 2 "$@" -evp sha256 2>/dev/null |
		awk '$1 == "sha256" {v = $NF; sub("k", "", v); printf "%.0f", v * 1000 / 1e6}'
}
echo "| round | load (1 min) | raw SHA-256 MB/CPU-s, MB/s | verify 1 thread MB/s, MB/CPU-s | verify 2 threads MB/s, MB/CPU-s | ratio 1 thread (CPU / wall) | ratio 2 threads (wall) |"
echo "|---:|---:|---|---|---|---|---:|"
for i in $(seq "$ROUNDS"); do
	load=$(cut -d' ' -f1 /proc/loadavg)
	sc=$(sha)
	sw=$(sha -elapsed)
	read -r w1 c1 < <(KOSA8_VERIFY_THREADS=1 "$bin" verify "$work/v.log" 3 2>/dev/null)
	read -r w2 c2 < <(KOSA8_VERIFY_THREADS=2 "$bin" verify "$work/v.log" 3 2>/dev/null)
	awk -v i="$i" -v l="$load" -v sc="$sc" -v sw="$sw" -v w1="$w1" -v c1="$c1" -v w2="$w2" -v c2="$c2" \
		'BEGIN {printf "| %s | %s | %s, %s | %s, %s | %s, %s | %.2f / %.2f | %.2f |\n",
			i, l, sc, sw, w1, c1, w2, c2, c1 / sc, w1 / sw, w2 / sw}'
done
