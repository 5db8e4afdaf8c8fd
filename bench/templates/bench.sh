#!/usr/bin/env bash
# Inside a machine with /dev/kvm (testbed/run): `kosa8 run --rm -- true`
# from a template, the same with --cold, and QEMU microvm booting the same
# kernel (bench/boot/bench.py: to userspace of the test initramfs), ROUNDS
# rounds interleaved; then template starts taken apart (steps.sh).
# Markdown on stdout.
set -u
cd "$(dirname "$0")/../.."
rounds=${1:-3}
export KOSA8_KERNEL=${KOSA8_KERNEL:-$(guest/kernel/build.sh --path)}
initrd=$(guest/initramfs/build.sh --path)
export KOSA8_STATE_DIR=$(mktemp -d)
trap 'rm -rf "$KOSA8_STATE_DIR"' EXIT
k8() { timeout -k 5 600 build/kosa8 "$@" </dev/null; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
med() { sort -n | awk '{ v[NR] = $1 } END { printf "%.2f / %.2f / %.2f", v[int((NR + 1) / 2)], v[1], v[NR] }'; }

t0=$(now); k8 image warm >/dev/null 2>"$KOSA8_STATE_DIR/warm.err" || { cat "$KOSA8_STATE_DIR/warm.err"; exit 1; }; t1=$(now)
warm=$(secs "$t0" "$t1")
: >"$KOSA8_STATE_DIR/tpl"; : >"$KOSA8_STATE_DIR/cold"; : >"$KOSA8_STATE_DIR/vm"; : >"$KOSA8_STATE_DIR/qemu"
# One boot of each VMM to userspace (bench.py's first column, seconds).
boot() { grep "^| $1 |" "$KOSA8_STATE_DIR/boot" | cut -d'|' -f3 | awk '{ printf "%.2f\n", $1 }'; }
for i in $(seq "$rounds"); do
	t0=$(now); k8 run --rm -- true 2>/dev/null || exit 1; t1=$(now)
	secs "$t0" "$t1" >>"$KOSA8_STATE_DIR/tpl"; echo >>"$KOSA8_STATE_DIR/tpl"
	t0=$(now); k8 run --rm --cold -- true 2>/dev/null || exit 1; t1=$(now)
	secs "$t0" "$t1" >>"$KOSA8_STATE_DIR/cold"; echo >>"$KOSA8_STATE_DIR/cold"
	python3 bench/boot/bench.py --kosa8 build/kosa8 --kernel "$KOSA8_KERNEL" --initrd "$initrd" \
		--runs 1 >"$KOSA8_STATE_DIR/boot" 2>/dev/null || exit 1
	boot kosa8 >>"$KOSA8_STATE_DIR/vm"; boot qemu-microvm >>"$KOSA8_STATE_DIR/qemu"
	echo "round $i: template $(tail -1 "$KOSA8_STATE_DIR/tpl") s, cold $(tail -1 "$KOSA8_STATE_DIR/cold") s," \
		"kosa8 vm $(tail -1 "$KOSA8_STATE_DIR/vm") s, QEMU $(tail -1 "$KOSA8_STATE_DIR/qemu") s" >&2
done
tm=$(med <"$KOSA8_STATE_DIR/tpl"); cm=$(med <"$KOSA8_STATE_DIR/cold")
ratio=$(awk -v a="${tm%% *}" -v b="${cm%% *}" 'BEGIN { printf "%.2f", a / b }')

echo "| \`kosa8 run --rm -- true\` | s (median / min / max) | runs |"
echo "|---|---|---|"
echo "| from the template | $tm | $rounds |"
echo "| --cold (boots) | $cm | $rounds |"
echo "| \`kosa8 vm\`, same kernel, to userspace (test initramfs; bench/boot/bench.py) | $(med <"$KOSA8_STATE_DIR/vm") | $rounds |"
echo "| QEMU microvm, same kernel, to userspace (test initramfs; bench/boot/bench.py) | $(med <"$KOSA8_STATE_DIR/qemu") | $rounds |"
echo
echo "Template / cold: **$ratio** (goal at most 0.25).  Making the template (\`kosa8 image warm\`, 1 vCPU, 1 GiB): $warm s."
echo
echo "Where a template start goes (bench/templates/steps.sh, in the same helper):"
echo
bench/templates/steps.sh "$rounds"
