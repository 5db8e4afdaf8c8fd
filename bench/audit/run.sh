#!/usr/bin/env bash
# Audit log benchmarks: appends/s with durable acknowledgement (group commit)
# and without, and verify speed beside this machine's raw SHA-256 speed,
# measured in the same run.  Prints a Markdown report (bench/results/audit.md
# holds one).
#
#   bench/audit/run.sh            full run (a few minutes)
#   bench/audit/run.sh --quick    smaller counts, for a smoke test
#
# The work folder must be on a real disk (fdatasync is what is measured):
# BENCH_DIR (default /var/tmp).  REL_DIR picks the build folder (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
REL_DIR=${REL_DIR:-build}
quick=${1:-}

make -s REL_DIR="$REL_DIR" "$REL_DIR/libkosa8.a" "$REL_DIR/kosa8" >/dev/null
mkdir -p "$REL_DIR/bench"
bin=$REL_DIR/bench/bench_audit
cc -O2 -std=gnu11 -Isrc -D_GNU_SOURCE -pthread bench/audit/bench_audit.c \
	"$REL_DIR/libkosa8.a" -lcjson -lssl -lcrypto -lpthread -o "$bin"

work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/kosa8-audit-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export KOSA8_CONFIG_DIR=$work/config

if [ "$quick" = --quick ]; then
	durable_n=20000; nosync_n=100000; verify_mb=32; sha_secs=1
else
	durable_n=200000; nosync_n=1000000; verify_mb=256; sha_secs=3
fi

echo "## Run of $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo
echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores" \
	"($(grep -qw sha_ni /proc/cpuinfo && echo SHA-NI || echo no SHA-NI))"
echo "- work folder: $(df -T "$work" | awk 'NR==2 {print $2 " on " $1}')"
echo "- records: ~215 bytes each (an exec event), a signed head every 4096 records (the default)"
echo
echo "- the disk's own latency, write + fdatasync of 256 bytes: $("$bin" fsync "$work") µs (before), see also after"
echo
echo "| appends | threads | events per call | records | records/s |"
echo "|---|---:|---:|---:|---:|"
# One thread alone cannot batch: every append waits for its own fdatasync.
"$bin" append "$work" 1 1000 sync >"$work/r" && echo "| durable (fdatasync before ack) | 1 | 1 | 1000 | $(cat "$work/r") |"
for t in 16 64 256; do
	"$bin" append "$work" "$t" "$durable_n" sync >"$work/r"
	echo "| durable, group commit across threads | $t | 1 | $durable_n | $(cat "$work/r") |"
done
for tg in "1 64" "1 256" "4 256"; do
	set -- $tg
	"$bin" append "$work" "$1" "$durable_n" sync "$2" >"$work/r"
	echo "| durable, group commit, audit_log_append_many | $1 | $2 | $durable_n | $(cat "$work/r") |"
done
for t in 1 8; do
	"$bin" append "$work" "$t" "$nosync_n" nosync >"$work/r"
	echo "| not durable (no fdatasync) | $t | 1 | $nosync_n | $(cat "$work/r") |"
done
echo
echo "- write + fdatasync of 256 bytes, after: $("$bin" fsync "$work") µs"
echo

"$bin" gen "$work/v.log" "$verify_mb"
# The log was written without fdatasync: flush it now, or the kernel writes
# it back during the first rounds and slows them (a round 1 of 0.45 where
# the next three gave 0.58-0.59, on 2026-12-05).
sync "$work/v.log"
size=$(stat -c %s "$work/v.log")
read -r verify_wall verify_cpu < <("$bin" verify "$work/v.log" 3 2>"$work/vinfo")
read -r verify1_wall verify1_cpu < <(KOSA8_VERIFY_THREADS=1 "$bin" verify "$work/v.log" 3 2>/dev/null)
read -r verify2_wall verify2_cpu < <(KOSA8_VERIFY_THREADS=2 "$bin" verify "$work/v.log" 3 2>/dev/null)
read -r sig_us sha_impl < <("$bin" parts "$work/v.log")
start=$(date +%s.%N)
"$REL_DIR/kosa8" audit verify --log "$work/v.log" >/dev/null
end=$(date +%s.%N)
cli_mbs=$(echo "$size $start $end" | awk '{printf "%.0f", $1 / ($3 - $2) / 1e6}')
# openssl reports 1000s of bytes per second; the 16384-byte column is the
# raw, per-call-overhead-free speed.  By default it divides by the CPU time
# it got, with -elapsed by the wall clock: both are shown, as verify's are.
sha() {
	openssl speed -seconds "$sha_secs" "$@" -evp sha256 2>/dev/null |
		awk '$1 == "sha256" {v = $NF; sub("k", "", v); printf "%.0f", v * 1000 / 1e6}'
}
sha_cpu=$(sha)
sha_wall=$(sha -elapsed)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo "| verify | MB/s by the wall clock | MB per CPU-second |"
echo "|---|---:|---:|"
echo "| raw SHA-256, \`openssl speed -evp sha256\`, 16 KiB blocks | $sha_wall | $sha_cpu |"
echo "| verify, library (\`audit_log_verify\`: size and heads under the lock, then one pass: chain, tree, signatures), helper threads as chosen, best of 3 | $verify_wall | $verify_cpu |"
echo "| verify, library, one thread, best of 3 | $verify1_wall | $verify1_cpu |"
echo "| verify, library, two threads (forced), best of 3 | $verify2_wall | $verify2_cpu |"
echo "| \`kosa8 audit verify\` end to end, once (process start, key, snapshot, verify) | $cli_mbs | |"
echo "| ratio verify / raw SHA-256 (helpers as chosen) | $(ratio "$verify_wall" "$sha_wall") | $(ratio "$verify_cpu" "$sha_cpu") |"
echo "| ratio verify / raw SHA-256 (one thread) | $(ratio "$verify1_wall" "$sha_wall") | $(ratio "$verify1_cpu" "$sha_cpu") |"
echo "| ratio verify / raw SHA-256 (two threads) | $(ratio "$verify2_wall" "$sha_wall") | $(ratio "$verify2_cpu" "$sha_cpu") |"
echo
echo "SHA-256 rounds: $sha_impl; one Ed25519 head check: $sig_us µs (CPU)"
echo
echo "verify input: $(cat "$work/vinfo"); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
