#!/usr/bin/env python3
"""Where two boots of the same kernel spend their time, side by side.

    bench/boot/dmesg-diff.py A.log[,A2.log...] B.log[,B2.log...] [--top N]
                             [--system-map System.map]

A and B are serial console logs of the same kernel booted by two VMMs with
`initcall_debug printk.time=1` (bench/boot/bench.py --log-dir keeps them).
Prints, for the first log of each side, the slowest initcalls and the largest
gaps between consecutive kernel messages (the time spent before the later
message), then the initcalls whose duration differs most between the two,
then the boot's phases: the stretches between messages that every log has,
with the median time each side spent in them over all its logs (several runs
per side tell a real difference from a hiccup of the host).  Times in ms.
With --system-map, initcalls are named (the kernel has no kallsyms).
"""
import argparse
import re
import statistics

LINE = re.compile(r"^\[\s*([0-9]+\.[0-9]+)\] (.*)$")
RETURNED = re.compile(r"initcall (\S+) returned \S+ after ([0-9]+) usecs")
# Numbers, addresses and sizes differ between VMMs and runs; the words do not.
NUMBERS = re.compile(r"\b(?:0x)?[0-9a-f]*[0-9][0-9a-f]*\b")


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


def load_symbols(path):
    """{address: name} of a System.map."""
    syms = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                syms["0x" + parts[0].lstrip("0")] = parts[2]
    return syms


def anchors(msgs):
    """{normalised message: time} of the messages that occur once in a log."""
    seen = {}
    for t, text in msgs:
        if "initcall " in text or "probe of " in text:
            continue
        key = NUMBERS.sub("#", text)
        seen[key] = None if key in seen else t
    return {k: t for k, t in seen.items() if t is not None}


def phases(logs_a, logs_b, top):
    """The stretches between messages common to all logs, in the order of the
    first log, that differ most between the two sides (median ms each)."""
    all_logs = [anchors(m) for m in logs_a + logs_b]
    first = logs_a[0]
    order = [k for k in (NUMBERS.sub("#", t) for _, t in first)
             if all(k in a for a in all_logs)]
    # Keep the anchors in the same order in every log (a message that moved
    # between two others would make a negative stretch).
    keep = []
    for k in order:
        if not keep or all(a[k] >= a[keep[-1]] for a in all_logs):
            keep.append(k)
    na = len(logs_a)
    rows = []
    prev = None
    for k in keep:
        if prev is not None:
            d = [(a[k] - a[prev]) * 1000 for a in all_logs]
            ma, mb = statistics.median(d[:na]), statistics.median(d[na:])
            rows.append((ma - mb, ma, mb, prev, k))
        prev = k
    return sorted(rows, key=lambda r: -abs(r[0]))[:top]


def gaps(msgs, top):
    out = [(msgs[i][0] - msgs[i - 1][0], msgs[i - 1][1], msgs[i][1])
           for i in range(1, len(msgs))]
    return sorted(out, reverse=True)[:top]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--system-map", help="the kernel's System.map, to name initcalls")
    a = ap.parse_args()
    syms = load_symbols(a.system_map) if a.system_map else {}
    side_a = [parse(p)[0] for p in a.a.split(",")]
    side_b = [parse(p)[0] for p in a.b.split(",")]
    a.a, a.b = a.a.split(",")[0], a.b.split(",")[0]
    logs = {}
    for path in (a.a, a.b):
        msgs, calls = parse(path)
        calls = {syms.get(n, n): us for n, us in calls.items()}
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
    print()
    print(f"phases differing most, median ms over {len(side_a)} / {len(side_b)} logs "
          f"(A, B, A - B; from the earlier message to the later):")
    for diff, ma, mb, before, after in phases(side_a, side_b, a.top):
        print(f"  {ma:9.1f} {mb:9.1f} {diff:+9.1f}  {before[:50]!r} -> {after[:50]!r}")


if __name__ == "__main__":
    main()
