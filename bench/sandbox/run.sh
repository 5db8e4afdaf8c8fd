#!/usr/bin/env bash
# Sandbox benchmarks (issue 3): `kosa8 run -- true` end to end, virtio-blk
# with fio in the guest, vsock streams, idle memory; kosa8 beside QEMU
# microvm booting the same kernel and Debian image, in one run.
#   bench/sandbox/run.sh [ROUNDS]     (default 3)
# Writes bench/results/sandbox.md.  Needs make, make kernel image and
# qemu-system-x86 (make deps).  Without /dev/kvm everything runs in the
# nested-KVM helper VM (testbed/run): absolute numbers are then those of
# emulation; compare the rows of one run.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
bin=${KOSA8_BENCH_BIN:-build/kosa8}
[ -n "${KOSA8_BENCH_BIN:-}" ] || make -s build/kosa8
kernel=${KOSA8_BENCH_KERNEL:-$(guest/kernel/build.sh --path)}
image=$(guest/image/build.sh --path default)
out=$(mktemp)
TESTBED_MEM=${TESTBED_MEM:-6144} testbed/run python3 bench/sandbox/bench.py --kosa8 "$bin" \
	--kernel "$kernel" --image "$image" --rounds "$rounds" ${BENCH_ARGS:-} | tee "$out"
where="directly on /dev/kvm"
[ "$(testbed/run --where)" = host ] ||
	where="nested KVM inside the QEMU TCG helper VM (testbed/run): no /dev/kvm with hardware virtualization on this host"
{
	echo "# Sandbox benchmarks"
	echo
	echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $where."
	echo "Guest: kosa8's kernel ($(basename "$(dirname "$kernel")")), the default Debian image"
	echo "($(basename "$(dirname "$image")")), 1 vCPU, 1 GiB.  QEMU: $(qemu-system-x86_64 --version | head -1),"
	echo "microvm, the image raw with snapshot=on (a qcow2 overlay of its own)."
	grep -v '^#' "$out"
	echo
	echo "Raw lines:"
	echo
	grep '^#' "$out" | sed 's/^# /    /'
	echo
	echo "Reproduce: \`make deps && make && make kernel image && bench/sandbox/run.sh $rounds\`."
} >bench/results/sandbox.md
rm -f "$out"
echo "wrote bench/results/sandbox.md"
