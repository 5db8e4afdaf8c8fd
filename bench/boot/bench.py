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


def one_run(cmd, guest_map_name, timeout):
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    buf = b""
    t_marker = None
    uptime = None
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
        m = re.search(rb"k8: uptime=([0-9.]+)", buf)
        if m and uptime is None:
            uptime = float(m.group(1))
            # The guest now sits in its shell: a quiet, booted machine.
            time.sleep(0.5)
            overhead, guest = smaps_overhead_kib(p.pid, guest_map_name)
            break
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    if t_marker is None or uptime is None:
        sys.stderr.write(buf[-2000:].decode(errors="replace") + "\n")
        raise RuntimeError(f"no marker from {cmd[0]}")
    return t_marker, uptime, overhead, guest


def summary(values):
    return statistics.median(values), min(values), max(values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kosa8", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mem", type=int, default=128, help="MiB")
    ap.add_argument("--timeout", type=int, default=120)
    a = ap.parse_args()

    append = "k8.test=shell"
    vmms = {
        "kosa8": ([a.kosa8, "vm", "--no-emulate", "--kernel", a.kernel, "--initrd", a.initrd,
                   "--mem", f"{a.mem}M", "--cpus", "1", "--cmdline", append],
                  "kosa8-guest-ram"),
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
            results[name].append(one_run(cmd, mapname, a.timeout))
            print(f"run {i + 1} {name}: {results[name][-1]}", file=sys.stderr)

    print(f"| VMM | start to userspace, s (median / min / max) | guest uptime at userspace, s "
          f"(median / min / max) | VMM RSS beyond guest RAM, MiB (median) | runs |")
    print("|---|---|---|---|---|")
    med = {}
    for name, rs in results.items():
        w = summary([r[0] for r in rs])
        u = summary([r[1] for r in rs])
        o = statistics.median([r[2] for r in rs]) / 1024
        med[name] = (w[0], o)
        print(f"| {name} | {w[0]:.3f} / {w[1]:.3f} / {w[2]:.3f} | {u[0]:.3f} / {u[1]:.3f} / "
              f"{u[2]:.3f} | {o:.2f} | {len(rs)} |")
    ratio = med["kosa8"][0] / med["qemu-microvm"][0]
    print()
    print(f"Ratio kosa8 / QEMU microvm, median start to userspace: **{ratio:.2f}**")
    print(f"kosa8 VMM memory overhead (1 vCPU, {a.mem} MiB): **{med['kosa8'][1]:.2f} MiB**")


if __name__ == "__main__":
    main()
