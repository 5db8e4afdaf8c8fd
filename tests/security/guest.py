#!/usr/bin/python3
# The guest half of the escape tests (tests/security/run), run as root in
# the sandbox with `kosa8 exec -u root`.  Every attempt prints one line
#
#     sec: NAME=VALUE
#
# and the host decides: a network probe's VALUE is what came back (the host's
# test servers answer with a token this script never sees, so a probe cannot
# pass by accident or be faked from inside), other checks report what they
# found.  Usage: guest.py PHASE [ARGS...]; PHASE is one of the functions
# below.
import errno, json, mmap, os, socket, struct, subprocess, sys, time

CONF = json.load(open("/workspace/sec/targets.json"))
VMADDR_CID_ANY = 0xFFFFFFFF
VMADDR_CID_LOCAL = 1
HOST_CID = 2


def say(name, value):
    print("sec: %s=%s" % (name, value), flush=True)


def err_name(e):
    return errno.errorcode.get(e.errno, str(e)) if isinstance(e, OSError) and e.errno else type(e).__name__


def tcp_probe(family, addr, port, host_header="probe.invalid"):
    """Connects, sends an HTTP request, returns the first k8sec line of the
    answer, or "none:REASON"."""
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(8)
    try:
        s.connect((addr, port))
        s.sendall(b"GET / HTTP/1.0\r\nHost: %s\r\n\r\n" % host_header.encode())
        data = b""
        while len(data) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except Exception as e:
        return "none:" + err_name(e)
    finally:
        s.close()
    for line in data.decode("latin-1").splitlines():
        if line.startswith("k8sec-"):
            return line.strip()
    return "none:no-token(%d bytes)" % len(data)


def udp_probe(family, addr, port, payload):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(3)
    try:
        s.sendto(payload, (addr, port))
        d, _ = s.recvfrom(512)
        return d.decode("latin-1").strip() or "answered"
    except Exception as e:
        return "none:" + err_name(e)
    finally:
        s.close()


def icmp_probe(addr):
    """An ICMP echo through a raw socket; "reply" if one came from addr."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    except OSError as e:
        return "none:socket:" + err_name(e)
    s.settimeout(3)
    body = b"k8sec-icmp"
    hdr = struct.pack("!BBHHH", 8, 0, 0, 0x4b38, 1)
    csum = 0
    pkt = hdr + body
    for i in range(0, len(pkt), 2):
        csum += (pkt[i] << 8) + (pkt[i + 1] if i + 1 < len(pkt) else 0)
    csum = (csum >> 16) + (csum & 0xFFFF)
    csum = ~(csum + (csum >> 16)) & 0xFFFF
    pkt = struct.pack("!BBHHH", 8, 0, csum, 0x4b38, 1) + body
    try:
        s.sendto(pkt, (addr, 0))
        end = time.time() + 3
        while time.time() < end:
            d, a = s.recvfrom(1500)
            ihl = (d[0] & 15) * 4
            if a[0] == addr and d[ihl] == 0:
                return "reply"
    except Exception as e:
        return "none:" + err_name(e)
    finally:
        s.close()
    return "none:timeout"


def vsock_probe(cid, port):
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((cid, port))
        return "connected"
    except Exception as e:
        return "none:" + err_name(e)
    finally:
        s.close()


def tcp_targets():
    """(name, family, address) of every host address the host listens on."""
    t = [("testnet", socket.AF_INET, CONF["testnet4"]),
         ("linklocal_metadata", socket.AF_INET, "169.254.169.254"),
         ("loopback4", socket.AF_INET, "127.0.0.1"),
         ("testnet6", socket.AF_INET6, CONF["testnet6"]),
         ("loopback6", socket.AF_INET6, "::1")]
    for i, a in enumerate(CONF["helper_addrs"]):
        t.append(("helper_addr%d" % i, socket.AF_INET6 if ":" in a else socket.AF_INET, a))
    return t


def net_redirected():
    """The guest as it boots: the agent's redirect in place.  Literals go
    to the proxy, which must refuse them (and audit it)."""
    # Positive control: the same probe, to a name the policy allows, gets
    # through the proxy to the host's test server.
    say("tcp_allowed_name_control", tcp_probe(socket.AF_INET, CONF["allowed_name"], 80, CONF["allowed_name"]))
    for name, fam, addr in tcp_targets():
        say("tcp_redirected_" + name, tcp_probe(fam, addr, 80, CONF["allowed_name"]))
    # A name the policy does not know: the DNS answer is a refusal.
    try:
        socket.getaddrinfo(CONF["denied_name"], 80)
        say("dns_denied_name", "resolved")
    except socket.gaierror as e:
        say("dns_denied_name", "none:gaierror%d" % e.errno)


NAT_SAVED = "/var/tmp/k8sec-nat.rules"


def nat_rule_count():
    out = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
    return sum(1 for l in out.splitlines() if l.startswith("-A"))


def undo_redirect():
    """Guest root takes the guest's own walls down: nat rules flushed (both
    tools), IPv6 back on with an address and a route on the dummy device.
    The agent's rules are saved first, for restore_redirect."""
    with open(NAT_SAVED, "w") as f:
        f.write(subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout)
    cmds = [["iptables", "-t", "nat", "-F"], ["ip6tables", "-t", "nat", "-F"],
            ["iptables", "-F"], ["nft", "flush", "ruleset"],
            ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0"],
            ["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=0"],
            ["sysctl", "-qw", "net.ipv6.conf.kosa8-void.disable_ipv6=0"],
            ["ip", "-6", "addr", "add", "2001:db8::1/64", "dev", "kosa8-void"],
            ["ip", "-6", "route", "add", "default", "dev", "kosa8-void"]]
    for c in cmds:
        try:  # a tool the image lacks (nft) is no wall
            subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            pass
    say("nat_rules_left", nat_rule_count())


