#!/usr/bin/env python3
"""virtio-blk A/B: the fio jobs of bench.py (--only blk) in kosa8 VMs of two
builds, rounds alternating A-B, B-A, with no QEMU run between them: for a
change to the block path, where only the difference between the two builds
is wanted.  Run it where /dev/kvm is (the helper VM elsewhere):

    git worktree add /work/old REV && make -C /work/old build/kosa8
    testbed/run python3 bench/sandbox/blk-ab.py /work/old/build/kosa8 build/kosa8 3
"""
import os, subprocess, sys, tempfile, types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    a, b = (os.path.abspath(x) for x in sys.argv[1:3])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    path = lambda *c: subprocess.run(c, capture_output=True, text=True, check=True).stdout.strip()
    B.A = types.SimpleNamespace(kosa8="", kernel=path("guest/kernel/build.sh", "--path"),
                                image=path("guest/image/build.sh", "--path", "default"), fio_seconds=10)
    B.WORK = tempfile.mkdtemp(prefix="k8blkab-")
    init = f'init=/bin/bash -- -c "{B.fio_script()}"'
    for r in range(rounds):
        pair = [("A", a), ("B", b)]
        for name, binary in pair if r % 2 == 0 else pair[::-1]:
            B.A.kosa8 = binary
            t, p = B.timed(B.kosa8_vm(B.new_delta("blk"), init), timeout=300)
            rows = B.parse_fio(p.stdout + p.stderr)
            print(f"round {r + 1} {name} {binary} ({t:.0f} s): {rows}", flush=True)


if __name__ == "__main__":
    main()
