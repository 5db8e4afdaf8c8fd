#!/usr/bin/env python3
"""Sandbox benchmarks (issue 3), kosa8 against QEMU microvm, same guest
kernel, same Debian image, same run.  Needs /dev/kvm (bench/sandbox/run.sh
runs it in the helper VM when the host has none).

  run     `kosa8 run --rm -- true`, from the command to its exit; beside it
          a bare boot of the same kernel and image whose init is
          /usr/bin/true (the guest panics when init exits and the VMM ends
          on the reset), in kosa8's VMM and in QEMU microvm.
  blk     fio in the guest on its root file system (ext4 on virtio-blk):
          sequential 1 MiB write and read, random 4 KiB write and read,
          O_DIRECT, libaio, queue depth 16, 256 MiB file, 15 s each.
          kosa8: a delta over the image; QEMU: the raw image with
          snapshot=on (its own copy-on-write qcow2 overlay); both files on
          the same file system.  Raw lines: per job MiB/s, IOPS and the
          slowest completion in ms (a stall shows there).
  vsock   a running sandbox; a guest process listens on vsock ports, the
          host connects through the sandbox's vsock socket and streams
          256 MiB each way; beside it the same bytes through `kosa8 exec`'s
          stdout.  (No QEMU row: its vsock needs vhost-vsock on the host.)
  mem     a sandbox started and left idle: RSS and PSS of its VMM and
          supervisor; beside it kosa8's VMM and QEMU booting the same
          kernel and image with init sleeping, same guest RAM.

Prints Markdown; raw lines start with '#'."""
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
import time

BASE_CMDLINE = "console=ttyS0 reboot=k panic=-1 pci=off nomodule"
ROOT = "root=/dev/vda rw rootfstype=ext4 quiet"
QEMU_MMIO = "virtio_mmio.device=512@0xfeb00e00:12"
A = None
WORK = None


def log(msg):
    print("# " + msg, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw)


def k8(*args, **kw):
    return subprocess.run([A.kosa8, *args], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=600, **kw)


def new_delta(tag):
    path = f"{WORK}/{tag}.k8d"
    if os.path.exists(path):
        os.unlink(path)
    sh([A.kosa8, "disk", "create", path, "--base", A.image])
    return path


def kosa8_vm(delta, cmdline, mem="1G"):
    return [A.kosa8, "vm", "--no-emulate", "--kernel", A.kernel, "--mem", mem, "--cpus", "1",
            "--disk", delta, "--cmdline", f"{ROOT} {cmdline}"]


def qemu_vm(cmdline, mem="1G", memfd=False):
    m = ["-m", mem]
    # QEMU appends its virtio-mmio device to the end of the command line,
    # which would land among init's arguments after "--": declare it here
    # (where QEMU 7.2's microvm puts its first virtio-mmio device).
    machine = "microvm,acpi=off,auto-kernel-cmdline=off"
    if memfd:
        machine += ",memory-backend=ram"
        m += ["-object", f"memory-backend-memfd,id=ram,size={mem}"]
    return [A.qemu, "-M", machine, "-accel", "kvm", "-cpu", "host", "-smp", "1", *m,
            "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-serial", "stdio",
            "-kernel", A.kernel,
            "-drive", f"id=root,file={A.image},format=raw,if=none,snapshot=on",
            "-device", "virtio-blk-device,drive=root",
            # microvm has no keyboard controller: reboot=k would hang for
            # long in the guest's reset fallbacks, a triple fault is instant.
            "-append", f"{BASE_CMDLINE.replace('reboot=k', 'reboot=t')} {QEMU_MMIO} {ROOT} {cmdline}"]


def timed(cmd, timeout=900):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    return time.monotonic() - t0, p


def med(xs):
    return statistics.median(xs) if xs else float("nan")


# ---------------------------------------------------------------- run

