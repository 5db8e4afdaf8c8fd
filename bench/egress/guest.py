#!/usr/bin/env python3
"""Egress benchmark, guest side (bench/egress/guest.sh runs this where
/dev/kvm works: the helper VM of testbed/run here).  As root, on a
throwaway root: it adds an address to lo and a line to /etc/hosts.

One server on the host side (203.0.113.10, a TEST-NET-3 address on lo:
kosa8's proxy refuses loopback and private upstreams) sends N bytes for
GET /bulk/N, plain on port 80 and TLS on 443 (a P-256 certificate made at
start).  In rounds, interleaved:

  direct          curl on the host, straight to the server
  sandbox         curl in a kosa8 sandbox allowed bulk.test: guest TCP,
                  the agent's relay, vsock, the VMM's device, the
                  supervisor's proxy (Host or SNI checked), upstream
  vsock only      the same bytes written by this program into the VMM's
                  vsock socket and read by a guest process on a vsock
                  port: the device and the guest kernel, no agent relay,
                  no proxy, no TCP

Each download's time is curl's own (time_total; in the guest by the
guest's clock); around each one the CPU time of every party is read from
/proc: the VMM (its vCPU thread's time in the guest, the same thread's
time outside it: exits handled by KVM and the VMM; the VMM's other
threads: the vsock device's loop), the supervisor, the server, curl on the
host, this program; the helper's idle time; KVM's exit counters
(debugfs); in the guest, its own /proc/stat, the agent relay's CPU time
and the vsock device's interrupts.  A last download, not in the tables'
rounds, samples the socket queues along the path twice a second.

Prints Markdown."""
import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# The vsock stream benchmark's guest program (port 7000 reads a connection
# to its end and answers with the byte count) and its host side.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sandbox"))
from bench import VSOCK_GUEST, vsock_connect  # noqa: E402

ADDR = "203.0.113.10"
NAME = "bulk.test"
HZ = os.sysconf("SC_CLK_TCK")
KVM_STATS = ("exits", "io_exits", "mmio_exits", "halt_exits", "irq_injections", "irq_exits")
A = None
WORK = None
SERVER_PID = None

SERVER = r'''
import http.server, socketserver, ssl, sys, threading
addr, cert, key = sys.argv[1:4]
CHUNK = memoryview(b"\0" * (1 << 20))
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        try:
            n = int(self.path.rsplit("/", 1)[1])
        except ValueError:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.send_header("Connection", "close")
        self.end_headers()
        while n:
            k = min(n, len(CHUNK))
            self.wfile.write(CHUNK[:k])
            n -= k
        self.close_connection = True
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
plain = S((addr, 80), H)
tls = S((addr, 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
for s in (plain, tls):
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
'''

# In the guest, as root: waits for a line on stdin (the host samples
# first), downloads, and prints "eg-" lines: the guest's CPU counters, the
# relay's CPU ticks and the vsock interrupts before and after, curl's
# numbers.  With EG_QUEUES=1, the TCP queues of /proc/net/tcp twice a
# second (the guest kernel has no sock_diag for ss).
DL = r'''#!/bin/bash
set -u
ino=$(awk '$2 == "0100007F:0439" && $4 == "0A" {print $10; exit}' /proc/net/tcp)
relay=
for p in /proc/[0-9]*; do
	if ls -l "$p/fd" 2>/dev/null | grep -q "socket:\[$ino\]"; then relay=${p#/proc/}; break; fi
done
vdev=
for d in /sys/bus/virtio/devices/*; do [ "$(cat "$d/device")" = 0x0013 ] && vdev=${d##*/}; done
snap() {
	echo "eg-$1 stat $(head -1 /proc/stat)"
	[ -z "$relay" ] || echo "eg-$1 relay $(cut -d' ' -f14,15 /proc/$relay/stat)"
	[ -z "$vdev" ] || echo "eg-$1 irq $(awk -v d="$vdev" '$NF == d {s = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i; print s}' /proc/interrupts)"
}
echo eg-ready
read -r _
snap before
if [ "${EG_QUEUES:-0}" = 1 ]; then
	while sleep 0.5; do
		awk 'NR > 1 && $4 == "01" {print "eg-q", $2, $3, $5}' /proc/net/tcp
	done &
	sampler=$!
fi
curl -sS -o /dev/null -w 'eg-curl %{http_code} %{size_download} %{time_total}\n' "$@"
[ -z "${sampler:-}" ] || kill "$sampler"
snap after
echo eg-done
'''

