#!/usr/bin/env bash
# VMM memory benchmark (issue 25): RSS and PSS beyond guest RAM of kosa8's
# VMM, mapping by mapping, beside QEMU microvm on the same kernel, 1 vCPU
# and 128 MiB, in one run (bench/memory/bench.py says what is measured).
#   bench/memory/run.sh [ROUNDS]     (default 3)
# KOSA8_BENCH_BEFORE=PATH: a kosa8 binary from before kosa8-vmm (its VMM is
# `kosa8 vm`, the whole binary), measured in the same run.
# Writes bench/results/memory.md; the smaps of every run stay in
# build/bench-memory/ on a host with its own /dev/kvm (in the helper VM
# they vanish with it: the tables carry what they say).  Needs make, make kernel initramfs image and
# qemu-system-x86 (make deps).  Without /dev/kvm it runs in the helper VM
# (TESTBED_RUN: what runs it there, default testbed/run).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
make -s build/kosa8 build/kosa8-vmm
kernel=${KOSA8_BENCH_KERNEL:-$(guest/kernel/build.sh --path)}
initrd=$(guest/initramfs/build.sh | tail -1)
logs=$PWD/build/bench-memory
rm -rf "$logs"
args=(--vmm "kosa8-vmm=$PWD/build/kosa8-vmm"
	--sandbox "kosa8-vmm|$PWD/build/kosa8|kosa8-vmm --no-emulate")
if [ -n "${KOSA8_BENCH_BEFORE:-}" ]; then
	before=$(realpath "$KOSA8_BENCH_BEFORE")
	args=(--vmm "before: kosa8 vm=$before vm" "${args[@]}"
		--sandbox "before: kosa8 vm|$before|kosa8 vm --no-emulate")
fi
out=$(mktemp)
${TESTBED_RUN:-testbed/run} python3 bench/memory/bench.py --kernel "$kernel" --initrd "$initrd" \
	--rounds "$rounds" --log-dir "$logs" "${args[@]}" ${BENCH_ARGS:-} | tee "$out"
where="directly on /dev/kvm"
[ "$(testbed/run --where)" = host ] ||
	where="nested KVM inside the QEMU TCG helper VM (testbed/run): no /dev/kvm with hardware virtualization on this host"
{
	echo "# VMM memory benchmark"
	echo
	echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $where."
	echo "Kernel: kosa8's ($(basename "$(dirname "$kernel")")); QEMU: $(qemu-system-x86_64 --version | head -1)."
	cat "$out"
	echo
	echo "Reproduce: \`make deps && make && make kernel initramfs image && bench/memory/run.sh $rounds\`"
	echo "(KOSA8_BENCH_BEFORE=path/to/older/kosa8 adds a binary from before the change)."
} >bench/results/memory.md
rm -f "$out"
echo "wrote bench/results/memory.md"
