#!/usr/bin/env bash
# Checkpoint, restore, fork, incremental checkpoint and memory of many forks:
# kosa8 vs QEMU (migrate to a file, -incoming), same kernel, initramfs and
# guest sizes, one run.
#   bench/checkpoint/run.sh [SIZES_MIB [FORKS]]   (default 256,1024 and 10)
# Writes bench/results/checkpoint.md.  Needs make, make kernel initramfs and
# qemu-system-x86 (make deps).  Without /dev/kvm everything runs in the
# nested-KVM helper VM (testbed/run): absolute times are then those of
# emulation; compare the two VMMs within one run.
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes=${1:-256,1024}
forks=${2:-10}
bin=${KOSA8_BENCH_BIN:-build/kosa8}
[ -n "${KOSA8_BENCH_BIN:-}" ] || make -s build/kosa8
kernel=${KOSA8_BENCH_KERNEL:-$(guest/kernel/build.sh | tail -1)}
initrd=$(guest/initramfs/build.sh | tail -1)
out=$(mktemp)
TESTBED_MEM=${TESTBED_MEM:-6144} testbed/run python3 bench/checkpoint/bench.py --kosa8 "$bin" \
	--kernel "$kernel" --initrd "$initrd" --sizes "$sizes" --forks "$forks" | tee "$out"
where="directly on /dev/kvm"
[ "$(testbed/run --where)" = host ] ||
	where="nested KVM inside the QEMU TCG helper VM (testbed/run): no /dev/kvm with hardware virtualization on this host"
{
	echo "# Checkpoint and restore benchmark"
	echo
	echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $where."
	echo "Guest: kosa8's kernel ($(basename "$(dirname "$kernel")")) and test initramfs (k8.test=counter),"
	echo "1 vCPU, no disk; a quarter of guest RAM filled from /dev/urandom before the checkpoint."
	echo "kosa8: \`vmctl checkpoint\` (guest paused throughout) then \`vm --restore\`; QEMU 7.2"
	echo "microvm: QMP \`migrate\` to \`exec:cat > FILE\` (live; stopped only for its downtime)"
	echo "then \`-incoming 'exec:cat FILE'\`.  Restore is timed from starting the VMM to the"
	echo "guest's next line on the console.  A fork is kosa8's checkpoint plus a restore"
	echo "started while the parent runs on, timed by the VMMs themselves; a live fork"
	echo "(\`checkpoint-live\`, what \`kosa8 fork\` of a running sandbox does) freezes the"
	echo "parent's memory and hands it to the child by fd instead of writing it first."
	echo
	grep -v '^# ' "$out"
	echo
	echo "Raw lines:"
	echo
	grep '^# ' "$out" | sed 's/^# /    /'
	echo
	echo "Reproduce: \`make deps && make && make kernel initramfs && bench/checkpoint/run.sh $sizes $forks\`."
} >bench/results/checkpoint.md
rm -f "$out"
echo "wrote bench/results/checkpoint.md"
