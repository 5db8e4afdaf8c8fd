#!/usr/bin/env python3
"""Checkpoint, restore, fork and incremental checkpoints: kosa8 against QEMU,
same guest, same run.

Runs where /dev/kvm works (bench/checkpoint/run.sh puts it in the helper VM
when the host has none).  For each guest size: boot the test initramfs in
k8.test=counter mode, fill part of guest RAM with random data (so there is
something to write), then

  kosa8: `kosa8 vmctl SOCKET checkpoint DIR` (the guest is paused for it),
         `kosa8 vm --restore DIR` started while the parent runs on (a fork),
         a small change in the guest, a second checkpoint (a memory layer
         of the pages dirtied since), a fork from that; after the parent is
         stopped, a restore of the first checkpoint;
  QEMU:  QMP `migrate` to `exec:cat > FILE` (live: the guest runs during
         most of it, and is stopped for "downtime"), `cont`, the same
         change, a second migrate, then `-incoming "exec:cat FILE"`.

Then N copies of one saved guest run at once, each writing a little, and
their memory (PSS) is summed, for both VMMs.

Prints Markdown tables.  Times are wall-clock seconds measured here, plus
what each VMM reports about itself (kosa8: paused_ms, total_ms, restore ms;
QEMU: downtime).
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


def shell(p, out, cmd, done, timeout=600):
    """Runs cmd in the counter guest's shell, waits for the line done."""
    size = size_of(out)
    p.stdin.write(f"{cmd}; echo {done}\n".encode())
    p.stdin.flush()
    wait_output(out, rb"^" + done.encode() + rb"\r?$", timeout, size)


def small_change(a, p, out):
    """The change both VMMs' guests make before their second checkpoint."""
    shell(p, out, f"dd if=/dev/urandom of=/small bs=1M count={a.change} 2>/dev/null", "k8: changed")


def vmctl_checkpoint(a, ctl, cp):
    """kosa8 vmctl checkpoint: wall seconds and the VMM's answer as a dict."""
    t0 = time.monotonic()
    r = subprocess.run([a.kosa8, "vmctl", ctl, "checkpoint", cp], capture_output=True)
    wall = time.monotonic() - t0
    ans = r.stdout.decode()
    if r.returncode != 0:
        raise RuntimeError(f"kosa8 checkpoint failed: {ans} {r.stderr.decode()}")
    f = dict(re.findall(r"(\w+)=(\S+)", ans))
    return wall, {"paused_ms": float(f["paused_ms"]), "total_ms": float(f["total_ms"]),
                  "memory_bytes": int(f["memory_bytes"]), "memory": f["memory"]}


