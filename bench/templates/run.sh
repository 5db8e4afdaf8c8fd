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
# Replaces what is between the markers in bench/results/templates.md:
# the rest of the page (notes, the concurrent benchmark) stays.
res=bench/results/templates.md
{
	echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $where."
	echo "Default image, kosa8's kernel, 1 vCPU, 1 GiB; $rounds rounds, interleaved."
	echo
	grep '^[|A-Z-]\|^$' "$out" || true
	echo
	echo "Reproduce: \`make && make kernel initramfs image && bench/templates/run.sh $rounds\`."
} >"$out.md"
python3 - "$res" "$out.md" <<-'PY'
import sys
page, new = open(sys.argv[1]).read(), open(sys.argv[2]).read()
a, b = "<!-- bench/templates/run.sh -->\n", "<!-- end of bench/templates/run.sh -->\n"
if a in page and b in page:
    page = page[:page.index(a) + len(a)] + new + page[page.index(b):]
else:
    page += "\n" + a + new + b
open(sys.argv[1], "w").write(page)
PY
rm -f "$out" "$out.md"
echo "wrote $res"