def restore_redirect():
    """Puts back what undo_redirect took down, so that later phases find the
    guest as it boots: their positive controls (the allowed name through the
    proxy) need the agent's redirect."""
    for c in (["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
              ["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
              ["sysctl", "-qw", "net.ipv6.conf.kosa8-void.disable_ipv6=1"]):
        subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(NAT_SAVED) as f:
        r = subprocess.run(["iptables-restore", "-w"], stdin=f, capture_output=True, text=True)
    say("nat_rules_restored", nat_rule_count() if r.returncode == 0 else "bad:" + r.stderr.strip()[:80])


def net_unredirected():
    undo_redirect()
    for name, fam, addr in tcp_targets():
        say("tcp_flushed_" + name, tcp_probe(fam, addr, 80))
    # UDP other than DNS, and DNS itself, straight at the host's servers.
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x09k8secleak\x04test\x00\x00\x01\x00\x01"
    for name, fam, addr in tcp_targets():
        say("udp_flushed_" + name, udp_probe(fam, addr, CONF["udp_port"], b"k8sec-udp-probe"))
        say("dns_flushed_" + name, udp_probe(fam, addr, 53, q))
    # Raw sockets: ICMP echo to the host's addresses.  Control: the guest's
    # own loopback answers the same code.
    say("icmp_own_loopback_control", icmp_probe("127.0.0.1"))
    for name, fam, addr in tcp_targets():
        if fam == socket.AF_INET and addr != "127.0.0.1":
            say("icmp_" + name, icmp_probe(addr))
    # Link-level frames: AF_PACKET.
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
        s.close()
        say("af_packet_socket", "opened")
    except OSError as e:
        say("af_packet_socket", "none:" + err_name(e))
    restore_redirect()


def vsock():
    """vsock to anything but kosa8's own host ports.  Control: the proxy's
    port answers."""
    say("vsock_host_proxy_port_control", vsock_probe(HOST_CID, CONF["proxy_port"]))
    for port in (22, 80, 1024, 1079, 1081, 2049, 8080, 0x7FFFFFFF, 0xFFFFFFFE):
        say("vsock_host_port_%d" % port, vsock_probe(HOST_CID, port))
    for cid in (VMADDR_CID_LOCAL, 0, 3, 4, 5, 100, 0xFFFFFFFE, VMADDR_CID_ANY):
        for port in (CONF["proxy_port"], CONF["dns_port"]):
            say("vsock_cid_%d_port_%d" % (cid, port), vsock_probe(cid, port))


def host_files():
    """Nothing in the guest reaches the host's files.  The marker's text is
    given in two halves so that it is in no file of the guest."""
    marker = CONF["marker_a"] + CONF["marker_b"]
    say("marker_path_absent", "present" if os.path.exists(CONF["marker_path"]) else "absent")
    fs = set()
    for line in open("/proc/mounts"):
        fs.add(line.split()[2])
    say("mounted_fs_types", ",".join(sorted(fs)))
    say("kernel_shared_fs", ",".join(l.split()[-1] for l in open("/proc/filesystems")
                                     if l.split()[-1] in ("9p", "virtiofs", "nfs", "nfs4", "cifs", "fuse", "vboxsf")) or "none")
    say("block_devices", ",".join(sorted(os.listdir("/sys/block"))))
    say("virtio_devices", ",".join(sorted(open("/sys/bus/virtio/devices/%s/device" % d).read().strip()
                                          for d in os.listdir("/sys/bus/virtio/devices"))))
    # Search the places a host file could show up.  Control: the same
    # search finds a marker that was copied in on purpose.
    places = ["/proc/cmdline", "/proc/self/environ", "/sys/firmware", "/etc", "/root", "/tmp",
              "/run", "/var", "/home", "/workspace", "/mnt", "/media", "/srv", "/opt", "/dev/shm"]
    places += ["/proc/%s/environ" % p for p in os.listdir("/proc") if p.isdigit()]
    places += ["/proc/%s/cmdline" % p for p in os.listdir("/proc") if p.isdigit()]
    places = [p for p in places if os.path.exists(p)]

    def grep(text):
        r = subprocess.run(["grep", "-rlsF", "--devices=skip", "-e", text] + places,
                           capture_output=True, text=True, timeout=240)
        return ",".join(r.stdout.split()) or "none"
    say("marker_found_in", grep(marker))
    say("control_marker_found_in", grep(CONF["control_a"] + CONF["control_b"]))


def still_open(s):
    s.setblocking(False)  # a timeout would make recv wait first
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def vsock_flood(count, hold):
    """Thousands of connections to the host's vsock ports, held open."""
    count, hold = int(count), int(hold)
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (count + 256, count + 256))
    # Positive control: the proxy serves this guest before the flood, so a
    # failure after it is the flood's doing, not a path that never worked.
    say("flood_before_control", tcp_probe(socket.AF_INET, CONF["allowed_name"], 80, CONF["allowed_name"]))
    socks, ok, failed = [], 0, {}
    t0 = time.time()
    for i in range(count):
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        s.settimeout(5)
        port = CONF["proxy_port"] if i % 2 == 0 else CONF["dns_port"]
        try:
            s.connect((HOST_CID, port))
            socks.append(s)
            ok += 1
        except OSError as e:
            failed[err_name(e)] = failed.get(err_name(e), 0) + 1
            s.close()
    say("flood_connected", ok)
    say("flood_refused", json.dumps(failed, sort_keys=True).replace(" ", ""))
    say("flood_seconds", int(time.time() - t0))
    time.sleep(hold)
    say("flood_open_at_end", sum(1 for s in socks if still_open(s)))
    for s in socks:
        s.close()
    # After the flood: the proxy answers a new connection again once the
    # supervisor's threads for the closed ones have ended (the first tries
    # may be refused at its limit).  Tried every second, for the time taken.
    t0 = time.time()
    while True:
        r = tcp_probe(socket.AF_INET, CONF["allowed_name"], 80, CONF["allowed_name"])
        if r.startswith("k8sec-") or time.time() - t0 > 30:
            break
        time.sleep(1)
    say("flood_after_control", r)
    say("flood_recovery_seconds", int(time.time() - t0))


def disk(mib):
    """Writes mib MiB to a file (synced), then past the end of the disk
    device."""
    mib = int(mib)
    r = subprocess.run(["dd", "if=/dev/urandom", "of=/var/tmp/k8sec-fill", "bs=1M", "count=%d" % mib,
                        "conv=fsync", "status=none"], capture_output=True, text=True)
    say("disk_fill_rc", r.returncode)
    size = int(open("/sys/block/vda/size").read()) * 512
    say("disk_size", size)
    for off, name in ((size, "at_end"), (size + (1 << 20), "past_end"), (1 << 62, "far_past_end")):
        try:
            fd = os.open("/dev/vda", os.O_WRONLY | os.O_DIRECT)
            try:
                # O_DIRECT wants an aligned buffer: an anonymous map is one.
                n = os.pwrite(fd, mmap.mmap(-1, 4096), off)
                say("disk_write_" + name, "wrote:%d" % n)
            finally:
                os.close(fd)
        except OSError as e:
            say("disk_write_" + name, "none:" + err_name(e))
    os.unlink("/var/tmp/k8sec-fill")
    subprocess.run(["sync"])


def virtq(program):
    """Unbinds the kernel's virtio_rng driver, lets the program attack the
    device, then gives it back and reads entropy through the driver."""
    drv = "/sys/bus/virtio/drivers/virtio_rng"
    devs = [d for d in os.listdir("/sys/bus/virtio/devices")
            if open("/sys/bus/virtio/devices/%s/device" % d).read().strip() == "0x0004"]
    if not devs:
        say("rng_unbound", "bad:no-rng-device")
        return
    try:
        open(drv + "/unbind", "w").write(devs[0])
        say("rng_unbound", "ok" if not os.path.exists(drv + "/" + devs[0]) else "bad:still-bound")
    except OSError as e:
        say("rng_unbound", "bad:" + err_name(e))
        return
    os.chmod(program, 0o755)
    r = subprocess.run([program], capture_output=True, text=True, timeout=300)
    sys.stdout.write(r.stdout)
    sys.stdout.flush()
    if r.returncode:
        say("virtq_program_exit", "bad:%d %s" % (r.returncode, r.stderr.strip()[:200]))
    try:
        open(drv + "/bind", "w").write(devs[0])
        fd = os.open("/dev/hwrng", os.O_RDONLY)
        got = os.read(fd, 32)
        os.close(fd)
        say("rng_after_rebind", "ok" if len(got) == 32 and any(got) else "bad:read %d bytes" % len(got))
    except OSError as e:
        say("rng_after_rebind", "bad:" + err_name(e))


VSOCK_OUT = "/var/tmp/k8sec-vsock.out"
VSOCK_DRV = "/sys/bus/virtio/drivers/vmw_vsock_virtio_transport"


def vsock_attack(program):
    """Starts vsock_attack_run detached and returns at once: unbinding the
    vsock driver ends the connection of the very exec that runs this.  The
    host reads VSOCK_OUT back once the driver is bound again."""
    with open(VSOCK_OUT, "w") as out:
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "vsock-attack-run", program],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True, close_fds=True)
    say("vsock_attack_started", "ok")


