#!/usr/bin/env python3
"""Where two boots of the same kernel spend their time, side by side.

    bench/boot/dmesg-diff.py A.log B.log [--top N]

A and B are serial console logs of the same kernel booted by two VMMs with
`initcall_debug printk.time=1` (bench/boot/bench.py --log-dir keeps them).
Prints, for each log, the slowest initcalls and the largest gaps between
consecutive kernel messages (the time spent before the later message), then
the initcalls whose duration differs most between the two.  Times in ms.
"""
import argparse
import re

LINE = re.compile(r"^\[\s*([0-9]+\.[0-9]+)\] (.*)$")
RETURNED = re.compile(r"initcall (\S+) returned \S+ after ([0-9]+) usecs")


def parse(path):
    """(timestamped messages, {initcall: usecs}) of one console log."""
    msgs, calls = [], {}
    with open(path, "rb") as f:
        for raw in f:
            m = LINE.match(raw.decode(errors="replace").strip("\r\n"))
            if not m:
                continue
            t, text = float(m.group(1)), m.group(2)
            msgs.append((t, text))
            r = RETURNED.search(text)
            if r:
                calls[r.group(1)] = int(r.group(2))
    return msgs, calls


def gaps(msgs, top):
    out = [(msgs[i][0] - msgs[i - 1][0], msgs[i - 1][1], msgs[i][1])
           for i in range(1, len(msgs))]
    return sorted(out, reverse=True)[:top]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    logs = {}
    for path in (a.a, a.b):
        msgs, calls = parse(path)
        logs[path] = calls
        last = msgs[-1][0] if msgs else 0.0
        print(f"== {path}: {len(msgs)} messages, last at {last:.3f} s, "
              f"initcalls {sum(calls.values()) / 1000:.1f} ms in all")
        print("slowest initcalls:")
        for name, us in sorted(calls.items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"  {us / 1000:9.1f}  {name}")
        print("largest gaps (before the second message):")
        for dt, before, after in gaps(msgs, a.top):
            print(f"  {dt * 1000:9.1f}  {before[:60]!r} -> {after[:60]!r}")
        print()
    ca, cb = logs[a.a], logs[a.b]
    both = set(ca) | set(cb)
    diff = sorted(both, key=lambda n: -abs(ca.get(n, 0) - cb.get(n, 0)))[:a.top]
    print(f"initcalls differing most (ms): {a.a} / {a.b}")
    for n in diff:
        print(f"  {ca.get(n, 0) / 1000:9.1f} {cb.get(n, 0) / 1000:9.1f}  {n}")


if __name__ == "__main__":
    main()