def log(msg):
    print("# " + msg, file=sys.stderr, flush=True)


class Build:
    """A kosa8 under test (its kosa8-vmm beside it) and its sandbox."""
    def __init__(self, i, spec):
        path, _, self.label = spec.partition("=")
        self.kosa8 = os.path.abspath(path)
        self.sb = f"egbench{i}"
        self.vmm = self.supervisor = self.vsock = None


def k8(b, *args, **kw):
    return subprocess.run([b.kosa8, *args], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=900, **kw)


# ---------------------------------------------------------------- samples

def task_times(pid):
    """{tid: (utime + stime, guest_time)} in ticks; {} once it is gone."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rindex(")") + 2:].split()  # rest[0] is field 3
        out[tid] = (int(rest[11]) + int(rest[12]), int(rest[40]))
    return out


def kvm_stats():
    out = {}
    for k in KVM_STATS:
        try:
            with open(f"/sys/kernel/debug/kvm/{k}") as f:
                out[k] = int(f.read())
        except (OSError, ValueError):
            pass
    return out


def cpu_line(line):
    v = [int(x) for x in line.split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice
    return {"user": v[0] + v[1], "system": v[2], "idle": v[3] + v[4], "irq": v[5],
            "softirq": v[6]}


def sample(pids):
    with open("/proc/stat") as f:
        st = cpu_line(f.readline())
    return {"t": time.monotonic(), "stat": st, "kvm": kvm_stats(),
            "tasks": {k: task_times(p) for k, p in pids.items()},
            "self": os.times()}


def diff(a, b, own_child_s=0.0):
    """CPU seconds per party between samples a and b."""
    d = {"wall": b["t"] - a["t"]}
    d["helper idle"] = (b["stat"]["idle"] - a["stat"]["idle"]) / HZ
    for k, bt in b["tasks"].items():
        at = a["tasks"].get(k, {})
        tot = sum(bt[t][0] - at.get(t, (0, 0))[0] for t in bt) / HZ
        guest = sum(bt[t][1] - at.get(t, (0, 0))[1] for t in bt) / HZ
        if k == "vmm":
            # The vCPU thread is the one with guest time; its time outside
            # the guest is exits (KVM in the helper's kernel, the VMM's
            # own handlers).  Guest time is counted in utime too.
            vcpu = [t for t in bt if bt[t][1] > 0]
            vt = sum(bt[t][0] - at.get(t, (0, 0))[0] for t in vcpu) / HZ
            d["guest (vCPU in guest)"] = guest
            d["VMM vCPU thread, exits"] = vt - guest
            d["VMM other threads"] = tot - vt
        else:
            d[k] = tot
    d["this program"] = (b["self"].user + b["self"].system - a["self"].user - a["self"].system)
    d["host curl"] = own_child_s
    d["kvm"] = {k: b["kvm"][k] - a["kvm"].get(k, 0) for k in b["kvm"]}
    d["rest of the helper"] = d["wall"] * (os.cpu_count() or 1) - sum(d.get(p, 0) for p in PARTS[:-1])
    return d


# ---------------------------------------------------------------- set-up

def setup_host():
    subprocess.run(["ip", "addr", "add", f"{ADDR}/32", "dev", "lo"], capture_output=True)
    with open("/etc/hosts", "a") as f:
        f.write(f"{ADDR} {NAME}\n")
    if not os.path.isdir("/sys/kernel/debug/kvm"):
        subprocess.run(["mount", "-t", "debugfs", "none", "/sys/kernel/debug"], capture_output=True)
    subprocess.run(["modprobe", "unix_diag"], capture_output=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "2", "-subj", f"/CN={NAME}", "-addext",
                    f"subjectAltName=DNS:{NAME}", "-keyout", f"{WORK}/srv.key", "-out",
                    f"{WORK}/srv.crt"], check=True, capture_output=True)
    with open(f"{WORK}/server.py", "w") as f:
        f.write(SERVER)
    srv = subprocess.Popen([sys.executable, f"{WORK}/server.py", ADDR, f"{WORK}/srv.crt",
                            f"{WORK}/srv.key"], stdout=subprocess.PIPE)
    if srv.stdout.readline().strip() != b"ready":
        raise RuntimeError("the server did not start")
    return srv


def setup_sandbox(b):
    ws = f"{WORK}/ws"
    if not os.path.isdir(ws):
        os.makedirs(ws)
        shutil.copy(f"{WORK}/srv.crt", ws)
        for name, text, mode in (("dl.sh", DL, 0o755), ("vsink.py", VSOCK_GUEST, 0o644)):
            with open(f"{ws}/{name}", "w") as f:
                f.write(text)
            os.chmod(f"{ws}/{name}", mode)
    sb = b.sb
    k8(b, "rm", "-f", sb)
    img = ["--image", A.image] if A.image else []
    r = k8(b, "create", "--name", sb, "--workspace", ws, "--allow", NAME, "--cpus", "1", "--mem", "1G",
           *img)
    if r.returncode == 0:
        r = k8(b, "start", sb)
    if r.returncode != 0:
        raise RuntimeError(f"sandbox create/start failed: {r.stderr.decode()[-800:]}")
    vmm = supervisor = vsock = None
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--jail" in argv and any(f"/sandboxes/{sb}/".encode() in a for a in argv):
            vmm = int(p)
            vsock = argv[argv.index(b"--vsock") + 1].decode() if b"--vsock" in argv else None
    if not vmm:
        raise RuntimeError("the sandbox's VMM was not found")
    if not vsock or not os.path.exists(vsock):  # a path inside the VMM's jail
        run = os.environ.get("XDG_RUNTIME_DIR")
        vsock = os.path.join(f"{run}/kosa8" if run else f"/tmp/kosa8-{os.getuid()}", sb, "vm",
                             "vsock.sock")
    with open(f"/proc/{vmm}/status") as f:
        supervisor = int(re.search(r"^PPid:\s+(\d+)", f.read(), re.M).group(1))
    r = k8(b, "exec", "-u", "root", sb, "--", "sh", "-c",
           "setsid -f python3 /workspace/vsink.py 0 </dev/null >/dev/null 2>&1")
    if r.returncode != 0:
        raise RuntimeError(f"guest vsock sink: {r.stderr.decode()}")
    b.vmm, b.supervisor, b.vsock = vmm, supervisor, vsock


# ---------------------------------------------------------------- downloads

def url(tls, n):
    return f"{'https' if tls else 'http'}://{NAME}/bulk/{n}"


def curl_args(tls, cacert):
    return ["--cacert", cacert] if tls else []


def parse_curl(line):
    _, code, size, t = line.split()
    if code != "200":
        raise RuntimeError(f"download answered {code}")
    return int(size), float(t)


def dl_direct(pids, tls, n):
    cmd = ["curl", "-sS", "-o", "/dev/null", "-w", "eg-curl %{http_code} %{size_download} %{time_total}\n",
           *curl_args(tls, f"{WORK}/srv.crt"), url(tls, n)]
    a = sample(pids)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    out = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    b = sample(pids)
    p.returncode = status
    size, t = parse_curl(out.strip())
    return {"bytes": size, "time": t, "cpu": diff(a, b, ru.ru_utime + ru.ru_stime)}


def guest_counters(lines, when):
    g = {}
    for ln in lines:
        f = ln.split()
        if f[0] != f"eg-{when}":
            continue
        if f[1] == "stat":
            g["stat"] = cpu_line(" ".join(f[2:]))
        elif f[1] == "relay":
            g["relay"] = int(f[2]) + int(f[3])
        elif f[1] == "irq" and len(f) > 2:
            g["irq"] = int(f[2])
    return g


def dl_sandbox(b, pids, tls, n, queues=False):
    env = ["-e", "EG_QUEUES=1"] if queues else []
    p = subprocess.Popen([b.kosa8, "exec", "-u", "root", *env, b.sb, "--", "bash", "/workspace/dl.sh",
                          *curl_args(tls, "/workspace/srv.crt"), url(tls, n)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    lines = []
    for ln in p.stdout:
        if ln.strip() == b"eg-ready":
            break
    qs = []
    stop = threading.Event()
    th = threading.Thread(target=host_queues, args=(qs, stop))
    a = sample(pids)
    if queues:
        th.start()
    p.stdin.write(b"go\n")
    p.stdin.flush()
    for ln in p.stdout:
        s = ln.decode().strip()
        if s == "eg-done":
            break
        lines.append(s)
    b = sample(pids)
    stop.set()
    if queues:
        th.join()
    p.stdin.close()
    p.wait()
    cl = [ln for ln in lines if ln.startswith("eg-curl ")]
    if not cl:
        raise RuntimeError("no curl line from the guest: " + " | ".join(lines[-5:]))
    size, t = parse_curl(cl[0])
    g0, g1 = guest_counters(lines, "before"), guest_counters(lines, "after")
    guest = {k: (g1["stat"][k] - g0["stat"][k]) / 100 for k in g0.get("stat", {})}
    if "relay" in g0 and "relay" in g1:
        guest["agent relay"] = (g1["relay"] - g0["relay"]) / 100
    if "irq" in g0 and "irq" in g1:
        guest["vsock interrupts"] = g1["irq"] - g0["irq"]
    r = {"bytes": size, "time": t, "cpu": diff(a, b), "guest": guest}
    if queues:
        r["queues"] = {"host": qs, "guest": [ln for ln in lines if ln.startswith("eg-q ")]}
    return r


def push_vsock(pids, path, n):
    s = vsock_connect(path, 7000)
    chunk = memoryview(b"\0" * (1 << 20))
    a = sample(pids)
    t0 = time.monotonic()
    for off in range(0, n, len(chunk)):
        s.sendall(chunk[:min(n - off, len(chunk))])
    s.shutdown(socket.SHUT_WR)
    got = int(s.makefile("rb").readline())
    t = time.monotonic() - t0
    b = sample(pids)
    s.close()
    if got != n:
        raise RuntimeError(f"the guest got {got} of {n} bytes")
    return {"bytes": n, "time": t, "cpu": diff(a, b)}


def host_queues(out, stop):
    """Twice a second: the unix socket pair VMM <-> supervisor carrying the
    egress connection (bytes unread at each end) and the upstream TCP
    connection (ss; unread at the proxy, unsent at the server)."""
    while not stop.wait(0.5):
        r = subprocess.run(["ss", "-xntH"], capture_output=True, text=True)
        out.append(r.stdout)


# ---------------------------------------------------------------- report

def mibs(r):
    return r["bytes"] / r["time"] / 2**20


PARTS = ("guest (vCPU in guest)", "VMM vCPU thread, exits", "VMM other threads", "supervisor",
         "server", "host curl", "this program", "helper idle", "rest of the helper")


def report(results, rounds, n):
    print(f"\n- rounds: {rounds}; download: {n >> 20} MiB; helper: {os.cpu_count()} vCPU(s)\n")
    print("| round | path | MiB/s | ÷ direct, same round |")
    print("|---:|---|---:|---:|")
    for rnd in range(rounds):
        for key, label in PATHS:
            r = results[key][rnd]
            base = results["direct, TLS" if key.endswith("TLS") else "direct"][rnd]
            ratio = "" if key.startswith("direct") else f"{mibs(r) / mibs(base):.3f}"
            print(f"| {rnd + 1} | {label} | {mibs(r):.1f} | {ratio} |")
    print("\nWhere the time went, per MiB (ms of CPU; medians over the rounds; one vCPU, so the"
          " parts and idle add up to the wall time):\n")
    keys = [k for k, _ in PATHS]
    print("| part | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    mib = n / 2**20
    print("| wall (host clock) | " + " | ".join(
        f"{statistics.median(r['cpu']['wall'] for r in results[k]) * 1000 / mib:.1f}" for k in keys) + " |")
    for part in PARTS:
        print(f"| {part} | " + " | ".join(
            f"{statistics.median(r['cpu'].get(part, 0) for r in results[k]) * 1000 / mib:.1f}"
            for k in keys) + " |")
    for kv in KVM_STATS:
        if all(kv in r["cpu"]["kvm"] for k in keys for r in results[k]):
            print(f"| KVM {kv} per MiB | " + " | ".join(
                f"{statistics.median(r['cpu']['kvm'][kv] for r in results[k]) / mib:.0f}" for k in keys) + " |")
    print("\nInside the guest, per MiB (ms of the guest's CPU by its own /proc/stat; medians):\n")
    gkeys = [k for k in keys if k.startswith("sandbox")]
    print("| part | " + " | ".join(gkeys) + " |")
    print("|---|" + "---:|" * len(gkeys))
    for part in ("user", "system", "softirq", "irq", "idle", "agent relay"):
        print(f"| {part} | " + " | ".join(
            f"{statistics.median(r['guest'].get(part, 0) for r in results[k]) * 1000 / mib:.1f}"
            for k in gkeys) + " |")
    print("| vsock interrupts per MiB | " + " | ".join(
        f"{statistics.median(r['guest'].get('vsock interrupts', 0) for r in results[k]) / mib:.1f}"
        for k in gkeys) + " |")


def tcp_addr(hexaddr):
    """/proc/net/tcp's "0100007F:0439" -> "127.0.0.1:1081"."""
    a, p = hexaddr.split(":")
    return "%s:%d" % (socket.inet_ntoa(int(a, 16).to_bytes(4, "little")), int(p, 16))


