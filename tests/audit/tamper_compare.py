#!/usr/bin/env python3
"""Many tampers of one log, each checked by kosa8 and by verify_log.py (the
verifier written from docs/audit-format.md alone): both must give the same
verdict, and every tamper that changes signed content must fail.

    tamper_compare.py KOSA8 LOG PUBKEY_PEM COUNT

Prints one line per disagreement and a summary; exits 1 on any.
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def kosa8_ok(k, log, pub):
    r = subprocess.run([k, "audit", "verify", "--log", log, "--pubkey", pub],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode not in (0, 1):
        raise SystemExit("kosa8 verify failed to run: %s" % r.stdout.decode(errors="replace"))
    return r.returncode == 0


def indep_ok(log, pub):
    r = subprocess.run([sys.executable, os.path.join(HERE, "verify_log.py"), "log", log, pub],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return r.returncode == 0


def tampers(log, heads, rnd):
    """(name, new log bytes, new heads bytes, must_fail)."""
    lines = heads.split(b"\n")[:-1]
    yield "none", log, heads, False
    while True:
        kind = rnd.randrange(8)
        if kind == 0:
            i = rnd.randrange(len(log))
            b = bytearray(log)
            b[i] ^= 1 << rnd.randrange(8)
            yield "log byte %d" % i, bytes(b), heads, True
        elif kind == 1:
            i = rnd.randrange(len(heads))
            b = bytearray(heads)
            b[i] = ord(rnd.choice("0123456789abcdef ")) if b[i] != 10 else b[i]
            yield "heads byte %d" % i, log, bytes(b), b != bytearray(heads)
        elif kind == 2 and len(lines) > 1:
            i = rnd.randrange(len(lines) - 1)  # not the last: that one is a legal cut
            hl = lines[:i] + lines[i + 1:]
            yield "head line %d removed" % i, log, b"\n".join(hl) + b"\n", True
        elif kind == 3:
            n = rnd.randrange(len(log))
            yield "log cut at %d" % n, log[:n], heads, True
        elif kind == 4:
            yield "heads emptied", log, b"", True
        elif kind == 5:
            yield "log wiped", b"", heads, True
        elif kind == 6:
            i = rnd.randrange(len(lines))
            f = lines[i].split(b" ")
            j = rnd.randrange(1, len(f))
            f[j] = f[j][:-1] + (b"0" if f[j][-1:] != b"0" else b"1")
            hl = lines[:i] + [b" ".join(f)] + lines[i + 1:]
            yield "head %d field %d" % (i, j), log, b"\n".join(hl) + b"\n", True
        elif kind == 7:
            i = rnd.randrange(32, len(log))
            yield "zeros from %d" % i, log[:i] + bytes(len(log) - i), heads, True


def main():
    k, src, pub, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    log, heads = open(src, "rb").read(), open(src + ".heads", "rb").read()
    rnd = random.Random(23)
    bad = caught = 0
    d = tempfile.mkdtemp()
    try:
        t = os.path.join(d, "t.log")
        for n, (name, lb, hb, must_fail) in enumerate(tampers(log, heads, rnd)):
            if n > count:
                break
            open(t, "wb").write(lb)
            open(t + ".heads", "wb").write(hb)
            a, b = kosa8_ok(k, t, pub), indep_ok(t, pub)
            if a != b or (must_fail and a):
                print("DISAGREE %s: kosa8 %s, independent %s" % (name, a, b))
                bad += 1
            caught += not a
    finally:
        shutil.rmtree(d)
    print("%d tampers, kosa8 rejected %d, %d disagreements" % (count, caught, bad))
    sys.exit(1 if bad else 0)


main()
