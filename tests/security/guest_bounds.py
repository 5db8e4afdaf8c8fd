#!/usr/bin/python3
# The guest half of tests/security/bounds, run as root in the sandbox.
# Prints "sec: NAME=VALUE" lines for the host to judge.
#   flood SECONDS   DNS queries at full speed (half one denied name, half
#                   random names) and the serial console written without
#                   pause, side by side
#   hold-pid1       guest root stops PID 1 (the agent) under ptrace and
#                   keeps it stopped: it can no longer act on a power-off
import ctypes, os, random, socket, struct, sys, termios, threading, time


def say(name, value):
    print("sec: %s=%s" % (name, value), flush=True)


def query(name, qid):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack(">HH", 1, 1)


def resolver():
    for line in open("/etc/resolv.conf"):
        if line.startswith("nameserver"):
            return line.split()[1]
    return "127.0.0.53"


def dns_flood(seconds, out):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    addr = (resolver(), 53)
    sent = answered = refused = 0
    end = time.time() + seconds
    while time.time() < end:
        qid = sent & 0xFFFF
        name = "flood-denied.test" if sent % 2 == 0 else "r%08x.flood.test" % random.getrandbits(32)
        try:
            s.sendto(query(name, qid), addr)
            sent += 1
            d, _ = s.recvfrom(512)
            answered += 1
            if len(d) >= 4 and d[3] & 0x0F == 5:
                refused += 1
        except OSError:
            pass
    out.update(sent=sent, answered=answered, refused=refused)


def console_flood(seconds, out):
    line = (b"k8-console-flood " + b"x" * 110 + b"\n") * 64
    written = 0
    end = time.time() + seconds
    fd = os.open("/dev/ttyS0", os.O_WRONLY | os.O_NOCTTY)
    # At full speed: raw, and the fastest line rate the driver takes (at
    # 9600 baud the tty layer alone holds a writer to about 1 KB/s).
    try:
        a = termios.tcgetattr(fd)
        a[1] &= ~termios.OPOST
        for speed in ("B4000000", "B921600", "B115200"):
            if hasattr(termios, speed):
                a[4] = a[5] = getattr(termios, speed)
                try:
                    termios.tcsetattr(fd, termios.TCSANOW, a)
                    break
                except termios.error:
                    continue
    except termios.error:
        pass
    while time.time() < end:
        written += os.write(fd, line)
    os.close(fd)
    out["written"] = written


def flood(seconds):
    d, c = {}, {}
    t = [threading.Thread(target=dns_flood, args=(seconds, d)),
         threading.Thread(target=console_flood, args=(seconds, c))]
    for x in t:
        x.start()
    for x in t:
        x.join()
    say("dns_sent", d.get("sent", 0))
    say("dns_answered", d.get("answered", 0))
    say("dns_refused", d.get("refused", 0))
    say("console_written", c.get("written", 0))


PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207


def hold_pid1():
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork():
            os._exit(0)
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.ptrace(PTRACE_SEIZE, 1, None, None) == 0 and libc.ptrace(PTRACE_INTERRUPT, 1, None, None) == 0
        os.write(w, b"1" if ok else ("0 %d" % ctypes.get_errno()).encode())
        os.close(w)
        while True:  # the tracer stays: PID 1 stays stopped
            time.sleep(3600)
    os.close(w)
    res = os.read(r, 64).decode()
    say("pid1_seized", "yes" if res == "1" else "no:" + res)
    for _ in range(50):
        state = [l for l in open("/proc/1/status") if l.startswith("State:")][0].split(None, 1)[1].strip()
        if state.startswith("t"):
            break
        time.sleep(0.1)
    say("pid1_state", state)


if sys.argv[1] == "flood":
    flood(int(sys.argv[2]))
elif sys.argv[1] == "hold-pid1":
    hold_pid1()