def report_queues(q, n):
    print(f"\nQueues during one more plain download through the sandbox ({n >> 20} MiB, not in the"
          " rounds), sampled twice a second:\n")
    print("    guest /proc/net/tcp, established (local remote: unsent/unacked bytes, unread bytes):")
    for ln in q["queues"]["guest"][:16]:
        _, loc, rem, qq = ln.split()
        tx, rx = (int(x, 16) for x in qq.split(":"))
        print(f"      {tcp_addr(loc)} {tcp_addr(rem)}: tx {tx} rx {rx}")
    print("    helper ss -xnt (egress unix pair and upstream TCP):")
    for snap in q["queues"]["host"][:6]:
        for ln in snap.splitlines():
            if "_1080" in ln or ADDR in ln:
                print("      " + " ".join(ln.split()))
        print("      --")


PATHS = []  # (key, label), in the order of a round


def make_paths(builds):
    tag = (lambda b: f" [{b.label}]") if len(builds) > 1 else (lambda b: "")
    PATHS.append(("direct", "direct (host curl)"))
    for b in builds:
        PATHS.append((f"sandbox{tag(b)}", f"sandbox{tag(b)} (guest curl via kosa8)"))
        PATHS.append((f"vsock only{tag(b)}", f"vsock only{tag(b)} (host -> guest process)"))
    PATHS.append(("direct, TLS", "direct, TLS"))
    for b in builds:
        PATHS.append((f"sandbox{tag(b)}, TLS", f"sandbox{tag(b)}, TLS"))


