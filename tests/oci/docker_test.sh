#!/usr/bin/env bash
# Debian's containerd and docker.io with kosa8 oci as their runtime, a real
# image made here (no network), as a user wires them (docs/kubernetes.md):
#
# - dockerd with daemon.json's "runtimes" naming a kosa8-runc link:
#   `docker run --runtime kosa8` (output, stderr, exit status, egress by the
#   node's default policy: an allowed host answers, another is denied, no
#   network device), `docker exec`, `docker kill -s USR1` and `docker stop`
#   reaching the process, the audit record naming Docker's container id;
# - `ctr run --runtime io.containerd.runc.v2 --runc-binary kosa8-runc` with
#   an io.kosa8.allow annotation opening one more host;
# - containerd's CRI with kosa8 as a pod's runtime handler
#   (tests/oci/cri_test.py: a pod, a container, ExecSync, stop, removal).
#
# Run it where /dev/kvm works and the root is throwaway (it starts daemons,
# adds an address to lo and names to /etc/hosts): the helper VM, through
# tests/oci/run --docker.  The tools come from Debian's packages, unpacked
# by scripts/oci-tools.sh (no install, no daemon on the host).
#
#   KOSA8            the kosa8 binary (default build/kosa8)
#   KOSA8_OCI_TOOLS  the unpacked packages (default <cache>/oci-tools/tree)
set -u
K8=$(realpath "${KOSA8:-build/kosa8}")
TOOLS=${KOSA8_OCI_TOOLS:-${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8}/oci-tools/tree}
failures=0
ok() { echo "ok $1"; }
not_ok() {
	echo "not ok $1: $2"
	failures=$((failures + 1))
}
step() { echo "# docker: $(date +%T) $*"; }
# has NAME TEXT WANT [NOT]: TEXT holds WANT (and not NOT).
has() {
	local tail=$2
	[ "${#tail}" -le 1500 ] || tail=${tail: -1500}
	if [[ $2 == *"$3"* ]] && { [ -z "${4:-}" ] || [[ $2 != *"$4"* ]]; }; then ok "$1"; else not_ok "$1" "$(printf %q "$tail")"; fi
}
is() { if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1" "got '$2', want '$3'"; fi; }

if ! [ -x "$TOOLS/usr/bin/containerd" ] || ! [ -x "$TOOLS/usr/sbin/dockerd" ]; then
	not_ok setup "no containerd or dockerd under $TOOLS (run scripts/oci-tools.sh)"
	exit 1
fi
W=$(mktemp -d /tmp/k8d-XXXXXX)
# overlayfs snapshots need a file system that takes an overlay upper layer
mount -t tmpfs -o size=1g,mode=0700 tmpfs "$W" || { not_ok setup "cannot mount a tmpfs on $W"; exit 1; }
mkdir -p "$W/bin" "$W/cfg" "$W/rootfs"
ln -s "$K8" "$W/bin/kosa8-runc"
export PATH="$W/bin:$TOOLS/usr/bin:$TOOLS/usr/sbin:$PATH"
# One config folder for the daemons, their shims, kosa8-runc and this test:
# the node's default policy and the audit log's key live there.
export KOSA8_CONFIG_DIR="$W/cfg"
printf 'allow allowed.test\n' >"$W/cfg/policy"
D() { docker -H "unix://$W/docker.sock" "$@"; }
C() { ctr -a "$W/containerd.sock" "$@"; }
pids=()
cleanup() {
	D ps -aq 2>/dev/null | xargs -r docker -H "unix://$W/docker.sock" rm -f >/dev/null 2>&1
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	sleep 2
	umount -l "$W" 2>/dev/null
}
trap cleanup EXIT

# The test web server: names in /etc/hosts, on a documentation address
# (the proxy refuses names that resolve to loopback or private ones).
ip addr add 203.0.113.10/32 dev lo 2>/dev/null
printf '203.0.113.10 allowed.test other.test denied.test\n' >>/etc/hosts
python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from %s\n" % self.headers.get("Host", "")).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("203.0.113.10", 80), H).serve_forever()' &
pids+=($!)

step "containerd and dockerd"
# Its CRI plugin as docs/kubernetes.md wires it (runtime handler kosa8),
# for tests/oci/cri_test.py; the pod's sandbox (pause) image is one
# imported below, no registry, and no CNI: the test's pod is on the node's
# network.
cat >"$W/containerd.toml" <<EOF
version = 2
root = "$W/containerd"
state = "$W/containerd-state"
[grpc]
  address = "$W/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/kosa8-test/pause:1"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$W/cni/bin"
    conf_dir = "$W/cni/conf"
  # containerd 1.6 loads no CRI plugin whose runtimes lack the default one
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kosa8]
    runtime_type = "io.containerd.runc.v2"
    pod_annotations = ["io.kosa8.*"]
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kosa8.options]
      BinaryName = "$W/bin/kosa8-runc"