def vsock_attack_run(program):
    """Unbinds the kernel's virtio-vsock driver, lets the program send the
    device hostile packets, then binds the driver again (the agent's
    listening socket outlives it, so the host can reach the agent again)."""
    time.sleep(2)  # the exec that started this has returned by now
    devs = [d for d in os.listdir("/sys/bus/virtio/devices")
            if open("/sys/bus/virtio/devices/%s/device" % d).read().strip() == "0x0013"]
    if not devs:
        say("vsock_unbound", "bad:no-vsock-device")
    else:
        try:
            open(VSOCK_DRV + "/unbind", "w").write(devs[0])
            say("vsock_unbound", "ok" if not os.path.exists(VSOCK_DRV + "/" + devs[0]) else "bad:still-bound")
        except OSError as e:
            say("vsock_unbound", "bad:" + err_name(e))
            devs = []
    if devs:
        os.chmod(program, 0o755)
        try:
            r = subprocess.run([program, "vsock"], capture_output=True, text=True, timeout=400)
            sys.stdout.write(r.stdout)
            if r.returncode:
                say("vsockpkt_program_exit", "bad:%d %s" % (r.returncode, r.stderr.strip()[:200]))
        except subprocess.TimeoutExpired:
            say("vsockpkt_program_exit", "bad:timeout")
        try:
            open(VSOCK_DRV + "/bind", "w").write(devs[0])
            say("vsock_rebound", "ok" if os.path.exists(VSOCK_DRV + "/" + devs[0]) else "bad:not-bound")
        except OSError as e:
            say("vsock_rebound", "bad:" + err_name(e))
    print("sec: vsock_attack_done", flush=True)


