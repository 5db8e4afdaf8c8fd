#!/usr/bin/env python3
"""kosa8 oci driven as containerd's runc shim drives runc, with real bundles
in real sandboxes (where /dev/kvm works: through testbed/run).

This process plays the shim: a child subreaper, so that the monitor that
`create` leaves behind (the --pid-file pid) becomes its child and its exit
status is waited for here.  The bundle's rootfs is a busybox tree, as the
busybox image is.  One line per check, "ok NAME" or "not ok NAME: why".

  tests/oci/oci_test.py [--host-only]   (KOSA8: the kosa8 binary, default build/kosa8)
"""
import ctypes, json, os, shutil, signal, subprocess, sys, tempfile, time

import checks
from checks import check, not_ok, ok, step

K8 = os.path.abspath(os.environ.get("KOSA8", "build/kosa8"))


def runtime(root, *args, timeout=900, stdout=None, stderr=None, stdin=subprocess.DEVNULL):
    """kosa8 oci with runc's global options, as the shim passes them."""
    cmd = [K8, "oci", "--root", root, "--log", os.path.join(os.path.dirname(root), "log.json"), "--log-format", "json"]
    return subprocess.run(cmd + list(args), timeout=timeout, stdin=stdin,
                          stdout=stdout if stdout is not None else subprocess.PIPE,
                          stderr=stderr if stderr is not None else subprocess.PIPE)


def make_bundle(work, name, args, extra=None, annotations=None):
    b = os.path.join(work, name)
    rootfs = os.path.join(b, "rootfs")
    os.makedirs(os.path.join(rootfs, "bin"))
    for d in ("etc", "tmp", "home/app", "proc", "sys", "dev"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
    shutil.copy("/bin/busybox", os.path.join(rootfs, "bin/busybox"))
    for applet in ("sh", "cat", "echo", "id", "hostname", "wget", "sleep", "pwd", "touch", "ls", "nslookup", "awk"):
        os.symlink("busybox", os.path.join(rootfs, "bin", applet))
    with open(os.path.join(rootfs, "etc/marker"), "w") as f:
        f.write("from-the-bundle\n")
    cfg = {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 1000, "gid": 1000}, "args": args,
                    "env": ["PATH=/bin", "GREETING=hi"], "cwd": "/home/app",
                    "capabilities": {"bounding": ["CAP_KILL"]}, "noNewPrivileges": True},
        "root": {"path": "rootfs", "readonly": False},
        "hostname": "ctr-" + name,
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
                   {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "size=16m"]}],
        "linux": {"resources": {"memory": {"limit": 1073741824}}, "namespaces": [{"type": "pid"}]},
        "annotations": annotations or {},
    }
    if extra:
        cfg.update(extra)
    with open(os.path.join(b, "config.json"), "w") as f:
        json.dump(cfg, f)
    return b


def state(root, cid):
    r = runtime(root, "state", cid)
    if r.returncode:
        return {"status": "(none)", "err": r.stderr.decode(errors="replace")}
    return json.loads(r.stdout)


def wait_child(pid, timeout):
    end = time.time() + timeout
    while time.time() < end:
        got, st = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return st
        time.sleep(0.2)
    return None


def host_checks(work, root):
    """What needs no VM: ids, refusals before anything starts, features."""
    b = make_bundle(work, "refused", ["true"],
                    extra={"mounts": [{"destination": "/data", "type": "bind", "source": "/etc",
                                       "options": ["rbind"]}]})
    r = runtime(root, "create", "--bundle", b, "bind1")
    err = r.stderr.decode(errors="replace")
    check("oci-refuses-host-bind", r.returncode == 1 and "does not bind host paths" in err
          and not os.path.exists(os.path.join(root, "bind1")), "rc %d: %s" % (r.returncode, err))
    with open(os.path.join(os.path.dirname(root), "log.json")) as f:
        last = json.loads(f.read().splitlines()[-1])
    check("oci-log-json", last.get("level") == "error" and "does not bind" in last.get("msg", ""), str(last))
    r = runtime(root, "create", "--bundle", b, "../evil")
    check("oci-refuses-bad-id", r.returncode == 1 and b"not a container id" in r.stderr, r.stderr)
    r = runtime(root, "state", "nosuch")
    check("oci-state-unknown", r.returncode == 1 and b"does not exist" in r.stderr, r.stderr)
    r = runtime(root, "exec", "--detach", "nosuch")
    check("oci-exec-needs-process", r.returncode == 1 and b"--process FILE" in r.stderr, r.stderr)
    r = runtime(root, "exec", "--process", "/nonexistent", "nosuch")
    check("oci-exec-unknown", r.returncode == 1 and b"does not exist" in r.stderr, r.stderr)
    r = runtime(root, "features")
    try:
        f = json.loads(r.stdout)
        good = f["ociVersionMax"].startswith("1.") and "io.kosa8.allow" in f["annotations"]
    except (ValueError, KeyError) as e:
        good = False
    check("oci-features-json", r.returncode == 0 and good, r.stdout[:200])
    r = runtime(root, "--systemd-cgroup", "state", "nosuch")
    check("oci-systemd-cgroup-ignored", b"--systemd-cgroup ignored" in open(os.path.join(os.path.dirname(root), "log.json"), "rb").read(),
          "no warning logged")