EOF
containerd --config "$W/containerd.toml" >"$W/containerd.log" 2>&1 &
pids+=($!)
cat >"$W/daemon.json" <<EOF
{ "runtimes": { "kosa8": { "path": "$W/bin/kosa8-runc" } } }
EOF
for _ in $(seq 60); do [ -S "$W/containerd.sock" ] && break; sleep 1; done
dockerd --config-file "$W/daemon.json" --containerd "$W/containerd.sock" -H "unix://$W/docker.sock" \
	--data-root "$W/docker" --exec-root "$W/dx" --pidfile "$W/docker.pid" --iptables=false \
	--ip6tables=false --bridge=none --storage-driver overlay2 >"$W/dockerd.log" 2>&1 &
pids+=($!)
for _ in $(seq 120); do D info >/dev/null 2>&1 && break; sleep 1; done
if ! D info >/dev/null 2>&1; then
	not_ok docker-daemon "dockerd did not come up: $(tail -5 "$W/dockerd.log")"
	exit 1
fi
ok docker-daemon

# The image: a busybox tree with a marker file, imported from a tar made here.
mkdir -p "$W/rootfs/bin" "$W/rootfs/etc" "$W/rootfs/tmp"
cp /bin/busybox "$W/rootfs/bin/"
for a in sh cat echo id hostname wget sleep ls tail nslookup awk timeout; do ln -s busybox "$W/rootfs/bin/$a"; done
echo from-the-image >"$W/rootfs/etc/marker"
tar -C "$W/rootfs" -c . | D import - kosa8-test/busybox:1 >/dev/null || not_ok docker-import "docker import failed"
RUN=(--runtime kosa8 --network none --security-opt apparmor=unconfined)
# The name through the container's DNS (busybox's own resolver: Debian's
# static busybox wget crashes looking a name up in a root without NSS
# modules, and with -T on any address), then HTTP to the address it got,
# as any client does.
# shellcheck disable=SC2016
GET='get() { ip=$(nslookup "$1" 2>/dev/null | awk '"'"'/^Name:/ {n = 1} n && /^Address/ {print $2; exit}'"'"')
	[ -n "$ip" ] && timeout 20 wget -q -O- --header "Host: $1" "http://$ip/"; }
'

step "the test server from this host: $(curl -sS --max-time 10 http://allowed.test/ 2>&1)"

step "docker run"
t0=$(date +%s)
out=$(D run --rm "${RUN[@]}" kosa8-test/busybox:1 sh -c "$GET"'
	cat /etc/marker; echo err-line >&2
	echo "allowed: $(get allowed.test)"
	if get other.test >/dev/null; then echo OTHER-REACHED; else echo other-denied; fi
	if timeout 20 wget -q -O- http://203.0.113.10/; then echo IP-REACHED; else echo ip-denied; fi
	echo nics: $(ls /sys/class/net); exit 3' 2>"$W/run.err")
rc=$?
step "docker run took $(($(date +%s) - t0)) s"
is docker-run-exit-status "$rc" 3
has docker-run-stdout "$out" from-the-image
has docker-run-stderr "$(cat "$W/run.err")" err-line
has docker-run-allowed-host "$out" "allowed: hello from allowed.test"
has docker-run-denied-host "$out" other-denied OTHER-REACHED
# the test server's own address answers this host, never the container
has docker-run-ip-literal-denied "$out" ip-denied IP-REACHED
# lo and the agent's dummy kosa8-void (docs/egress.md), nothing else
nics=$(echo "$out" | sed -n 's/^nics: //p')
case " $nics " in
*" lo "*) extra=$(echo "$nics" | tr ' ' '\n' | grep -vx -e lo -e kosa8-void | tr '\n' ' ') ;;
*) extra="no lo in '$nics'" ;;
esac
is docker-run-no-network-device "$extra" ""

