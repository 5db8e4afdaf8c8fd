#!/usr/bin/env python3
"""VMM memory benchmark: what a kosa8 VMM keeps resident beyond its guest's
RAM, mapping by mapping, next to QEMU microvm on the same kernel, in one run.

Two guests, both 1 vCPU and 128 MiB:
  * the boot benchmark's (bench/boot): kosa8's kernel and test initramfs,
    a serial console, booted to its shell; for each VMM binary given and
    for QEMU microvm, interleaved over --rounds rounds;
  * with --sandbox: a real sandbox (kosa8 create --cpus 1 --mem 128M, then
    start): its VMM jailed, seccomp-filtered, with its disk, vsock and
    control socket, read --settle s after `kosa8 start` returned.

RSS and PSS beyond guest RAM are the sums over /proc/PID/smaps without the
guest-RAM mapping (a memfd in both VMMs).  The breakdown groups mappings by
what they are (the binary, each library, heap, stacks, other anonymous
memory); anonymous mappings of exactly a thread stack's size (STACK_KIB)
are counted as thread stacks.  Needs /dev/kvm: bench/memory/run.sh runs it in the
helper VM.  Prints Markdown on stdout.
"""
import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bootbench", os.path.join(HERE, "..", "boot", "bench.py"))
boot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(boot)

HEAD = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")


# Thread stacks: glibc's default (8 MiB) and kosa8-vmm's (256 KiB), with or
# without their guard page.
STACK_KIB = (8192, 8188, 256, 252)


def group(name, size_kib, perms):
    if not name:
        if size_kib in STACK_KIB and "w" in perms:
            return "thread stacks (anonymous)"
        return "other anonymous (malloc arenas, own thread stacks, buffers)"
    if name.startswith("["):
        return name
    base = os.path.basename(name)
    if "guest-ram" in name or name.startswith("/memfd:"):
        return "guest RAM"
    m = re.match(r"(lib[a-z0-9_+-]*?)(-[0-9.]+)?\.so", base)
    if m:
        return m.group(1) + ".so"
    if base.startswith("ld-linux"):
        return "ld.so"
    return "the binary (" + base.split(" ")[0] + ")"


def read_smaps(path):
    """{group: [rss, pss, count]} in KiB, from a saved /proc/PID/smaps."""
    out = {}
    cur = None
    with open(path) as f:
        for line in f:
            m = HEAD.match(line)
            if m:
                size = (int(m.group(2), 16) - int(m.group(1), 16)) // 1024
                cur = out.setdefault(group(m.group(4).strip(), size, m.group(3)), [0, 0, 0])
                cur[2] += 1
            elif line.startswith("Rss:"):
                cur[0] += int(line.split()[1])
            elif line.startswith("Pss:"):
                cur[1] += int(line.split()[1])
    return out


def beyond_guest(groups):
    rss = sum(v[0] for k, v in groups.items() if k != "guest RAM")
    pss = sum(v[1] for k, v in groups.items() if k != "guest RAM")
    return rss, pss