def run_to_exit(work, root):
    """A process that prints, is refused egress, and exits 7."""
    script = ("echo hello $(hostname) uid=$(id -u) gid=$(id -g) cwd=$(pwd) $GREETING; cat /etc/marker; "
              "echo err-line >&2; "
              # busybox's own resolver (its wget's static glibc lookup crashes in a root without NSS)
              "echo \"denied-dns:$(nslookup denied.example 2>&1 | awk '/^Name:/ {n = 1} n && /^Address/ {print $2}')\"; "
              "ls /sys/class/net; exit 7")
    b = make_bundle(work, "one", ["sh", "-c", script])
    out, err = open(os.path.join(work, "one.out"), "w+b"), open(os.path.join(work, "one.err"), "w+b")
    pidfile = os.path.join(work, "one.pid")
    step("create one")
    t0 = time.time()
    r = runtime(root, "create", "--bundle", b, "--pid-file", pidfile, "one", stdout=out, stderr=err)
    step("create took %.1f s" % (time.time() - t0))
    if r.returncode:
        err.seek(0)
        not_ok("oci-create", "rc %d: %s" % (r.returncode, err.read().decode(errors="replace")[-2000:]))
        return
    pid = int(open(pidfile).read())
    st = state(root, "one")
    check("oci-state-created", st["status"] == "created" and st["pid"] == pid and st["bundle"] == b, str(st))
    r = runtime(root, "start", "one")
    check("oci-start", r.returncode == 0, r.stderr)
    ws = wait_child(pid, 600)
    out.seek(0)
    err.seek(0)
    o, e = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    check("oci-exit-status", ws is not None and os.WIFEXITED(ws) and os.WEXITSTATUS(ws) == 7,
          "wait status %r, out %r err %r" % (ws, o, e))
    check("oci-stdout", "hello ctr-one uid=1000 gid=1000 cwd=/home/app hi" in o and "from-the-bundle" in o,
          repr(o))
    check("oci-stderr", "err-line" in e, repr(e))
    nics = [l for l in o.split() if l not in ("lo",)]
    check("oci-no-network-device", "lo" in o.split() and not any(n.startswith(("eth", "ens", "enp")) for n in nics),
          repr(o))
    st = state(root, "one")
    check("oci-state-stopped", st["status"] == "stopped", str(st))
    sandbox = json.load(open(os.path.join(root, "one", "state.json")))["sandbox"]
    a = subprocess.run([K8, "audit", "show", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    text = a.stdout.decode(errors="replace")
    check("oci-audit-names-container", '"container":"one"' in text.replace(" ", "") and sandbox in text,
          "no oci.create record naming container one / %s: %s" % (sandbox, a.stderr[-300:]))
    # the query reached the policy (its audit record) and got no address back
    check("oci-denied-host", "denied-dns:\n" in o and "denied.example" in text, repr(o))
    r = runtime(root, "delete", "one")
    check("oci-delete", r.returncode == 0 and not os.path.exists(os.path.join(root, "one")), r.stderr)


def exec_one(work, root, cid, name, args):
    """exec as the shim calls it for `docker exec`: a process file, --detach, --pid-file; the
    pid is a child of ours (a subreaper) that we wait for.  (pid, its output file) or None."""
    proc = os.path.join(work, name + ".json")
    json.dump({"args": args, "env": ["PATH=/bin", "FROM_EXEC=yes"], "cwd": "/tmp", "terminal": False,
               "user": {"uid": 1000, "gid": 1000}}, open(proc, "w"))
    out = open(os.path.join(work, name + ".out"), "w+b")
    pidfile = os.path.join(work, name + ".pid")
    r = runtime(root, "exec", "--process", proc, "--detach", "--pid-file", pidfile, cid, stdout=out, stderr=out)
    if r.returncode:
        out.seek(0)
        not_ok("oci-" + name, "exec failed rc %d: %s" % (r.returncode, out.read()[-1000:]))
        return None
    return int(open(pidfile).read()), out


def exec_into(work, root, cid):
    """Two exec'd processes in a running container: output and status, and a signal sent to the
    pid the shim got (the shim signals exec'd processes itself, not through kill)."""
    step("exec into %s" % cid)
    got = exec_one(work, root, cid, "exec-status", ["sh", "-c", "cat /etc/marker; echo $FROM_EXEC uid=$(id -u) "
                                                     "cwd=$(pwd); exit 5"])
    if got:
        ws = wait_child(got[0], 300)
        got[1].seek(0)
        o = got[1].read().decode(errors="replace")
        check("oci-exec-output", "from-the-bundle" in o and "yes uid=1000 cwd=/tmp" in o, repr(o))
        check("oci-exec-exit-status", ws is not None and os.WIFEXITED(ws) and os.WEXITSTATUS(ws) == 5,
              "wait status %r, out %r" % (ws, o))
    got = exec_one(work, root, cid, "exec-signal", ["sh", "-c", "trap 'echo exec-term; exit 43' TERM; "
                                                     "echo exec-up; while :; do sleep 1; done"])
    if got:
        o = ""
        for _ in range(300):
            got[1].seek(0)
            o = got[1].read().decode(errors="replace")
            if "exec-up" in o:
                break
            time.sleep(0.5)
        os.kill(got[0], signal.SIGTERM)
        ws = wait_child(got[0], 300)
        got[1].seek(0)
        o = got[1].read().decode(errors="replace")
        check("oci-exec-signal", ws is not None and os.WIFEXITED(ws) and os.WEXITSTATUS(ws) == 43
              and "exec-term" in o, "wait status %r, out %r" % (ws, o))
    st = state(root, cid)
    check("oci-exec-leaves-container-running", st["status"] == "running", str(st))


def run_and_kill(work, root):
    """A long process: running, then SIGTERM reaches it in the guest."""
    b = make_bundle(work, "two", ["sh", "-c", "trap 'echo got-term; exit 42' TERM; echo up; "
                                                "while :; do sleep 1; done"])
    out, err = open(os.path.join(work, "two.out"), "w+b"), open(os.path.join(work, "two.err"), "w+b")
    pidfile = os.path.join(work, "two.pid")
    step("create two")
    # create's stdio stays the container's (the monitor holds it): files, never pipes read to the end
    r = runtime(root, "create", "--bundle", b, "--pid-file", pidfile, "two", stdout=out, stderr=err)
    if r.returncode:
        err.seek(0)
        not_ok("oci-create-two", err.read().decode(errors="replace")[-2000:])
        return
    pid = int(open(pidfile).read())
    r = runtime(root, "start", "two")
    check("oci-start-two", r.returncode == 0, r.stderr)
    for _ in range(300):
        out.seek(0)
        if b"up" in out.read():
            break
        time.sleep(0.5)
    st = state(root, "two")
    check("oci-state-running", st["status"] == "running" and st["pid"] == pid, str(st))
    r = runtime(root, "start", "two")
    check("oci-start-twice-refused", r.returncode == 1 and b"running" in r.stderr, r.stderr)
    r = runtime(root, "delete", "two")
    check("oci-delete-running-refused", r.returncode == 1 and b"--force" in r.stderr, r.stderr)
    exec_into(work, root, "two")
    r = runtime(root, "kill", "two", "TERM")
    check("oci-kill-term", r.returncode == 0, r.stderr)
    ws = wait_child(pid, 300)
    out.seek(0)
    o = out.read().decode(errors="replace")
    check("oci-signal-reaches-process", ws is not None and os.WIFEXITED(ws) and os.WEXITSTATUS(ws) == 42
          and "got-term" in o, "wait status %r, out %r" % (ws, o))
    r = runtime(root, "kill", "two", "KILL")
    check("oci-kill-stopped-refused", r.returncode == 1 and b"stopped" in r.stderr, r.stderr)
    proc = os.path.join(work, "exec-late.json")
    json.dump({"args": ["true"], "cwd": "/"}, open(proc, "w"))
    r = runtime(root, "exec", "--process", proc, "--detach", "two")
    check("oci-exec-stopped-refused", r.returncode == 1 and b"stopped" in r.stderr, r.stderr)
    r = runtime(root, "delete", "two")
    check("oci-delete-two", r.returncode == 0, r.stderr)


def run_terminal(work, root):
    """process.terminal: the pty master arrives on --console-socket."""
    import socket
    b = make_bundle(work, "three", ["sh", "-c", "tty; echo term-ok; exit 3"])
    cfg = json.load(open(os.path.join(b, "config.json")))
    cfg["process"]["terminal"] = True
    json.dump(cfg, open(os.path.join(b, "config.json"), "w"))
    sock_path = os.path.join(work, "console.sock")
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(sock_path)
    ls.listen(1)
    null = open(os.devnull, "w+b")
    pidfile = os.path.join(work, "three.pid")
    step("create three (terminal)")
    r = runtime(root, "create", "--bundle", b, "--pid-file", pidfile, "--console-socket", sock_path, "three",
                stdout=null, stderr=null)
    if r.returncode:
        not_ok("oci-create-terminal", "rc %d (see the json log)" % r.returncode)
        return
    pid = int(open(pidfile).read())
    ls.settimeout(5)  # as containerd's shim: the master must be there once create returned
    try:
        conn, _ = ls.accept()
        msg, fds, _, _ = socket.recv_fds(conn, 64, 1)
    except OSError as e:
        not_ok("oci-console-socket", "no pty master: %s" % e)
        return
    ok("oci-console-socket") if fds else not_ok("oci-console-socket", "no descriptor with %r" % msg)
    r = runtime(root, "start", "three")
    data = b""
    if fds:
        os.set_blocking(fds[0], False)
        end = time.time() + 300
        while time.time() < end and b"term-ok" not in data:
            try:
                data += os.read(fds[0], 4096)
            except BlockingIOError:
                time.sleep(0.2)
            except OSError:
                break
    ws = wait_child(pid, 300)
    text = data.decode(errors="replace")
    check("oci-terminal-output", "term-ok" in text and "/dev/pts/" in text, repr(text))
    check("oci-terminal-exit-status", ws is not None and os.WIFEXITED(ws) and os.WEXITSTATUS(ws) == 3, repr(ws))
    runtime(root, "delete", "three")


def measure_big_rootfs(work, root, tree):
    """How long create takes for a Debian tree of some size (a measurement, one check)."""
    if not os.path.isdir(tree):
        not_ok("oci-big-rootfs", "KOSA8_OCI_BIG_ROOTFS=%s is not a directory here" % tree)
        return
    b = os.path.join(work, "big")
    os.makedirs(b)
    cfg = {"ociVersion": "1.0.2", "root": {"path": tree},
           "process": {"args": ["/bin/sh", "-c", "cat /etc/debian_version"], "env": ["PATH=/usr/bin:/bin"]}}
    json.dump(cfg, open(os.path.join(b, "config.json"), "w"))
    out = open(os.path.join(work, "big.out"), "w+b")
    size = subprocess.run(["du", "-sm", tree], stdout=subprocess.PIPE).stdout.split()[0].decode()
    step("create big (%s MB)" % size)
    t0 = time.time()
    r = runtime(root, "create", "--bundle", b, "--pid-file", os.path.join(work, "big.pid"), "big", stdout=out,
                stderr=out)
    took = time.time() - t0
    step("create of a %s MB rootfs took %.1f s" % (size, took))
    if r.returncode:
        not_ok("oci-big-rootfs", "create failed")
        return
    pid = int(open(os.path.join(work, "big.pid")).read())
    runtime(root, "start", "big")
    ws = wait_child(pid, 300)
    out.seek(0)
    o = out.read().decode(errors="replace")
    check("oci-big-rootfs", ws is not None and os.WIFEXITED(ws) and os.WEXITSTATUS(ws) == 0 and "12." in o, repr(o))
    runtime(root, "delete", "big")


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the monitors become ours, as a shim's
    work = tempfile.mkdtemp(prefix="kosa8-oci-")
    root = os.path.join(work, "state")
    try:
        host_checks(work, root)
        if "--host-only" not in sys.argv:
            run_to_exit(work, root)
            run_and_kill(work, root)
            run_terminal(work, root)
            if os.environ.get("KOSA8_OCI_BIG_ROOTFS"):
                measure_big_rootfs(work, root, os.environ["KOSA8_OCI_BIG_ROOTFS"])
    finally:
        for cid in os.listdir(root) if os.path.isdir(root) else []:
            if os.path.isdir(os.path.join(root, cid)):
                runtime(root, "delete", "--force", cid)
        shutil.rmtree(work, ignore_errors=True)
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
