#!/usr/bin/env python3
"""An independent verifier of kosa8 audit logs, written from
docs/audit-format.md alone (hashlib for SHA-256, the openssl command for
Ed25519).  tests/unit/test_audit_cli.c runs it against logs kosa8 wrote, to
show that the document is enough and that kosa8 follows it.

    verify_log.py log LOG PUBKEY_PEM        chain, tree, every signed head
    verify_log.py proof PROOF.json PUBKEY_PEM   an inclusion proof

Prints "OK <records> <heads> <unsigned records>" or "BAD <reason>", exits 0
or 1.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile


def sha(b):
    return hashlib.sha256(b).digest()


def leaf_hash(rec):
    return sha(b"\x00" + rec)


def node_hash(l, r):
    return sha(b"\x01" + l + r)


def mth(leaves):
    """RFC 9162 MTH over leaf hashes."""
    if not leaves:
        return sha(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def ed25519_ok(pub_pem, msg, sig):
    with tempfile.TemporaryDirectory() as d:
        m, s = os.path.join(d, "m"), os.path.join(d, "s")
        open(m, "wb").write(msg)
        open(s, "wb").write(sig)
        r = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pub_pem,
                            "-rawin", "-in", m, "-sigfile", s],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return r.returncode == 0


def raw_pub(pub_pem):
    """The 32 raw bytes of an Ed25519 SubjectPublicKeyInfo PEM (its DER ends with them)."""
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", pub_pem, "-outform", "DER"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout
    return der[-32:]


def parse_record(b, off):
    """Section 3.  Returns (length, seq, prev, time) or raises ValueError."""
    if b[off:off + 4] != b"K8AR" or len(b) - off < 66:
        raise ValueError("no record at %d" % off)
    L, seq, t = struct.unpack(">IQQ", b[off + 4:off + 24])
    prev = b[off + 24:off + 56]
    a, bb, c, d = struct.unpack(">HHHI", b[off + 56:off + 66])
    if L != 67 + a + bb + c + d or not 71 <= L <= 1048576 or off + L > len(b):
        raise ValueError("bad length at %d" % off)
    if a > 256 or bb > 256 or c > 256 or bb < 1 or c < 1 or d < 2:
        raise ValueError("bad field lengths at %d" % off)
    names = b[off + 66:off + 66 + a + bb + c]
    if any(x < 0x20 or x == 0x7F for x in names):
        raise ValueError("control byte in a name at %d" % off)
    det = b[off + 66 + a + bb + c:off + L - 1]
    if det[:1] != b"{" or det[-1:] != b"}" or b[off + L - 1] != 0x0A:
        raise ValueError("bad details or end at %d" % off)
    return L, seq, prev, t


HEX = "0123456789abcdef"
U64 = 2 ** 64 - 1


def hex_field(f, n):
    """Exactly 2n lower-case hex digits (section 5: one spelling only)."""
    if len(f) != 2 * n or any(c not in HEX for c in f):
        raise ValueError("bad hex field")
    return bytes.fromhex(f)


def dec_field(f):
    """Decimal digits, no leading zero, no sign, at most 2^64-1."""
    if not f or any(c not in "0123456789" for c in f) or (len(f) > 1 and f[0] == "0") \
            or int(f) > U64:
        raise ValueError("bad decimal field")
    return int(f)


def parse_head(line):
    """One head line without its newline, as str or bytes."""
    if isinstance(line, bytes):
        if any(c >= 0x80 for c in line):
            raise ValueError("bad head line")
        line = line.decode("ascii")
    f = line.split(" ")
    if len(f) != 10 or f[0] != "K8AH2":
        raise ValueError("bad head line")
    return {"id": hex_field(f[1], 16), "created": dec_field(f[2]), "index": dec_field(f[3]),
            "prev": hex_field(f[4], 32), "size": dec_field(f[5]), "time": dec_field(f[6]),
            "root": hex_field(f[7], 32), "pub": hex_field(f[8], 32), "sig": hex_field(f[9], 64)}


def torn(t):
    """Section 7: bytes after the last whole record that are zeros or the
    start of one record whose length runs past the end, with no whole record
    anywhere after them."""
    start = t[:4] == b"K8AR"[:len(t)]
    if start and len(t) >= 8:
        L = struct.unpack(">I", t[4:8])[0]
        start = 71 <= L <= 1048576
        if start and len(t) >= 66:
            a, bb, c, d = struct.unpack(">HHHI", t[56:66])
            start = L == 67 + a + bb + c + d and len(t) < L
    if not start and t.strip(b"\x00") != b"":
        return False
    for q in range(1, len(t) - 70):
        try:
            parse_record(t[q:], 0)
            return False
        except ValueError:
            pass
    return True


def read_heads(path):
    """The whole lines of PATH.heads; an unterminated last line is a torn
    write (never acknowledged) unless it is longer than any head line."""
    if not os.path.exists(path):
        return []
    raw = open(path, "rb").read()
    lines = raw.split(b"\n")
    if len(lines[-1]) >= 512:
        raise ValueError("unterminated head line")
    return [parse_head(x) for x in lines[:-1]]


def head_msg(h):
    """Section 5: every field of the line but the signature."""
    return (b"KOSA8 AUDIT TREE HEAD V2\n" + h["id"] + struct.pack(">QQ", h["created"], h["index"])
            + h["prev"] + struct.pack(">QQ", h["size"], h["time"]) + h["root"] + h["pub"])


def verify_log(path, pub):
    b = open(path, "rb").read()
    if len(b) < 32:
        return "BAD header: %d bytes (wiped or cut)" % len(b)
    if b[:4] != b"K8AL" or struct.unpack(">I", b[4:8])[0] != 2:
        return "BAD header"
    log_id, created = b[8:24], struct.unpack(">Q", b[24:32])[0]
    leaves, times, off, prev, last_t = [], [], 32, bytes(32), created
    is_torn = False
    while off < len(b):
        try:
            L, seq, p, t = parse_record(b, off)
        except ValueError as e:
            if torn(b[off:]):
                is_torn = True
                break  # torn tail: a note, unless a head covers it
            return "BAD malformed record %d (%s)" % (len(leaves), e)
        if seq != len(leaves) or p != prev:
            return "BAD chain at record %d" % len(leaves)
        if t < last_t:
            return "BAD time goes backwards at record %d" % len(leaves)
        h = leaf_hash(b[off:off + L])
        leaves.append(h)
        times.append(t)
        prev, off, last_t = h, off + L, t
    try:
        heads = read_heads(path + ".heads")
    except ValueError as e:
        return "BAD heads file (%s)" % e
    if not heads:
        return "BAD no signed head"
    trusted = raw_pub(pub)
    for i, h in enumerate(heads):
        if not ed25519_ok(pub, head_msg(h), h["sig"]) or h["pub"] != trusted:
            return "BAD head %d signature" % i
        if h["id"] != log_id or h["created"] != created:
            return "BAD head %d belongs to another log" % i
        if h["index"] != i:
            return "BAD head %d missing" % i
        if h["prev"] != (sha(head_msg(heads[i - 1])) if i else bytes(32)):
            return "BAD head %d does not follow head %d" % (i, i - 1)
        if i and (h["size"] < heads[i - 1]["size"] or h["time"] < heads[i - 1]["time"]):
            return "BAD head %d order" % i
        if h["size"] > len(leaves):
            return "BAD %s: head %d covers %d records" % ("malformed" if is_torn else "truncated",
                                                         i, h["size"])
        if mth(leaves[:h["size"]]) != h["root"]:
            return "BAD head %d root" % i
        if h["size"] and h["time"] < times[h["size"] - 1]:
            return "BAD head %d older than its records" % i
    return "OK %d %d %d" % (len(leaves), len(heads), len(leaves) - heads[-1]["size"])


def verify_inclusion(idx, size, lh, path, root):
    """RFC 9162 2.1.3.2, transcribed."""
    if idx >= size:
        return False
    fn, sn, r = idx, size - 1, lh
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_proof(path, pub):
    d = json.load(open(path))
    if d.get("type") != "kosa8-audit-inclusion-proof-v1":
        return "BAD type"
    h = parse_head(d["head"])
    if not ed25519_ok(pub, head_msg(h), h["sig"]) or h["pub"] != raw_pub(pub):
        return "BAD head signature"
    leaf = bytes.fromhex(d["leaf"])
    L, seq, _, _ = parse_record(leaf, 0)
    if L != len(leaf) or seq != d["leaf_index"] or h["size"] != d["tree_size"]:
        return "BAD leaf or size"
    ap = [bytes.fromhex(x) for x in d["audit_path"]]
    if not verify_inclusion(seq, h["size"], leaf_hash(leaf), ap, h["root"]):
        return "BAD path"
    return "OK %d %d" % (seq, h["size"])


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("log", "proof"):
        sys.exit(__doc__)
    out = (verify_log if sys.argv[1] == "log" else verify_proof)(sys.argv[2], sys.argv[3])
    print(out)
    sys.exit(0 if out.startswith("OK") else 1)


main()
