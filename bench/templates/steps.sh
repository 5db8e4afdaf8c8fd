#!/usr/bin/env bash
# Inside a machine with /dev/kvm (testbed/run): one `kosa8 run --rm -- true`
# from a template taken apart, each step timed end to end from the shell
# (create, start, exec, rm), with the supervisor's startup marks, the VMM's
# "restore ms" line, and what create pays before it writes anything (a
# process start, the image lookup, the template's key).  Needs a made
# template (bench.sh warms one).  Markdown on stdout.
#   bench/templates/steps.sh [ROUNDS]      (default 3; the medians are shown)
set -u
cd "$(dirname "$0")/../.."
rounds=${1:-3}
export KOSA8_KERNEL=${KOSA8_KERNEL:-$(guest/kernel/build.sh --path)}
if [ -z "${KOSA8_STATE_DIR:-}" ]; then
	export KOSA8_STATE_DIR=$(mktemp -d)
	trap 'rm -rf "$KOSA8_STATE_DIR"' EXIT
fi
k8() { timeout -k 5 600 build/kosa8 "$@" </dev/null; }
now() { date +%s%N; }
ms() { echo $((($2 - $1) / 1000000)); }
med() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
run=${XDG_RUNTIME_DIR:-}
if [ -n "$run" ] && [ "${#run}" -lt 48 ]; then run=$run/kosa8; else run=/tmp/kosa8-$(id -u); fi
tmp=$KOSA8_STATE_DIR/steps
mkdir -p "$tmp"
status() {
	python3 - "$run/$1/control.sock" <<-'PY'
	import json, socket, sys
	s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
	s.sendall(b'{"v":1,"op":"status"}\n')
	m = json.loads(s.makefile().readline()).get("startup_ms") or {}
	print(" ".join(str(int(m.get(k, -1))) for k in
	      ("audit_open", "egress", "setup", "vmm_started", "vmm_listening", "agent_answered",
	       "identity", "ca_installed", "ready")))
	PY
}
k8 image warm >/dev/null 2>&1 || { echo "no template"; exit 1; }
for i in $(seq "$rounds"); do
	a=$(now); k8 version >/dev/null; b=$(now); echo "$(ms "$a" "$b")" >>"$tmp/proc"
	a=$(now); k8 image warm >/dev/null 2>&1; b=$(now); echo "$(ms "$a" "$b")" >>"$tmp/warm"
	a=$(now); guest/image/build.sh --path default >/dev/null 2>&1; b=$(now); echo "$(ms "$a" "$b")" >>"$tmp/lookup"
	a=$(now); k8 create --name st$i >/dev/null || exit 1; b=$(now)
	k8 start st$i || exit 1; c=$(now)
	echo "$(ms "$a" "$b") $(ms "$b" "$c")" >"$tmp/cs"
	status st$i >>"$tmp/marks"
	grep -a "restore ms:" "$KOSA8_STATE_DIR/sandboxes/st$i/console.log" | tail -1 | sed 's/.*restore ms: //' >"$tmp/restore"
	c=$(now); k8 exec st$i -- true || exit 1; d=$(now)
	k8 rm -f st$i || exit 1; e=$(now)
	echo "$(cat "$tmp/cs") $(ms "$c" "$d") $(ms "$d" "$e")" >>"$tmp/steps"
	echo "round $i: $(tail -1 "$tmp/steps") / marks $(tail -1 "$tmp/marks")" >&2
done
col() { awk -v c="$2" '{ print $c }' "$tmp/$1" | med; }
echo "| step (\`kosa8 run --rm -- true\` from the template, taken apart) | ms, median of $rounds |"
echo "|---|---|"
echo "| a kosa8 process that does nothing (\`kosa8 version\`) | $(med <"$tmp/proc") |"
echo "| \`kosa8 image warm\` with the template made (kernel and image lookup, template key, checks) | $(med <"$tmp/warm") |"
echo "| \`guest/image/build.sh --path default\` (the lookup every create ran before cli: remember the image lookup) | $(med <"$tmp/lookup") |"
echo "| \`kosa8 create\` | $(col steps 1) |"
echo "| \`kosa8 start\` | $(col steps 2) |"
echo "| ... supervisor (ms since it began): state, lock, audit log open | $(col marks 1) |"
echo "| ... egress proxy and the sandbox CA | $(col marks 2) |"
echo "| ... cgroup: set-up done | $(col marks 3) |"
echo "| ... VMM started (clone, cgroup join) | $(col marks 4) |"
echo "| ... VMM listening (exec, jail, state file, KVM, memory map, devices made; vCPUs and their state still to come) | $(col marks 5) |"
echo "| ... agent answered (guest runs, vsock connect, hello, ping) | $(col marks 6) |"
echo "| ... identity fixed up | $(col marks 7) |"
echo "| ... CA trusted in the guest | $(col marks 8) |"
echo "| ... ready (workspace) | $(col marks 9) |"
echo "| \`kosa8 exec -- true\` | $(col steps 3) |"
echo "| \`kosa8 rm -f\` | $(col steps 4) |"
awk '{ print $1 + $2 + $3 + $4 }' "$tmp/steps" >"$tmp/sum"
echo "| all four | $(med <"$tmp/sum") |"
echo
echo "VMM restore, the last round (ms): $(cat "$tmp/restore")"
