#!/usr/bin/env bash
# Egress benchmark, guest side (issue 28): the same download made on the
# host with curl directly, and inside a real kosa8 sandbox with curl through
# kosa8's egress path (the guest's netfilter redirect, the agent's relay,
# virtio-vsock, the VMM's vsock device, the supervisor's proxy, upstream),
# in one run, rounds interleaved; plain HTTP and TLS; and beside them the
# same bytes pushed from the host into a guest process over vsock alone (no
# agent, no proxy), so that the device's share shows apart.  For each
# download: MiB/s, and where the CPU time went (see guest.py).
#
#   bench/egress/guest.sh [ROUNDS [MIB]]     (default 3 rounds, 128 MiB)
#
# Where the host has no KVM (these build machines) it runs in the helper VM
# of testbed/run, which emulates the CPU (QEMU TCG): absolute numbers are
# then QEMU's, and only the ratios within one run mean anything.  The
# helper gets one vCPU (TESTBED_SMP, default 1 here): testbed/README.md
# ("Emulator faults") has two-vCPU helpers failing under heavy vsock I/O,
# and with one CPU the CPU times of the parts add up to the wall time.
# Prints Markdown (bench/results/egress.md holds a run).  Needs build/kosa8
# (make), the guest kernel and default image (make kernel image).
# KOSA8_BENCH_BINS: the kosa8 binaries to compare, "PATH=LABEL ..." (each
# with its kosa8-vmm beside it; default build/kosa8): a sandbox of each,
# all in the same rounds.  KOSA8_BENCH_IMAGE: an image file instead of the
# newest default build.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
mib=${2:-128}
[ -n "${KOSA8_BENCH_BINS:-}" ] || make -s build/kosa8 build/kosa8-vmm >/dev/null
args=()
for spec in ${KOSA8_BENCH_BINS:-build/kosa8}; do
	args+=(--kosa8 "$(realpath "${spec%%=*}")${spec#"${spec%%=*}"}")
done
bin=${args[1]%%=*}
KOSA8_KERNEL=${KOSA8_KERNEL:-$(guest/kernel/build.sh --path)}
export KOSA8_KERNEL
image=${KOSA8_BENCH_IMAGE:-$("$bin" image path default 2>/dev/null)} ||
	{ echo "bench/egress/guest.sh: no default image (make image)" >&2; exit 1; }
echo "## Guest-side run of $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo
echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; kernel $(uname -r)"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- guest: kernel $(basename "$(dirname "$KOSA8_KERNEL")"), image $image"
echo "- $(qemu-system-x86_64 --version 2>/dev/null | head -1)"
echo "- kosa8 ${KOSA8_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")}; where: $(testbed/run --where)"
TESTBED_SMP=${TESTBED_SMP:-1} TESTBED_QUIET=1 testbed/run python3 bench/egress/guest.py \
	"${args[@]}" --rounds "$rounds" --mib "$mib" --image "$image"
echo
echo "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