step "docker run -d, exec, kill, stop"
cid=$(D run -d "${RUN[@]}" kosa8-test/busybox:1 sh -c "trap 'echo got-usr1' USR1; trap 'echo got-term; exit 42' TERM
	echo up; while :; do sleep 1; done")
for _ in $(seq 300); do D logs "$cid" 2>&1 | grep -q up && break; sleep 1; done
has docker-detached-running "$(D inspect -f '{{.State.Status}}' "$cid" 2>&1)" running
out=$(D exec "$cid" sh -c 'cat /etc/marker; echo exec-uid=$(id -u); exit 4' 2>&1)
rc=$?
is docker-exec-exit-status "$rc" 4
has docker-exec-output "$out" "from-the-image"
D kill -s USR1 "$cid" >/dev/null
for _ in $(seq 60); do D logs "$cid" 2>&1 | grep -q got-usr1 && break; sleep 1; done
has docker-kill-signal "$(D logs "$cid" 2>&1)" got-usr1
D stop -t 120 "$cid" >/dev/null
is docker-stop-exit-status "$(D inspect -f '{{.State.ExitCode}}' "$cid")" 42
has docker-stop-term "$(D logs "$cid" 2>&1)" got-term
has docker-audit-names-container "$("$K8" audit show --json 2>&1 | tr -d ' ')" "\"container\":\"$cid\""
D rm "$cid" >/dev/null

step "ctr run"
D save kosa8-test/busybox:1 -o "$W/image.tar" && C -n k8 images import "$W/image.tar" >/dev/null ||
	not_ok ctr-import "docker save or ctr images import failed"
t0=$(date +%s)
out=$(C -n k8 run --rm --runtime io.containerd.runc.v2 --runc-binary "$W/bin/kosa8-runc" \
	--annotation io.kosa8.allow=other.test docker.io/kosa8-test/busybox:1 k8ctr sh -c "$GET"'
	cat /etc/marker
	echo "other: $(get other.test)"
	if get denied.test >/dev/null; then echo DENIED-REACHED; else echo denied-denied; fi
	exit 6' 2>&1 </dev/null)
rc=$?
step "ctr run took $(($(date +%s) - t0)) s"
is ctr-run-exit-status "$rc" 6
has ctr-run-stdout "$out" from-the-image
has ctr-annotation-allows-host "$out" "other: hello from other.test"
has ctr-denied-host "$out" denied-denied DENIED-REACHED

step "CRI"
# The pod's sandbox image: the same tree, sleeping (a pause image's job).
tar -C "$W/rootfs" -c . | D import --change 'CMD ["/bin/sleep", "2147483647"]' - kosa8-test/pause:1 >/dev/null &&
	D save kosa8-test/busybox:1 kosa8-test/pause:1 -o "$W/cri-images.tar" &&
	C -n k8s.io images import "$W/cri-images.tar" >/dev/null || not_ok cri-import "docker import, save or ctr import failed"
t0=$(date +%s)
KOSA8=$K8 KOSA8_CRI_GET=$GET tests/oci/cri_test.py "$W/containerd.sock" "$W" docker.io/kosa8-test/busybox:1 \
	docker.io/kosa8-test/pause:1 ||
	failures=$((failures + 1))
step "CRI took $(($(date +%s) - t0)) s"

if [ "$failures" -gt 0 ]; then
	step "dockerd log tail"; tail -8 "$W/dockerd.log" | sed 's/^/# /'
	step "containerd log tail"; tail -8 "$W/containerd.log" | sed 's/^/# /'
	step "containerd's errors"; grep -a 'level=error\|failed to load plugin' "$W/containerd.log" | tail -8 | sed 's/^/# /'
	step "the test server: $(ip -br addr show dev lo 2>&1 | tr '\n' ' ')"
	step "egress in the audit log"; "$K8" audit show 2>&1 | grep -E 'test|egress|dns' | tail -15 | sed 's/^/# /'
fi
exit $((failures > 0))
