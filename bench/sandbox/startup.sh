#!/usr/bin/env bash
# Where a sandbox's start goes: ROUNDS times `kosa8 create` + `start`, then
# the supervisor's startup_ms (ms since it began, at the end of each step:
# set-up, VMM started, agent answered, identity, CA installed, ready), and
# the wall time of start, `exec -- true`, stop and rm.  Run it where
# /dev/kvm works: `testbed/run bench/sandbox/startup.sh [ROUNDS]` here.
set -u
cd "$(dirname "$0")/../.."
rounds=${1:-3}
export KOSA8_KERNEL=${KOSA8_KERNEL:-$(guest/kernel/build.sh --path)}
k8() { timeout -k 5 600 build/kosa8 "$@" </dev/null; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
startup_ms() {
	local run=${XDG_RUNTIME_DIR:-}
	if [ -n "$run" ] && [ "${#run}" -lt 48 ]; then run=$run/kosa8; else run=/tmp/kosa8-$(id -u); fi
	python3 - "$run/$1/control.sock" <<-'PY'
	import json, socket, sys
	s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
	s.sendall(b'{"v":1,"op":"status"}\n')
	print(json.dumps(json.loads(s.makefile().readline()).get("startup_ms")))
	PY
}
for i in $(seq "$rounds"); do
	k8 rm -f k8-startup >/dev/null 2>&1
	k8 create --name k8-startup >/dev/null || exit 1
	t0=$(date +%s.%N); k8 start k8-startup || exit 1; t1=$(date +%s.%N)
	echo "round $i: start $(secs "$t0" "$t1") s, startup_ms $(startup_ms k8-startup)"
	t0=$(date +%s.%N); k8 exec k8-startup -- true; t1=$(date +%s.%N)
	k8 stop k8-startup; t2=$(date +%s.%N); k8 rm -f k8-startup; t3=$(date +%s.%N)
	echo "round $i: exec true $(secs "$t0" "$t1") s, stop $(secs "$t1" "$t2") s, rm $(secs "$t2" "$t3") s"
done
