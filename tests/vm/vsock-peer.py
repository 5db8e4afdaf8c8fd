#!/usr/bin/env python3
"""Host side of the test initramfs's k8.test=vsock (guest/initramfs/init).

vsock-peer.py U BYTES: U is the path given to `kosa8 vm --vsock`.
- Serves the guest's connection to host port 5000 (unix socket U_5000):
  reads until the guest half-closes, then sends it all back.
- Connects to guest port 5001 through U ("CONNECT 5001"), retrying until the
  guest listens, sends BYTES of random data, half-closes, and checks the
  echo.
Prints "peer: serve=ok N" and "peer: connect=ok N"; exits 1 on any failure
or after 240 s."""
import os, socket, sys, threading

path, nbytes = sys.argv[1], int(sys.argv[2])
results = {}


def read_all(s):
    chunks = []
    while True:
        b = s.recv(1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def serve():
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(path + "_5000")
    ls.listen(1)
    ls.settimeout(240)
    c, _ = ls.accept()
    c.settimeout(240)
    data = read_all(c)
    c.sendall(data)
    c.close()
    results["serve"] = len(data)


def connect():
    data = os.urandom(nbytes)
    for _ in range(2400):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            s.connect(path)
            s.sendall(b"CONNECT 5001\n")
            line = b""
            while not line.endswith(b"\n"):
                b = s.recv(1)
                if not b:
                    raise ConnectionResetError("closed before OK")
                line += b
            if not line.startswith(b"OK "):
                raise ConnectionResetError(line)
            break
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, socket.timeout):
            s.close()
            threading.Event().wait(0.1)
    else:
        return
    s.settimeout(240)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    back = read_all(s)
    if back == data:
        results["connect"] = len(back)


threads = [threading.Thread(target=f, daemon=True) for f in (serve, connect)]
for t in threads:
    t.start()
for t in threads:
    t.join(240)
for k in ("serve", "connect"):
    print("peer: %s=%s" % (k, "ok %d" % results[k] if k in results else "fail"), flush=True)
sys.exit(0 if len(results) == 2 else 1)