CHAIN_DEPTH = 12
KOSA8_CA = "/usr/local/share/ca-certificates/kosa8-sandbox.crt"
BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def link_chain(root, name, hostpath):
    """Issue 23's chain under root: d1/.../dN/p -> N times "..", each link
    lexically inside root; then root/name -> d1/.../dN/p/<N times "..">HOSTPATH,
    lexically inside too, but p is root itself, so whoever follows name
    from a copy of root on the host reaches the host's hostpath."""
    dirs = ["d%d" % i for i in range(1, CHAIN_DEPTH + 1)]
    os.makedirs(os.path.join(root, *dirs), exist_ok=True)
    os.symlink("/".join([".."] * CHAIN_DEPTH), os.path.join(root, *dirs, "p"))
    os.symlink("/".join(dirs + ["p"] + [".."] * CHAIN_DEPTH) + hostpath, os.path.join(root, name))


def tree_root(hostpath):
    """Guest root: the control (the host's CA is in the trust store, put
    there by the agent), then the trust store's bundle turned into a
    directory holding the chain to the host's marker, and a 6777 file in
    /workspace."""
    try:
        ca = open(KOSA8_CA).read()
        say("ca_installed_control", "ok" if ca.strip() and ca in open(BUNDLE).read() else "bad:not-in-bundle")
    except OSError as e:
        say("ca_installed_control", "bad:" + err_name(e))
    try:
        os.replace(BUNDLE, "/root/ca-bundle.saved")
        os.mkdir(BUNDLE)
        link_chain(BUNDLE, "ca-certificates.crt", hostpath)
        say("ca_bundle_chain", "planted")
    except OSError as e:
        say("ca_bundle_chain", "bad:" + err_name(e))
    with open("/workspace/suid6777", "w") as f:
        f.write("#!/bin/sh\nid\n")
    os.chmod("/workspace/suid6777", 0o6777)
    say("suid_file", oct(os.stat("/workspace/suid6777").st_mode & 0o7777))


