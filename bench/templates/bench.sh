#!/usr/bin/env bash
# Inside a machine with /dev/kvm (testbed/run): `kosa8 run --rm -- true`
# from a template, the same with --cold, and QEMU microvm booting the same
# kernel (bench/boot/bench.py: to userspace of the test initramfs), ROUNDS
# rounds interleaved; then one template start broken down (the supervisor's
# startup_ms and the VMM's "restore ms" line).  Markdown on stdout.
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
: >"$KOSA8_STATE_DIR/tpl"; : >"$KOSA8_STATE_DIR/cold"
for i in $(seq "$rounds"); do
	t0=$(now); k8 run --rm -- true 2>/dev/null || exit 1; t1=$(now)
	secs "$t0" "$t1" >>"$KOSA8_STATE_DIR/tpl"; echo >>"$KOSA8_STATE_DIR/tpl"
	t0=$(now); k8 run --rm --cold -- true 2>/dev/null || exit 1; t1=$(now)
	secs "$t0" "$t1" >>"$KOSA8_STATE_DIR/cold"; echo >>"$KOSA8_STATE_DIR/cold"
	echo "round $i: template $(tail -1 "$KOSA8_STATE_DIR/tpl") s, cold $(tail -1 "$KOSA8_STATE_DIR/cold") s" >&2
done
qemu=$(python3 bench/boot/bench.py --kosa8 build/kosa8 --kernel "$KOSA8_KERNEL" --initrd "$initrd" \
	--runs "$rounds" 2>/dev/null | grep '^| qemu-microvm' | cut -d'|' -f3)
tm=$(med <"$KOSA8_STATE_DIR/tpl"); cm=$(med <"$KOSA8_STATE_DIR/cold")
ratio=$(awk -v a="${tm%% *}" -v b="${cm%% *}" 'BEGIN { printf "%.2f", a / b }')

# One start from the template, step by step.
run=${XDG_RUNTIME_DIR:-}
if [ -n "$run" ] && [ "${#run}" -lt 48 ]; then run=$run/kosa8; else run=/tmp/kosa8-$(id -u); fi
k8 create --name tb >/dev/null 2>&1 || exit 1
t0=$(now); k8 start tb || exit 1; t1=$(now)
startup=$(python3 - "$run/tb/control.sock" <<-'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
s.sendall(b'{"v":1,"op":"status"}\n')
print(json.dumps(json.loads(s.makefile().readline()).get("startup_ms")))
PY
)
restore=$(grep -a "restore ms:" "$KOSA8_STATE_DIR/sandboxes/tb/console.log" | tail -1 | sed 's/.*restore ms: //')
t2=$(now); k8 exec tb -- true; t3=$(now); k8 rm -f tb; t4=$(now)

echo "| \`kosa8 run --rm -- true\` | s (median / min / max) | runs |"
echo "|---|---|---|"
echo "| from the template | $tm | $rounds |"
echo "| --cold (boots) | $cm | $rounds |"
echo "| QEMU microvm, same kernel, to userspace (test initramfs) | $qemu | $rounds |"
echo
echo "Template / cold: **$ratio** (goal at most 0.25).  Making the template (\`kosa8 image warm\`, 1 vCPU, 1 GiB): $warm s."
echo
echo "One start from the template (\`kosa8 start\`: $(secs "$t0" "$t1") s; then \`exec -- true\` $(secs "$t2" "$t3") s, \`rm -f\` $(secs "$t3" "$t4") s):"
echo
echo "- supervisor startup_ms (ms since it began, at the end of each step): \`$startup\`"
echo "- VMM restore (ms): $restore"
