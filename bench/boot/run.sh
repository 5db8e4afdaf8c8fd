#!/usr/bin/env bash
# Boot benchmark: kosa8 vs QEMU microvm, same kernel and initramfs, one run.
#   bench/boot/run.sh [RUNS]    (default 7)
# Writes bench/results/boot.md.  Needs: make, make kernel initramfs, and
# qemu-system-x86 (make deps).  Where /dev/kvm is missing, everything runs in
# the nested-KVM helper VM (testbed/run): absolute times are then those of
# emulation; the ratio between the two VMMs is what to read.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-7}
make -s build/kosa8
kernel=${KOSA8_BENCH_KERNEL:-$(guest/kernel/build.sh | tail -1)}
initrd=$(guest/initramfs/build.sh | tail -1)
out=$(mktemp)
testbed/run python3 bench/boot/bench.py --kosa8 build/kosa8 --kernel "$kernel" \
	--initrd "$initrd" --runs "$runs" | tee "$out"
where="directly on /dev/kvm"
[ "$(testbed/run --where)" = host ] ||
	where="nested KVM inside the QEMU TCG helper VM (testbed/run): no /dev/kvm with hardware virtualization on this host"
{
	echo "# Boot benchmark"
	echo
	echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $where."
	echo "Guest: kosa8's kernel ($(basename "$(dirname "$kernel")")) and test initramfs,"
	echo "1 vCPU, 128 MiB, serial console; $runs runs each, interleaved."
	echo
	cat "$out"
	echo
	echo "Reproduce: \`make deps && make && bench/boot/run.sh $runs\`."
} >bench/results/boot.md
rm -f "$out"
echo "wrote bench/results/boot.md"
