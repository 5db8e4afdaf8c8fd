#!/usr/bin/env bash
# Template start benchmark: `kosa8 run --rm -- true` from a template vs
# --cold vs QEMU microvm on the same kernel, one run side by side.
#   bench/templates/run.sh [ROUNDS]     (default 3)
# Writes bench/results/templates.md.  Needs make, make kernel initramfs
# image, qemu-system-x86.  Where /dev/kvm is missing it runs in the helper
# VM (testbed/run; on this machine through /work/notes/vmrun).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
make -s build/kosa8
out=$(mktemp)
${VMRUN:-testbed/run} bench/templates/bench.sh "$rounds" | tee "$out"
where="directly on /dev/kvm"
[ "$(testbed/run --where)" = host ] ||
	where="nested KVM inside the QEMU TCG helper VM (testbed/run, one vCPU): no hardware virtualization on this host"
{
	echo "# Template start benchmark"
	echo
	echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $where."
	echo "Default image, kosa8's kernel, 1 vCPU, 1 GiB; $rounds rounds, interleaved."
	echo
	grep '^[|A-Z-]\|^$\|^One' "$out" || true
	echo
	echo "Reproduce: \`make && make kernel initramfs image && bench/templates/run.sh $rounds\`."
} >bench/results/templates.md
rm -f "$out"
echo "wrote bench/results/templates.md"