def vmctl_live(ctl, cp):
    """`checkpoint-live` on the VMM's control socket (what `kosa8 fork` of a
    running sandbox asks for): the VMM's answer as a dict, the frozen
    memory's fd it passed, and the socket, whose next answer ("status")
    comes once the VMM has written the memory file too."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(ctl)
    # docs/control-protocol.md: JSON lines, version 1.
    s.sendall(json.dumps({"v": 1, "op": "checkpoint", "dir": cp, "live": True}).encode() + b"\n")
    data, fds, _, _ = socket.recv_fds(s, 4096, 1)
    while not data.endswith(b"\n"):
        more = s.recv(4096)
        if not more:
            break
        data += more
    try:
        ans = json.loads(data.decode())
    except ValueError:
        ans = {}
    if not ans.get("ok") or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise RuntimeError(f"kosa8 checkpoint live failed: {data!r}")
    f = dict(re.findall(r"(\w+)=(\S+)", ans.get("message", "")))
    return {"paused_ms": float(ans["paused_ms"]), "total_ms": float(f["total_ms"]),
            "live": int(ans["live"])}, fds[0], s


def kosa8_start_restore(a, cp, out, memfd=None):
    extra = ["--restore-memfd", str(memfd)] if memfd is not None else []
    with open(out, "wb") as o:
        return subprocess.Popen([a.kosa8, "-v", "vm", "--no-emulate", "--restore", cp] + extra,
                                stdin=subprocess.PIPE, stdout=o, stderr=subprocess.STDOUT,
                                pass_fds=(memfd,) if memfd is not None else ())


def kosa8_restore(a, cp, out, memfd=None):
    """Restores cp until the guest prints: wall seconds and the VMM's own ms
    (state file read to vCPUs ready)."""
    t0 = time.monotonic()
    p = kosa8_start_restore(a, cp, out, memfd)
    try:
        wait_output(out, rb"^k8: count=\d+\r?$", 300)
        wall = time.monotonic() - t0
    finally:
        stop(p)
    m = re.search(rb"in ([0-9.]+) ms \(state file read", open(out, "rb").read())
    return wall, float(m.group(1)) if m else None


def kosa8_round(a, work, mem, fill):
    """Full checkpoint; a fork from it while the parent runs on; a small
    change; an incremental checkpoint of it; a fork from that layer."""
    out, ctl, cp, cp2 = f"{work}/k.out", f"{work}/k.ctl", f"{work}/k.cp", f"{work}/k.cp2"
    cp3 = f"{work}/k.cp3"
    with open(out, "wb") as o:
        p = subprocess.Popen([a.kosa8, "vm", "--no-emulate", "--kernel", a.kernel, "--initrd",
                              a.initrd, "--mem", f"{mem}M", "--cmdline", "k8.test=counter",
                              "--control", ctl], stdin=subprocess.PIPE, stdout=o,
                             stderr=subprocess.STDOUT)
    try:
        wait_output(out, rb"^k8: count=10\r?$", 300)
        fill_guest(p, out, fill)
        t_ckpt, c1 = vmctl_checkpoint(a, ctl, cp)
        fork_s, fork_vmm = kosa8_restore(a, cp, f"{work}/k.fork1")
        small_change(a, p, out)
        t_inc, c2 = vmctl_checkpoint(a, ctl, cp2)
        fork2_s, fork2_vmm = kosa8_restore(a, cp2, f"{work}/k.fork2")
        # A live fork, as `kosa8 fork` of a running sandbox makes: memory
        # frozen and passed by fd, the file written while the child starts.
        c3, memfd, live_sock = vmctl_live(ctl, cp3)
        t_ans = time.monotonic()
        try:
            fork3_s, fork3_vmm = kosa8_restore(a, cp3, f"{work}/k.fork3", memfd)
        finally:
            os.close(memfd)
        live_sock.sendall(b'{"v":1,"op":"status"}\n')
        live_sock.recv(4096)
        live_write_s = time.monotonic() - t_ans
        live_sock.close()
    finally:
        stop(p)
    t_restore, restore_vmm = kosa8_restore(a, cp, f"{work}/k.out2")
    return {"ckpt_s": t_ckpt, "paused_ms": c1["paused_ms"], "ckpt_vmm_ms": c1["total_ms"],
            "restore_s": t_restore, "restore_vmm_ms": restore_vmm, "bytes": disk_use(cp),
            "fork_s": fork_s, "fork_vmm_ms": c1["total_ms"] + (fork_vmm or 0),
            "inc_s": t_inc, "inc_paused_ms": c2["paused_ms"], "inc_bytes": c2["memory_bytes"],
            "inc_kind": c2["memory"], "inc_disk": disk_use(cp2),
            "fork2_vmm_ms": c2["total_ms"] + (fork2_vmm or 0), "inc_vmm_ms": c2["total_ms"],
            "fork_restore_ms": fork_vmm, "fork2_restore_ms": fork2_vmm,
            "live_vmm_ms": c3["total_ms"] + (fork3_vmm or 0), "live_ckpt_ms": c3["total_ms"],
            "live_paused_ms": c3["paused_ms"], "live_restore_ms": fork3_vmm,
            "live_s": fork3_s, "live_file_s": live_write_s, "live": c3["live"]}


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


def qemu_migrate(cmd, img):
    """QMP migrate to a file until completed: wall seconds, downtime ms."""
    t0 = time.monotonic()
    r = cmd("migrate", uri=f"exec:cat > {img}")
    if "error" in r:
        raise RuntimeError(f"QEMU migrate: {r}")
    while True:
        st = cmd("query-migrate")["return"]
        if st.get("status") in ("completed", "failed", "cancelled"):
            break
        time.sleep(0.01)
    if st["status"] != "completed":
        raise RuntimeError(f"QEMU migrate: {st}")
    return time.monotonic() - t0, float(st.get("downtime", 0))


def qemu_start_incoming(a, mem, img, out, q):
    with open(out, "wb") as o:
        return subprocess.Popen(qemu_args(a, mem, q) + ["-incoming", f"exec:cat {img}"],
                                stdin=subprocess.PIPE, stdout=o, stderr=subprocess.STDOUT)


def qemu_round(a, work, mem, fill):
    """Migrate to a file (QEMU's save), the guest continued (cont), the same
    small change, a second migrate (QEMU has no incremental file save), then
    -incoming from the first file (its restore)."""
    out, q, img, img2 = f"{work}/q.out", f"{work}/q.qmp", f"{work}/q.img", f"{work}/q2.img"
    with open(out, "wb") as o:
        p = subprocess.Popen(qemu_args(a, mem, q), stdin=subprocess.PIPE, stdout=o,
                             stderr=subprocess.STDOUT)
    try:
        wait_output(out, rb"^k8: count=10\r?$", 300)
        fill_guest(p, out, fill)
        s, cmd = qmp(q)
        t_ckpt, downtime = qemu_migrate(cmd, img)
        cmd("cont")
        small_change(a, p, out)
        t_inc, inc_down = qemu_migrate(cmd, img2)
        s.close()
    finally:
        stop(p)
    t0 = time.monotonic()
    p = qemu_start_incoming(a, mem, img, f"{work}/q.out2", f"{work}/q2.qmp")
    try:
        wait_output(f"{work}/q.out2", rb"^k8: count=\d+\r?$", 300)
        t_restore = time.monotonic() - t0
    finally:
        stop(p)
    return {"ckpt_s": t_ckpt, "paused_ms": downtime, "restore_s": t_restore,
            "restore_vmm_ms": None, "bytes": disk_use(img), "fork_s": t_ckpt + t_restore,
            "inc_s": t_inc, "inc_paused_ms": inc_down, "inc_bytes": disk_use(img2),
            "inc_kind": "full", "inc_disk": disk_use(img2)}


def pss_kib(pid):
    """Proportional set size of a process (and its children: QEMU's exec:cat
    is gone by then): shared pages counted once across all sharers."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return int(re.search(r"^Pss:\s+(\d+) kB", f.read(), re.M).group(1))


def forks_round(a, work, name, n, mem, fill, write):
    """One sandbox of mem MiB (fill MiB of it written), saved; n copies
    started from the save, each writing write MiB; every copy's PSS."""
    out, ctl, cp, q = f"{work}/f.out", f"{work}/f.ctl", f"{work}/f.cp", f"{work}/f.qmp"
    if name == "kosa8":
        argv = [a.kosa8, "vm", "--no-emulate", "--kernel", a.kernel, "--initrd", a.initrd,
                "--mem", f"{mem}M", "--cmdline", "k8.test=counter", "--control", ctl]
    else:
        argv = qemu_args(a, mem, q)
    with open(out, "wb") as o:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=o, stderr=subprocess.STDOUT)
    kids = []
    try:
        wait_output(out, rb"^k8: count=10\r?$", 300)
        fill_guest(p, out, fill)
        one = pss_kib(p.pid)
        if name == "kosa8":
            vmctl_checkpoint(a, ctl, cp)
        else:
            s, cmd = qmp(q)
            qemu_migrate(cmd, cp)
            s.close()
        stop(p)
        for i in range(n):
            kout = f"{work}/f.kid{i}"
            if name == "kosa8":
                k = kosa8_start_restore(a, cp, kout)
            else:
                k = qemu_start_incoming(a, mem, cp, kout, f"{work}/f{i}.qmp")
            kids.append(k)
            wait_output(kout, rb"^k8: count=\d+\r?$", 600)
            # The copy's counter is stopped ($! in the guest's shell): ten
            # guests printing ten lines a second would only load the CPUs.
            shell(k, kout, f"kill $!; dd if=/dev/urandom of=/mine bs=1M count={write} 2>/dev/null",
                  "k8: wrote")
        time.sleep(2)
        for i, k in enumerate(kids):
            if k.poll() is not None:
                tail = open(f"{work}/f.kid{i}", "rb").read()[-400:].decode(errors="replace")
                raise RuntimeError(f"copy {i} ended (status {k.returncode}): {tail!r}")
        total = sum(pss_kib(k.pid) for k in kids)
    finally:
        stop(p)
        for k in kids:
            stop(k)
    return {"one_kib": one, "forks_kib": total, "save_bytes": disk_use(cp)}