def tree_user(hostpath):
    """A guest user (no root): the same chain under /workspace/esc."""
    try:
        link_chain("/workspace/esc", "ca", hostpath)
        say("workspace_chain", "planted as uid %d" % os.getuid())
    except OSError as e:
        say("workspace_chain", "bad:" + err_name(e))


def big_file(mib):
    with open("/workspace/big.bin", "wb") as f:
        f.write(os.urandom(int(mib) << 20))
    say("big_file", "%s MiB" % mib)


def tree_restore():
    """Puts the trust store back (after the restart that followed it)."""
    if os.path.isdir(BUNDLE) and os.path.exists("/root/ca-bundle.saved"):
        subprocess.run(["rm", "-rf", BUNDLE])
        os.replace("/root/ca-bundle.saved", BUNDLE)
    say("ca_bundle_restored", "ok" if os.path.isfile(BUNDLE) else "bad")


def memory(mib):
    """Touches mib MiB (more than the guest has): the guest's own OOM
    killer ends this process; the host only ever gives the guest its RAM."""
    open("/proc/self/oom_score_adj", "w").write("1000")
    total = int(open("/proc/meminfo").readline().split()[1]) // 1024
    say("guest_memtotal_mib", total)
    print("sec: memory_hog_start", flush=True)
    chunks = []
    for i in range(int(mib)):
        b = bytearray(1 << 20)
        for j in range(0, 1 << 20, 4096):
            b[j] = 1
        chunks.append(b)
        if i % 64 == 0:
            print("sec: memory_touched_mib=%d" % i, flush=True)
    say("memory_hog", "touched all %d MiB" % int(mib))


if __name__ == "__main__":
    globals()[sys.argv[1].replace("-", "_")](*sys.argv[2:])
