#!/usr/bin/env python3
"""Where a virtio-blk request's time goes: KVM exits counted by reason, in
the hypervisor under the VMM, during a fio job in the guest, for kosa8's VMM
and QEMU microvm side by side (same kernel, image and fio job as bench.py
--only blk).  Counts come from the kernel's tracepoints (kvm_exit,
kvm_userspace_exit, kvm_mmio) through tracefs histogram triggers, armed when
the guest prints a marker after laying out its file and read when it prints
the next, so boot and layout are not counted.  Needs root, /dev/kvm and a
kernel with CONFIG_HIST_TRIGGERS (Debian's has it); where the host has no
KVM, run it in the helper VM:

    testbed/run python3 bench/sandbox/blk-exits.py [--qd 16] [--jobs randread,randwrite]
        [--rounds 1] [--vmm kosa8,qemu,kosa8@/path/to/other/kosa8]

Per job it prints fio's IOPS and, per 1000 requests: exits by reason
(AMD: 1024 nested page fault, i.e. an MMIO access or a page first touched;
96 physical interrupt; 124 MSR; 123 port I/O; 100 virtual interrupt window;
120 HLT; Intel numbers differ), exits that went on to the VMM (6: MMIO, 2:
port I/O), and MMIO reads and writes.  With virtio-mmio every interrupt
costs one MMIO read (the status) and one write (the acknowledgement), both
exits to the VMM; every kick is one MMIO write.  kosa8 -v's own line
(interrupts, coalescing windows) is printed beside."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402

TRACE = "/sys/kernel/tracing"
EVENTS = {"kvm/kvm_exit": "exit_reason", "kvm/kvm_userspace_exit": "reason", "kvm/kvm_mmio": "type"}
MMIO_TYPES = {"0": "read-asked", "1": "read", "2": "write"}


def trace_write(path, text):
    with open(f"{TRACE}/{path}", "w") as f:
        f.write(text)


def arm(on):
    for e, key in EVENTS.items():
        trace_write(f"events/{e}/trigger", f"{'' if on else '!'}hist:keys={key}:size=256")


def counts():
    """{event: {key: hits}} from the armed histograms."""
    out = {}
    for e, key in EVENTS.items():
        with open(f"{TRACE}/events/{e}/hist") as f:
            text = f.read()
        out[e] = {m[0]: int(m[1]) for m in re.findall(key + r":\s*(\d+)\s*\}\s*hitcount:\s*(\d+)", text)}
    return out


def guest_script(jobs, qd, seconds):
    fio = (f"fio --name=$j --rw=$j --bs=4k --filename=/var/tmp/bench.fio --size=256m --direct=1 "
           f"--ioengine=libaio --iodepth={qd} ")
    return ("mount -t proc proc /proc; for j in " + " ".join(jobs) + "; do " + fio +
            "--create_only=1 >/dev/null; echo K8MARK-START; " + fio + f"--runtime={seconds} --time_based "
            "--output-format=terse --terse-version=3 | sed s/^/FIO:/; echo K8MARK-END; "
            "rm -f /var/tmp/bench.fio; done")


def run_one(name, binary, init):
    if name == "qemu":
        cmd = B.qemu_vm(init)
    else:
        B.A.kosa8 = binary
        cmd = B.kosa8_vm(B.new_delta("ex"), init)
        cmd.insert(1, "-v")
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace")
    # A guest that hangs (the helper's nested emulation does, now and then)
    # would keep its output open for ever: the VM is killed after this.
    watchdog = threading.Timer(A.seconds * len(A.jobs.split(",")) + 300, p.kill)
    watchdog.start()
    results, report = [], ""
    try:
        for line in p.stdout:
            if line.startswith("K8MARK-START"):
                arm(True)
            elif line.startswith("K8MARK-END"):
                if results:
                    results[-1]["counts"] = counts()
                arm(False)
            elif line.startswith("FIO:"):
                rows = B.parse_fio(line.encode())
                for job, row in rows.items():
                    results.append({"job": job, "iops": row[1]})
            elif "virtio-blk:" in line:
                report = line.strip()
        p.wait()
    finally:
        watchdog.cancel()
        if p.poll() is None:
            p.kill()
        try:
            arm(False)
        except OSError:
            pass  # already disarmed
    return results, report


def show(name, results, report):
    for r in results:
        c = r.get("counts")
        if not c:
            print(f"{name} {r['job']}: {r['iops']:.0f} IOPS, no counts")
            continue
        n = r["iops"] * A.seconds / 1000  # thousands of requests
        per = lambda d: ", ".join(f"{k}: {v / n:.0f}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]))
        mmio = {MMIO_TYPES.get(k, k): v for k, v in c["kvm/kvm_mmio"].items()}
        print(f"{name} {r['job']}: {r['iops']:.0f} IOPS; per 1000 requests: exits {{{per(c['kvm/kvm_exit'])}}}, "
              f"to the VMM {{{per(c['kvm/kvm_userspace_exit'])}}}, MMIO {{{per(mmio)}}}")
    if report:
        print(f"{name}: {report}")


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("--qd", type=int, default=16)
    ap.add_argument("--jobs", default="randread,randwrite")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--vmm", default="kosa8,qemu",
                    help="comma list: kosa8 (build/kosa8), qemu, kosa8@PATH (another build)")
    A = ap.parse_args()
    if not os.path.exists(f"{TRACE}/events/kvm"):
        subprocess.run(["mount", "-t", "tracefs", "none", TRACE], check=True)
    path = lambda *c: subprocess.run(c, capture_output=True, text=True, check=True).stdout.strip()
    B.A = types.SimpleNamespace(kosa8="", kernel=path("guest/kernel/build.sh", "--path"),
                                image=path("guest/image/build.sh", "--path", "default"),
                                qemu="qemu-system-x86_64", fio_seconds=A.seconds)
    B.WORK = tempfile.mkdtemp(prefix="k8exits-")
    init = f'init=/bin/bash -- -c "{guest_script(A.jobs.split(","), A.qd, A.seconds)}"'
    print(f"# fio {A.jobs}, 4 KiB, O_DIRECT, libaio, queue depth {A.qd}, {A.seconds} s")
    for _ in range(A.rounds):
        for v in A.vmm.split(","):
            name, _, binary = v.partition("@")
            binary = os.path.abspath(binary or "build/kosa8")
            results, report = run_one(name, binary, init)
            show(v, results, report)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