def fmt_row(cells):
    return "| " + " | ".join(cells) + " |"


def print_tables(rows, forks, a):
    print("### Checkpoint and restore")
    print()
    print("| guest | filled | VMM | checkpoint wall, s | guest stopped, ms | restore to guest output, s | restore in VMM, ms | on disk, MiB |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for mem, fill, name, r in rows:
        if "error" in r:
            print(f"| {mem} MiB | {fill} MiB | {name} | failed: {r['error']} | | | | |")
            continue
        vmm = f"{r['restore_vmm_ms']:.1f}" if r["restore_vmm_ms"] is not None else "n/a"
        print(fmt_row([f"{mem} MiB", f"{fill} MiB", name, f"{r['ckpt_s']:.3f}", f"{r['paused_ms']:.1f}",
                       f"{r['restore_s']:.3f}", vmm, f"{r['bytes'] / 2**20:.1f}"]))
    print()
    print("### Fork of the running guest")
    print()
    print("kosa8: the VMM's own times, checkpoint (request to guest resumed) plus the child's")
    print("restore (state file read to vCPUs ready), the parent running on.  Live: what")
    print("`kosa8 fork` of a running sandbox does (`checkpoint-live`: memory frozen, not")
    print("written, and passed to the child by fd; the parent writes the file afterwards).")
    print("Then through a first, full checkpoint written before the child starts, and from")
    print(f"an incremental one after {a.change} MiB written.  QEMU: save (migrate to a file)")
    print("plus restore (-incoming) to the child's first console line.")
    print()
    print("| guest | kosa8 live fork, ms | of it, child's restore, ms | memory file after it, s | kosa8 fork via a full checkpoint, ms | from a layer, ms | QEMU save + restore, s | QEMU / kosa8 live | QEMU / kosa8 full | QEMU / kosa8 layer |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    by = {(m, n): r for m, _, n, r in rows}
    for mem in sorted({m for m, _, _, _ in rows}):
        k, q = by.get((mem, "kosa8"), {}), by.get((mem, "qemu"), {})
        if "fork_vmm_ms" not in k:
            continue
        qs = f"{q['fork_s']:.3f}" if "fork_s" in q else "n/a"
        ratios = [f"{q['fork_s'] * 1000 / k[f]:.1f}x" if "fork_s" in q else "n/a"
                  for f in ("live_vmm_ms", "fork_vmm_ms", "fork2_vmm_ms")]
        print(fmt_row([f"{mem} MiB", f"{k['live_vmm_ms']:.1f}", f"{k['live_restore_ms'] or 0:.1f}",
                       f"{k['live_file_s']:.3f}", f"{k['fork_vmm_ms']:.1f}",
                       f"{k['fork2_vmm_ms']:.1f}", qs] + ratios))
    print()
    print("### Second checkpoint after a small change")
    print()
    print(f"The guest writes {a.change} MiB of random data after the first checkpoint (or")
    print("QEMU's first migrate and `cont`); then the second one.")
    print()
    print("| guest | VMM | kind | memory written, MiB | guest stopped, ms | wall, s |")
    print("|---|---|---|---:|---:|---:|")
    for mem, _, name, r in rows:
        if "inc_s" not in r:
            continue
        print(fmt_row([f"{mem} MiB", name, r["inc_kind"], f"{r['inc_bytes'] / 2**20:.1f}",
                       f"{r['inc_paused_ms']:.1f}", f"{r['inc_s']:.3f}"]))
    if not forks:
        return
    print()
    print(f"### {a.forks} copies of one saved {a.fork_mem} MiB guest, running at once")
    print()
    print(f"One guest of {a.fork_mem} MiB ({a.fork_mem // 4} MiB of it filled) is saved and stopped;")
    print(f"{a.forks} copies are started from the save and each writes {a.fork_write} MiB.  Memory")
    print("is the sum of the copies' PSS (/proc/PID/smaps_rollup: a page shared by k")
    print("processes counts 1/k to each), against one running guest's PSS before the save.")
    print("The save itself (kosa8's checkpoint, which the copies map; QEMU's migration file,")
    print("read once and no longer needed) is shown apart: in the helper VM it lies in RAM")
    print("(tmpfs), on a host with a disk in the reclaimable page cache.")
    print()
    print("| VMM | one guest, MiB | all copies, MiB | bound: 2x one + written, MiB | copies / one | the save, MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in forks:
        if "error" in r:
            print(f"| {name} | failed: {r['error']} | | | | |")
            continue
        one, tot = r["one_kib"] / 1024, r["forks_kib"] / 1024
        bound = 2 * one + a.forks * a.fork_write
        print(fmt_row([name, f"{one:.1f}", f"{tot:.1f}", f"{bound:.1f}", f"{tot / one:.2f}",
                       f"{r['save_bytes'] / 2**20:.1f}"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kosa8", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--qemu", default=shutil.which("qemu-system-x86_64"))
    ap.add_argument("--sizes", default="256,1024", help="guest MiB, comma-separated")
    ap.add_argument("--fill", type=float, default=0.25, help="fraction of RAM filled")
    ap.add_argument("--change", type=int, default=8, help="MiB written before the second checkpoint")
    ap.add_argument("--forks", type=int, default=10, help="copies started from one save (0: none)")
    ap.add_argument("--fork-mem", type=int, default=512, help="MiB of the guest copied")
    ap.add_argument("--fork-write", type=int, default=8, help="MiB each copy writes")
    a = ap.parse_args()
    rows, forks = [], []
    vmms = [("kosa8", kosa8_round)] + ([("qemu", qemu_round)] if a.qemu else [])
    for mem in [int(x) for x in a.sizes.split(",") if x]:
        fill = max(1, int(mem * a.fill))
        for name, fn in vmms:
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
    for name, _ in vmms if a.forks else []:
        work = tempfile.mkdtemp(prefix="k8bench-")
        try:
            r = forks_round(a, work, name, a.forks, a.fork_mem, a.fork_mem // 4, a.fork_write)
            print(f"# {name} {a.forks} copies of {a.fork_mem} MiB: {r}", flush=True)
        except Exception as e:
            r = {"error": str(e)}
            print(f"# {name} {a.forks} copies: FAILED {e}", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        forks.append((name, r))
    print_tables(rows, forks, a)


if __name__ == "__main__":
    main()
