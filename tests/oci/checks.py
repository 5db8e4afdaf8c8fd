"""The tests' lines: "ok NAME" or "not ok NAME: why" per check (what
tests/run counts), "# PART: HH:MM:SS what" for progress."""
import time

failures = 0
part = "oci"


def ok(name):
    print("ok " + name, flush=True)


def not_ok(name, why):
    global failures
    failures += 1
    print("not ok %s: %s" % (name, why), flush=True)


def check(name, cond, why):
    ok(name) if cond else not_ok(name, why)


def step(msg):
    print("# %s: %s %s" % (part, time.strftime("%T"), msg), flush=True)