def save_proc(pid, log):
    for what in ("smaps", "status", "maps"):
        with open(f"/proc/{pid}/{what}") as src, open(f"{log}.{what}", "w") as dst:
            dst.write(src.read())
    names = []
    for t in sorted(os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as c:
                names.append(c.read().strip())
        except OSError:
            pass
    with open(f"{log}.threads", "w") as f:
        f.write("\n".join(names) + "\n")


def k8(binary, *args):
    """binary: the kosa8 binary, after NAME=VALUE words for its environment."""
    words = binary.split()
    env = dict(os.environ)
    while words and re.match(r"^[A-Z_]+=", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    return subprocess.run([*words, *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env, timeout=900)


def sandbox_run(binary, name, pattern, settle, log):
    k8(binary, "rm", "-f", name)
    r = k8(binary, "create", "--name", name, "--cpus", "1", "--mem", "128M")
    if r.returncode == 0:
        r = k8(binary, "start", name)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: {r.stdout[-500:]} {r.stderr[-500:]}")
    try:
        time.sleep(settle)
        pids = subprocess.run(["pgrep", "-f", pattern + f".*/sandboxes/{name}/"], capture_output=True,
                              text=True).stdout.split()
        if not pids:
            raise RuntimeError(f"{name}: no VMM matching {pattern}")
        save_proc(int(pids[0]), log)
    finally:
        k8(binary, "rm", "-f", name)
    return read_smaps(log + ".smaps")


def table(title, runs):
    """runs: {label: [groups...]}; prints medians and the breakdown of the
    median run of each."""
    print(f"\n### {title}\n")
    print("| VMM | RSS beyond guest RAM, MiB (median / min / max) | PSS beyond guest RAM, MiB (median) | runs |")
    print("|---|---|---|---|")
    medrun = {}
    for label, gs in runs.items():
        vals = [beyond_guest(g) for g in gs]
        rss = [v[0] / 1024 for v in vals]
        pss = [v[1] / 1024 for v in vals]
        print(f"| {label} | {statistics.median(rss):.2f} / {min(rss):.2f} / {max(rss):.2f} | "
              f"{statistics.median(pss):.2f} | {len(gs)} |")
        order = sorted(range(len(gs)), key=lambda i: vals[i][0])
        medrun[label] = gs[order[len(order) // 2]]
    keys = sorted({k for g in medrun.values() for k in g if k != "guest RAM"},
                  key=lambda k: -max(g.get(k, [0])[0] for g in medrun.values()))
    print(f"\nBreakdown of the median run, RSS / PSS in KiB:\n")
    print("| mapping | " + " | ".join(medrun) + " |")
    print("|---|" + "---:|" * len(medrun))
    for k in keys:
        cells = []
        for g in medrun.values():
            v = g.get(k)
            cells.append(f"{v[0]} / {v[1]}" if v else "-")
        print(f"| {k} | " + " | ".join(cells) + " |")
    cells = [f"{g['guest RAM'][0]}" if "guest RAM" in g else "-" for g in medrun.values()]
    print("| (guest RAM, not counted) | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmm", action="append", default=[], metavar="LABEL=CMD",
                    help="a VMM command taking `kosa8 vm`'s options, e.g. "
                    "'kosa8-vmm=build/kosa8-vmm' or 'kosa8 vm=build/kosa8 vm' "
                    "(words split on spaces; env NAME=VALUE words first are passed to env)")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=180)
    ap.add_argument("--sandbox", action="append", default=[], metavar="LABEL|KOSA8|PATTERN",
                    help="also a sandbox started by the kosa8 binary KOSA8 (NAME=VALUE "
                    "words first: its environment), its VMM found by pgrep -f PATTERN")
    ap.add_argument("--settle", type=float, default=5)
    ap.add_argument("--log-dir", required=True)
    a = ap.parse_args()
    os.makedirs(a.log_dir, exist_ok=True)

    append = "k8.test=shell"
    vmms = {}
    for spec in a.vmm:
        label, cmd = spec.split("=", 1)
        words = cmd.split()
        env = [w for w in words if re.match(r"^[A-Z_]+=", w)]
        words = words[len(env):]
        vmms[label] = ((["env", *env] if env else []) + words +
                       ["--no-emulate", "--kernel", a.kernel, "--initrd", a.initrd, "--mem", "128M",
                        "--cpus", "1", "--cmdline", append], "kosa8-guest-ram")
    vmms["qemu-microvm"] = (["qemu-system-x86_64", "-M", "microvm,acpi=off,memory-backend=ram",
                             "-accel", "kvm", "-cpu", "host", "-smp", "1", "-m", "128M",
                             "-object", "memory-backend-memfd,id=ram,size=128M",
                             "-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio",
                             "-kernel", a.kernel, "-initrd", a.initrd,
                             "-append", "console=ttyS0 reboot=k panic=-1 " + append], "/memfd:")
    runs = {label: [] for label in vmms}
    for i in range(a.rounds):
        for label, (cmd, gmap) in vmms.items():
            log = os.path.join(a.log_dir, re.sub(r"[^A-Za-z0-9]+", "-", label) + f"-{i + 1}.log")
            boot.one_run(cmd, gmap, a.timeout, log)
            runs[label].append(read_smaps(log + ".smaps"))
            print(f"run {i + 1} {label}: beyond guest RAM {beyond_guest(runs[label][-1])} KiB",
                  file=sys.stderr)
    if a.rounds:
        table("Initramfs guest booted to its shell, 1 vCPU, 128 MiB", runs)

    if a.sandbox:
        sruns = {}
        for spec in a.sandbox:
            label, binary, pattern = spec.split("|", 2)
            log = os.path.join(a.log_dir, "sandbox-" + re.sub(r"[^A-Za-z0-9]+", "-", label))
            sruns[label] = [sandbox_run(binary, "k8mem", pattern, a.settle, log)]
            print(f"sandbox {label}: beyond guest RAM {beyond_guest(sruns[label][0])} KiB",
                  file=sys.stderr)
        table("A sandbox (jailed, seccomp, disk, vsock, control socket), 1 vCPU, 128 MiB, "
              f"{a.settle:g} s after start", sruns)
        for spec in a.sandbox:
            label = spec.split("|", 1)[0]
            log = os.path.join(a.log_dir, "sandbox-" + re.sub(r"[^A-Za-z0-9]+", "-", label))
            anon_detail(label, log)


def anon_detail(label, log):
    """The threads and the process's own memory (no file behind it), one
    line per mapping: what thread stacks and malloc arenas hold."""
    with open(log + ".threads") as f:
        threads = f.read().split()
    print(f"\n{label}: {len(threads)} threads ({', '.join(threads)}); "
          "anonymous mappings, size / RSS in KiB:\n")
    rows = []
    cur = None
    with open(log + ".smaps") as f:
        for line in f:
            m = HEAD.match(line)
            if m:
                name = m.group(4).strip()
                size = (int(m.group(2), 16) - int(m.group(1), 16)) // 1024
                cur = [size, m.group(3), name or "(anonymous)", 0] if (not name or name.startswith("[")) else None
                if cur:
                    rows.append(cur)
            elif cur and line.startswith("Rss:"):
                cur[3] = int(line.split()[1])
            elif cur and line.startswith("AnonHugePages:") and int(line.split()[1]):
                cur[2] += f" (huge pages {line.split()[1]})"
    print("    " + "; ".join(f"{n} {p} {sz}/{r}" for sz, p, n, r in rows if r or "w" in p))


if __name__ == "__main__":
    main()