def bench_run(rounds):
    res = {"kosa8 run --rm -- true": [], "kosa8 vm, init=/usr/bin/true": [],
           "qemu microvm, init=/usr/bin/true": []}
    for i in range(rounds):
        t, p = timed([A.kosa8, "run", "--rm", "--", "true"])
        if p.returncode != 0:
            raise RuntimeError(f"kosa8 run: {p.returncode} {p.stderr.decode()[-500:]}")
        res["kosa8 run --rm -- true"].append(t)
        d = new_delta("true")
        t, p = timed(kosa8_vm(d, "init=/usr/bin/true"))
        if b"Attempted to kill init" not in p.stdout + p.stderr:
            raise RuntimeError(f"kosa8 vm init=true: {p.returncode} {p.stdout.decode()[-500:]}")
        res["kosa8 vm, init=/usr/bin/true"].append(t)
        t, p = timed(qemu_vm("init=/usr/bin/true"))
        if b"Attempted to kill init" not in p.stdout + p.stderr:
            raise RuntimeError(f"qemu init=true: {p.returncode} {p.stdout.decode()[-500:]}")
        res["qemu microvm, init=/usr/bin/true"].append(t)
        log(f"run round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in res.items()))
    print("\n## `kosa8 run -- true` end to end\n")
    print("| what | wall, s (median / min / max) | runs |")
    print("|---|---|---|")
    for k, v in res.items():
        print(f"| {k} | {med(v):.2f} / {min(v):.2f} / {max(v):.2f} | {len(v)} |")
    r = med(res["kosa8 run --rm -- true"]) / med(res["kosa8 vm, init=/usr/bin/true"])
    q = med(res["kosa8 run --rm -- true"]) / med(res["qemu microvm, init=/usr/bin/true"])
    print(f"\n`kosa8 run` / bare kosa8 boot of the same image: **{r:.2f}x**; "
          f"`kosa8 run` / bare QEMU boot: **{q:.2f}x** (medians).")


# ---------------------------------------------------------------- blk

FIO_JOBS = [("seq write 1 MiB", "write", "1m"), ("seq read 1 MiB", "read", "1m"),
            ("rand write 4 KiB", "randwrite", "4k"), ("rand read 4 KiB", "randread", "4k")]


def fio_script():
    # Kernel command line: no double quotes inside, under 2 KiB.
    jobs = " ".join(f"{rw}:{bs}" for _, rw, bs in FIO_JOBS)
    return ("mount -t proc proc /proc; for j in " + jobs + "; do fio --name=$j --rw=${j%:*} "
            "--bs=${j#*:} --filename=/var/tmp/bench.fio --size=256m --direct=1 "
            "--ioengine=libaio --iodepth=16 --runtime=" + str(A.fio_seconds) + " --time_based "
            "--output-format=terse --terse-version=3 | sed s/^/FIO:/; done; rm -f /var/tmp/bench.fio")


def parse_fio(out):
    rows = {}
    for line in out.decode(errors="replace").splitlines():
        line = line.strip()
        if not line.startswith("FIO:"):
            continue
        f = line[4:].split(";")
        name = f[2]
        rw = name.split(":")[0]
        # MiB/s, IOPS, and the slowest completion in ms (terse v3: bandwidth
        # KiB/s, IOPS, then clat max in us 8 fields on): a stalled request
        # shows there, where the averages only dip.
        o = 0 if "read" in rw else 41
        rows[rw] = (float(f[6 + o]) / 1024, float(f[7 + o]), round(float(f[14 + o]) / 1000, 1))
    return rows


def bench_blk(rounds):
    init = f'init=/bin/bash -- -c "{fio_script()}"'
    res = {"kosa8": [], "qemu": []}
    for i in range(rounds):
        order = [("kosa8", lambda: kosa8_vm(new_delta("blk"), init)), ("qemu", lambda: qemu_vm(init))]
        if i % 2:
            order.reverse()
        for name, cmd in order:
            # A VM whose fio output is cut short is run once more, said in
            # the log: in the emulated helper a guest (kosa8's or QEMU's)
            # sometimes dies of the emulator's faults (testbed/README.md).
            for attempt in (1, 2):
                t, p = timed(cmd())
                rows = parse_fio(p.stdout + p.stderr)
                if len(rows) == len(FIO_JOBS):
                    break
                msg = f"{name} fio: {len(rows)} results\n{p.stdout.decode()[-1500:]}"
                if attempt == 2:
                    raise RuntimeError(msg)
                log(f"blk round {i + 1} {name}: run again, " + msg.splitlines()[0])
            res[name].append(rows)
            log(f"blk round {i + 1} {name} ({t:.0f} s): {rows}")
    print("\n## virtio-blk in the guest (fio, O_DIRECT, libaio, qd 16, "
          f"{A.fio_seconds} s per job, median of {rounds})\n")
    print("| job | kosa8 MiB/s | kosa8 IOPS | QEMU MiB/s | QEMU IOPS | kosa8 / QEMU |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, rw, _ in FIO_JOBS:
        k = [r[rw] for r in res["kosa8"]]
        q = [r[rw] for r in res["qemu"]]
        km, ki = med([x[0] for x in k]), med([x[1] for x in k])
        qm, qi = med([x[0] for x in q]), med([x[1] for x in q])
        print(f"| {label} | {km:.1f} | {ki:.0f} | {qm:.1f} | {qi:.0f} | {km / qm:.2f} |")


# ---------------------------------------------------------------- vsock

VSOCK_GUEST = r'''
import os, socket, sys
n = int(sys.argv[1])
def one(port, send):
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((socket.VMADDR_CID_ANY, port))
    s.listen(1)
    while True:
        c, _ = s.accept()
        if send:
            buf = b"\0" * (1 << 16)
            left = n
            while left:
                left -= c.send(buf[:min(left, len(buf))])
        else:
            got = 0
            while True:
                b = c.recv(1 << 16)
                if not b:
                    break
                got += len(b)
            c.sendall(b"%d\n" % got)
        c.close()
if os.fork() == 0:
    one(7001, True)
one(7000, False)
'''


def vsock_connect(path, port):
    for _ in range(600):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.sendall(b"CONNECT %d\n" % port)
            line = b""
            while not line.endswith(b"\n"):
                b = s.recv(1)
                if not b:
                    raise ConnectionResetError
                line += b
            if line.startswith(b"OK "):
                return s
        except (ConnectionRefusedError, ConnectionResetError, FileNotFoundError):
            pass
        s.close()
        time.sleep(0.1)
    raise RuntimeError(f"no guest listener on vsock port {port}")


def bench_vsock(rounds, nbytes):
    name = "k8bench-vsock"
    k8("rm", "-f", name)
    r = k8("create", "--name", name, "--mem", "1G")
    r = r.returncode == 0 and k8("start", name)
    if not r or r.returncode != 0:
        raise RuntimeError(f"sandbox start failed: {r.stderr.decode() if r else ''}")
    try:
        run_dir = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/kosa8-{os.getuid()}",
                               "kosa8" if os.environ.get("XDG_RUNTIME_DIR") else "", name)
        path = os.path.join(run_dir, "vm", "vsock.sock")
        r = k8("exec", "-u", "root", name, "--", "sh", "-c",
               'setsid -f python3 -c "$1" "$2" </dev/null >/dev/null 2>&1', "sh", VSOCK_GUEST,
               str(nbytes))
        if r.returncode != 0:
            raise RuntimeError(f"guest listener: {r.stderr.decode()}")
        res = {"host -> guest (vsock)": [], "guest -> host (vsock)": [],
               "guest -> host (kosa8 exec stdout)": []}
        chunk = b"\0" * (1 << 16)
        for i in range(rounds):
            s = vsock_connect(path, 7000)
            t0 = time.monotonic()
            left = nbytes
            while left:
                left -= s.send(chunk[:min(left, len(chunk))])
            s.shutdown(socket.SHUT_WR)
            got = int(s.makefile("rb").readline())
            t = time.monotonic() - t0
            s.close()
            if got != nbytes:
                raise RuntimeError(f"guest got {got} of {nbytes}")
            res["host -> guest (vsock)"].append(nbytes / t / 2**20)
            s = vsock_connect(path, 7001)
            t0 = time.monotonic()
            got = 0
            while True:
                b = s.recv(1 << 16)
                if not b:
                    break
                got += len(b)
            t = time.monotonic() - t0
            s.close()
            if got != nbytes:
                raise RuntimeError(f"host got {got} of {nbytes}")
            res["guest -> host (vsock)"].append(nbytes / t / 2**20)
            t0 = time.monotonic()
            p = subprocess.run([A.kosa8, "exec", name, "--", "head", "-c", str(nbytes), "/dev/zero"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, timeout=900)
            t = time.monotonic() - t0
            if len(p.stdout) != nbytes:
                raise RuntimeError(f"exec stdout gave {len(p.stdout)} bytes")
            res["guest -> host (kosa8 exec stdout)"].append(nbytes / t / 2**20)
            log(f"vsock round {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} MiB/s" for k, v in res.items()))
    finally:
        k8("rm", "-f", name)
    print(f"\n## vsock stream, {nbytes >> 20} MiB each way (median of {rounds})\n")
    print("| direction | MiB/s (median / min / max) |")
    print("|---|---|")
    for k, v in res.items():
        print(f"| {k} | {med(v):.1f} / {min(v):.1f} / {max(v):.1f} |")


# ---------------------------------------------------------------- mem

def mem_of(pid, guest_map):
    """RSS, PSS of the process and RSS of its guest-RAM mapping, KiB."""
    rss = pss = guest = 0
    cur_guest = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                cur_guest = guest_map in line
            elif line.startswith("Rss:"):
                kib = int(line.split()[1])
                rss += kib
                guest += kib if cur_guest else 0
            elif line.startswith("Pss:"):
                pss += int(line.split()[1])
    return rss, pss, guest


def wait_console(p, marker, timeout):
    buf = b""
    end = time.monotonic() + timeout
    os.set_blocking(p.stdout.fileno(), False)
    while time.monotonic() < end:
        try:
            b = os.read(p.stdout.fileno(), 65536)
        except BlockingIOError:
            b = None
        if b:
            buf += b
            if marker in buf:
                return
        elif b == b"" or p.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{marker!r} not seen: {buf[-800:]!r}")


def bench_mem(settle):
    rows = []
    name = "k8bench-mem"
    k8("rm", "-f", name)
    r = k8("create", "--name", name, "--mem", "1G")
    r = r.returncode == 0 and k8("start", name)
    if not r or r.returncode != 0:
        raise RuntimeError("sandbox start failed")
    try:
        time.sleep(settle)
        sup = int(sh(["pgrep", "-f", f"__supervise {name} "]).stdout.split()[0])
        vmm = int(sh(["pgrep", "-f", f"kosa8-vmm .*--jail.*/sandboxes/{name}/"]).stdout.split()[0])
        v, s = mem_of(vmm, "kosa8-guest-ram"), mem_of(sup, "kosa8-guest-ram")
        rows.append(("kosa8 sandbox (VMM + supervisor)", v[0] + s[0], v[1] + s[1], v[2]))
        log(f"mem sandbox: vmm {v} supervisor {s}")
    finally:
        k8("rm", "-f", name)
    # init prints a line, then sleeps: the guest is up and quiet.
    init = 'init=/bin/bash -- -c "echo K8-IDLE; exec sleep 3600"'
    for label, cmd, gmap in (("kosa8 vm (VMM alone)", kosa8_vm(new_delta("mem"), init), "kosa8-guest-ram"),
                             ("qemu microvm", qemu_vm(init, memfd=True), "/memfd:")):
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        try:
            wait_console(p, b"K8-IDLE", 300)
            time.sleep(settle)
            m = mem_of(p.pid, gmap)
            rows.append((label, *m))
            log(f"mem {label}: {m}")
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
    print(f"\n## Idle memory, 1 GiB guest, {settle} s after start\n")
    print("| what | RSS, MiB | PSS, MiB | guest RAM resident, MiB | RSS beyond guest RAM, MiB |")
    print("|---|---:|---:|---:|---:|")
    for label, rss, pss, guest in rows:
        print(f"| {label} | {rss / 1024:.1f} | {pss / 1024:.1f} | {guest / 1024:.1f} | "
              f"{(rss - guest) / 1024:.1f} |")


def main():
    global A, WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--kosa8", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--qemu", default=shutil.which("qemu-system-x86_64"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fio-seconds", type=int, default=15)
    ap.add_argument("--vsock-mib", type=int, default=256)
    ap.add_argument("--only", default="run,blk,vsock,mem")
    A = ap.parse_args()
    A.kosa8 = os.path.abspath(A.kosa8)
    os.environ.setdefault("KOSA8_KERNEL", A.kernel)
    WORK = tempfile.mkdtemp(prefix="k8bench-")
    try:
        for part in A.only.split(","):
            try:
                if part == "run":
                    bench_run(A.rounds)
                elif part == "blk":
                    bench_blk(max(2, A.rounds - 1))
                elif part == "vsock":
                    bench_vsock(A.rounds, A.vsock_mib << 20)
                elif part == "mem":
                    bench_mem(20)
            except Exception as e:  # a failed part is reported, not hidden
                print(f"\n## {part}: FAILED\n\n    {e}\n", flush=True)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