def round_of(builds, n, results, queues=False):
    """One download per path, in PATHS order."""
    it = iter(k for k, _ in PATHS)
    srv = {"server": SERVER_PID}
    results[next(it)].append(dl_direct(srv, False, n))
    for b in builds:
        pids = {"vmm": b.vmm, "supervisor": b.supervisor, **srv}
        results[next(it)].append(dl_sandbox(b, pids, False, n))
        results[next(it)].append(push_vsock(pids, b.vsock, n))
    results[next(it)].append(dl_direct(srv, True, n))
    for b in builds:
        pids = {"vmm": b.vmm, "supervisor": b.supervisor, **srv}
        results[next(it)].append(dl_sandbox(b, pids, True, n))


def main():
    global A, WORK, SERVER_PID
    ap = argparse.ArgumentParser()
    ap.add_argument("--kosa8", action="append", required=True,
                    help="PATH[=LABEL], repeatable: each build's sandbox in the same rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--image", help="the sandbox's image (default: the newest default)")
    A = ap.parse_args()
    WORK = tempfile.mkdtemp(prefix="k8egg-")
    n = A.mib << 20
    builds = [Build(i, spec) for i, spec in enumerate(A.kosa8)]
    make_paths(builds)
    srv = setup_host()
    SERVER_PID = srv.pid
    try:
        for b in builds:
            t0 = time.monotonic()
            setup_sandbox(b)
            log(f"sandbox {b.sb} ({b.label or b.kosa8}) up in {time.monotonic() - t0:.0f} s: "
                f"VMM {b.vmm}, supervisor {b.supervisor}")
        # Warm-up: the name's DNS answer, the first connection, page cache.
        round_of(builds, 1 << 20, {k: [] for k, _ in PATHS})
        results = {k: [] for k, _ in PATHS}
        for rnd in range(A.rounds):
            round_of(builds, n, results)
            log(f"round {rnd + 1}: " + ", ".join(f"{k} {mibs(results[k][-1]):.1f}" for k, _ in PATHS))
        b = builds[-1]
        q = dl_sandbox(b, {"vmm": b.vmm, "supervisor": b.supervisor, "server": SERVER_PID}, False, n,
                       queues=True)
        for b in builds:
            print(f"- build{f' [{b.label}]' if b.label else ''}: {b.kosa8}")
        report(results, A.rounds, n)
        report_queues(q, n)
        print("\nRaw (per download: MiB/s; CPU s per part):\n")
        for k, _ in PATHS:
            for i, r in enumerate(results[k]):
                parts = ", ".join(f"{p} {r['cpu'].get(p, 0):.2f}" for p in ("wall",) + PARTS)
                print(f"    {k} r{i + 1}: {mibs(r):.1f} MiB/s; {parts}; kvm {r['cpu']['kvm']};"
                      f" guest {r.get('guest', {})}")
    finally:
        for b in builds:
            k8(b, "rm", "-f", b.sb)
        srv.send_signal(signal.SIGTERM)
        srv.wait()
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
