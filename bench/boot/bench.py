#!/usr/bin/env python3
"""Boot benchmark: kosa8's VMM against QEMU microvm, same kernel, same
initramfs, same guest size, in one run on one machine.

For each run it measures
  * wall time from starting the VMM process to the guest's first userspace
    line ("KOSA8-USERSPACE-OK" on the serial console),
  * the guest's own uptime at that moment (printed by the initramfs),
  * the VMM's memory overhead: its RSS minus the resident guest RAM pages
    (guest RAM is a memfd in both VMMs, so it can be told apart in smaps).

Needs /dev/kvm: run it through testbed/run (bench/boot/run.sh does).
Prints a Markdown table on stdout.
"""
import argparse
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import time

MARKER = b"KOSA8-USERSPACE-OK"
# The whole line: QEMU's serial port hands its output over a byte at a time,
# so a match on a partial buffer would read "k8: uptime=9." as 9.0 s.
UPTIME = re.compile(rb"k8: uptime=([0-9.]+)\r?\n")
# The kernel's own timestamp (sched_clock, from kvm-clock's start early in
# setup_arch) when it starts init: unlike /proc/uptime, which advances by
# jiffies until the clocksource switch at fs_initcall, it does not depend on
# when the guest's tick starts.
RUN_INIT = re.compile(rb"\[\s*([0-9]+\.[0-9]+)\] Run /init as init process")


def smaps_overhead_kib(pid, guest_map_name):
    """RSS of the process minus the RSS of its guest-RAM mapping, in KiB."""
    total = guest = 0
    current_is_guest = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                current_is_guest = guest_map_name in line
            elif line.startswith("Rss:"):
                kib = int(line.split()[1])
                total += kib
                if current_is_guest:
                    guest += kib
    return total - guest, guest


def one_run(cmd, guest_map_name, timeout, log=None, dmesg=False):
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    buf = b""
    t_marker = None
    uptime = clock = None
    overhead = guest = None
    deadline = start + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if not r:
            if p.poll() is not None:
                break
            continue
        chunk = os.read(p.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
        if t_marker is None and MARKER in buf:
            t_marker = time.monotonic() - start
        m = UPTIME.search(buf)
        if m and dmesg and b"k8: dmesg-end" not in buf:
            continue
        if m and uptime is None:
            uptime = float(m.group(1))
            c = RUN_INIT.search(buf)
            clock = float(c.group(1)) if c else None
            # The guest now sits in its shell: a quiet, booted machine.
            time.sleep(0.5)
            overhead, guest = smaps_overhead_kib(p.pid, guest_map_name)
            if log:
                for what in ("smaps", "status"):
                    with open(f"/proc/{p.pid}/{what}") as src, \
                            open(f"{log}.{what}", "w") as dst:
                        dst.write(src.read())
            break
    p.send_signal(signal.SIGTERM)
    if log:
        with open(log, "wb") as f:
            f.write(buf)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    if t_marker is None or uptime is None or clock is None:
        sys.stderr.write(buf[-2000:].decode(errors="replace") + "\n")
        raise RuntimeError(f"no marker, uptime or 'Run /init' line from {cmd[0]}")
    return t_marker, uptime, overhead, guest, clock


def summary(values):
    return statistics.median(values), min(values), max(values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kosa8", required=True)
    ap.add_argument("--before", help="a second kosa8 binary (e.g. built before a change), "
                    "booted in the same rounds as kosa8-before")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mem", type=int, default=128, help="MiB")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--append", default="",
                    help="more kernel arguments for both VMMs, e.g. initcall_debug")
    ap.add_argument("--dmesg", action="store_true",
                    help="quiet boot (loglevel=0 initcall_debug): the guest prints its "
                    "kernel log once in user space, kept with --log-dir; the serial "
                    "console costs the boot nothing then")
    ap.add_argument("--log-dir", help="keep each run's console output here "
                    "(NAME-RUN.log, for bench/boot/dmesg-diff.py) and the VMM's "
                    "/proc smaps and status once booted (NAME-RUN.log.smaps)")
    a = ap.parse_args()

    append = ("k8.test=shell " + a.append).strip()
    if a.dmesg:
        append += " loglevel=0 initcall_debug printk.time=1 k8.dmesg"
    def kosa8(binary):
        return ([binary, "vm", "--no-emulate", "--kernel", a.kernel, "--initrd", a.initrd,
                 "--mem", f"{a.mem}M", "--cpus", "1", "--cmdline", append], "kosa8-guest-ram")

    vmms = {
        "kosa8": kosa8(a.kosa8),
        **({"kosa8-before": kosa8(a.before)} if a.before else {}),
        # The same devices the guest uses: a serial port, nothing else.  Guest
        # RAM as a memfd so that smaps separates it, as for kosa8.
        "qemu-microvm": (["qemu-system-x86_64", "-M", "microvm,acpi=off,memory-backend=ram",
                          "-accel", "kvm", "-cpu", "host", "-smp", "1", "-m", f"{a.mem}M",
                          "-object", f"memory-backend-memfd,id=ram,size={a.mem}M",
                          "-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio",
                          "-kernel", a.kernel, "-initrd", a.initrd,
                          "-append", "console=ttyS0 reboot=k panic=-1 " + append],
                         "/memfd:"),
    }
    results = {name: [] for name in vmms}
    # Interleave the VMMs so that drift in the machine hits both alike.
    for i in range(a.runs):
        for name, (cmd, mapname) in vmms.items():
            log = a.log_dir and os.path.join(a.log_dir, f"{name}-{i + 1}.log")
            results[name].append(one_run(cmd, mapname, a.timeout, log, a.dmesg))
            print(f"run {i + 1} {name}: {results[name][-1]}", file=sys.stderr)

    print(f"| VMM | start to userspace, s (median / min / max) | guest uptime at userspace, s "
          f"(median / min / max) | guest clock at /init, s (median / min / max) "
          f"| VMM RSS beyond guest RAM, MiB (median) | runs |")
    print("|---|---|---|---|---|---|")
    med = {}
    for name, rs in results.items():
        w = summary([r[0] for r in rs])
        u = summary([r[1] for r in rs])
        c = summary([r[4] for r in rs])
        o = statistics.median([r[2] for r in rs]) / 1024
        med[name] = (w[0], o, u[0], c[0])
        print(f"| {name} | {w[0]:.3f} / {w[1]:.3f} / {w[2]:.3f} | {u[0]:.3f} / {u[1]:.3f} / "
              f"{u[2]:.3f} | {c[0]:.3f} / {c[1]:.3f} / {c[2]:.3f} | {o:.2f} | {len(rs)} |")
    ratio = med["kosa8"][0] / med["qemu-microvm"][0]
    print()
    print(f"Ratio kosa8 / QEMU microvm, median start to userspace: **{ratio:.2f}**")
    for name in med:
        if name.startswith("kosa8"):
            print(f"Ratio {name} / QEMU microvm, median guest uptime at userspace: "
                  f"**{med[name][2] / med['qemu-microvm'][2]:.2f}**")
            print(f"Ratio {name} / QEMU microvm, median guest clock at /init: "
                  f"**{med[name][3] / med['qemu-microvm'][3]:.2f}**")
    print(f"kosa8 VMM memory overhead (1 vCPU, {a.mem} MiB): **{med['kosa8'][1]:.2f} MiB**")


if __name__ == "__main__":
    main()
