#!/usr/bin/env python3
"""Checkpoint and restore, kosa8 against QEMU, same guest, same run.

Runs where /dev/kvm works (bench/checkpoint/run.sh puts it in the helper VM
when the host has none).  For each guest size: boot the test initramfs in
k8.test=counter mode, fill part of guest RAM with random data (so there is
something to write), then

  kosa8: `kosa8 vmctl SOCKET checkpoint DIR` (the guest is paused for it),
         then `kosa8 vm --restore DIR` until the guest prints again;
  QEMU:  QMP `migrate` to `exec:cat > FILE` (live: the guest runs during
         most of it, and is stopped for "downtime"), then `-incoming
         "exec:cat FILE"` until the guest prints again.

Prints a Markdown table.  Times are wall-clock seconds measured here, plus
what each VMM reports about itself (kosa8: paused_ms; QEMU: downtime).
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

COUNT = re.compile(rb"^k8: count=(\d+)\r?$", re.M)


def wait_output(path, pattern, timeout, after=0):
    """Waits until pattern (bytes regex) matches the file past offset after."""
    end = time.monotonic() + timeout
    rx = re.compile(pattern, re.M)
    while time.monotonic() < end:
        with open(path, "rb") as f:
            f.seek(after)
            m = rx.search(f.read())
        if m:
            return m
        time.sleep(0.01)
    raise TimeoutError(f"{pattern!r} not seen in {path} within {timeout}s")


def size_of(path):
    return os.path.getsize(path) if os.path.exists(path) else 0


def disk_use(path):
    if os.path.isdir(path):
        return sum(os.stat(os.path.join(path, f)).st_blocks * 512 for f in os.listdir(path))
    return os.stat(path).st_blocks * 512


def stop(p):
    if p.poll() is None:
        p.kill()
    p.wait()


def fill_guest(p, out, mib):
    cmd = f"dd if=/dev/urandom of=/fill bs=1M count={mib} 2>/dev/null; echo k8: filled\n"
    p.stdin.write(cmd.encode())
    p.stdin.flush()
    wait_output(out, rb"^k8: filled", 600)


def kosa8_round(a, work, mem, fill):
    out, ctl, cp = f"{work}/k.out", f"{work}/k.ctl", f"{work}/k.cp"
    with open(out, "wb") as o:
        p = subprocess.Popen([a.kosa8, "vm", "--no-emulate", "--kernel", a.kernel, "--initrd",
                              a.initrd, "--mem", f"{mem}M", "--cmdline", "k8.test=counter",
                              "--control", ctl], stdin=subprocess.PIPE, stdout=o,
                             stderr=subprocess.STDOUT)
    try:
        wait_output(out, rb"^k8: count=10\r?$", 300)
        fill_guest(p, out, fill)
        t0 = time.monotonic()
        r = subprocess.run([a.kosa8, "vmctl", ctl, "checkpoint", cp], capture_output=True)
        t_ckpt = time.monotonic() - t0
        ans = r.stdout.decode()
        if r.returncode != 0:
            raise RuntimeError(f"kosa8 checkpoint failed: {ans} {r.stderr.decode()}")
    finally:
        stop(p)
    paused = float(re.search(r"paused_ms=([0-9.]+)", ans).group(1))
    out2 = f"{work}/k.out2"
    with open(out2, "wb") as o:
        t0 = time.monotonic()
        p = subprocess.Popen([a.kosa8, "-v", "vm", "--no-emulate", "--restore", cp],
                             stdin=subprocess.PIPE, stdout=o, stderr=subprocess.STDOUT)
    try:
        wait_output(out2, rb"^k8: count=\d+\r?$", 300)
        t_restore = time.monotonic() - t0
    finally:
        stop(p)
    m = re.search(rb"in ([0-9.]+) ms \(state file read", open(out2, "rb").read())
    return {"ckpt_s": t_ckpt, "paused_ms": paused, "restore_s": t_restore,
            "restore_vmm_ms": float(m.group(1)) if m else None, "bytes": disk_use(cp)}


def qmp(sock_path):
    s = socket.socket(socket.AF_UNIX)
    for _ in range(600):
        try:
            s.connect(sock_path)
            break
        except OSError:
            time.sleep(0.05)
    f = s.makefile("rwb")
    f.readline()  # greeting

    def cmd(name, **args):
        f.write(json.dumps({"execute": name, "arguments": args}).encode() + b"\n")
        f.flush()
        while True:
            r = json.loads(f.readline())
            if "return" in r or "error" in r:
                return r
    cmd("qmp_capabilities")
    return s, cmd


def qemu_args(a, mem, qmp_path):
    return [a.qemu, "-M", "microvm,acpi=off", "-accel", "kvm", "-cpu", "host", "-m", f"{mem}M",
            "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none",
            "-serial", "stdio", "-kernel", a.kernel, "-initrd", a.initrd,
            "-append", "console=ttyS0 reboot=k panic=-1 k8.test=counter",
            "-qmp", f"unix:{qmp_path},server=on,wait=off"]


def qemu_round(a, work, mem, fill):
    out, q, img = f"{work}/q.out", f"{work}/q.qmp", f"{work}/q.img"
    with open(out, "wb") as o:
        p = subprocess.Popen(qemu_args(a, mem, q), stdin=subprocess.PIPE, stdout=o,
                             stderr=subprocess.STDOUT)
    try:
        wait_output(out, rb"^k8: count=10\r?$", 300)
        fill_guest(p, out, fill)
        s, cmd = qmp(q)
        t0 = time.monotonic()
        r = cmd("migrate", uri=f"exec:cat > {img}")
        if "error" in r:
            raise RuntimeError(f"QEMU migrate: {r}")
        while True:
            st = cmd("query-migrate")["return"]
            if st.get("status") in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.01)
        t_ckpt = time.monotonic() - t0
        if st["status"] != "completed":
            raise RuntimeError(f"QEMU migrate: {st}")
        s.close()
    finally:
        stop(p)
    out2, q2 = f"{work}/q.out2", f"{work}/q2.qmp"
    with open(out2, "wb") as o:
        t0 = time.monotonic()
        p = subprocess.Popen(qemu_args(a, mem, q2) + ["-incoming", f"exec:cat {img}"],
                             stdin=subprocess.PIPE, stdout=o, stderr=subprocess.STDOUT)
    try:
        wait_output(out2, rb"^k8: count=\d+\r?$", 300)
        t_restore = time.monotonic() - t0
    finally:
        stop(p)
    return {"ckpt_s": t_ckpt, "paused_ms": float(st.get("downtime", 0)), "restore_s": t_restore,
            "restore_vmm_ms": None, "bytes": disk_use(img)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kosa8", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--qemu", default=shutil.which("qemu-system-x86_64"))
    ap.add_argument("--sizes", default="256,1024", help="guest MiB, comma-separated")
    ap.add_argument("--fill", type=float, default=0.25, help="fraction of RAM filled")
    a = ap.parse_args()
    rows = []
    for mem in [int(x) for x in a.sizes.split(",")]:
        fill = max(1, int(mem * a.fill))
        for name, fn in (("kosa8", kosa8_round), ("qemu", qemu_round)):
            if name == "qemu" and not a.qemu:
                continue
            work = tempfile.mkdtemp(prefix="k8bench-")
            try:
                r = fn(a, work, mem, fill)
                rows.append((mem, fill, name, r))
                print(f"# {name} {mem} MiB: {r}", flush=True)
            except Exception as e:  # a failed round is reported, not hidden
                rows.append((mem, fill, name, {"error": str(e)}))
                print(f"# {name} {mem} MiB: FAILED {e}", flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    print("| guest | filled | VMM | checkpoint wall, s | guest stopped, ms | restore to guest output, s | restore in VMM, ms | on disk, MiB |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for mem, fill, name, r in rows:
        if "error" in r:
            print(f"| {mem} MiB | {fill} MiB | {name} | failed: {r['error']} | | | | |")
            continue
        vmm = f"{r['restore_vmm_ms']:.1f}" if r["restore_vmm_ms"] is not None else "n/a"
        print(f"| {mem} MiB | {fill} MiB | {name} | {r['ckpt_s']:.3f} | {r['paused_ms']:.1f} | "
              f"{r['restore_s']:.3f} | {vmm} | {r['bytes'] / 2**20:.1f} |")


if __name__ == "__main__":
    main()
