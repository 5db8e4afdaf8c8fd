#!/usr/bin/env python3
# The DNS server of bench/egress/run.sh's namespace with BENCH_DNS=1: UDP
# on 127.0.0.1:53, api.test.example A ADDR (TTL 60, as a real zone might
# give), no other record; every other name NXDOMAIN.  So that both proxies
# resolve the name over DNS, as on a host without /etc/hosts entries.
#
#   one_name_dns.py ADDR
import socket, struct, sys

addr = socket.inet_aton(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
while True:
    q, peer = s.recvfrom(512)
    if len(q) < 12:
        continue
    qid, = struct.unpack("!H", q[:2])
    i = 12
    labels = []
    while i < len(q) and q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode(errors="replace")); i += 1 + q[i]
    qtype, qclass = struct.unpack("!HH", q[i + 1:i + 5])
    question = q[12:i + 5]
    name = ".".join(labels).lower()
    if name != "api.test.example":
        s.sendto(struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question, peer)
    elif qtype == 1:
        ans = struct.pack("!HHHIH", 0xc00c, 1, 1, 60, 4) + addr
        s.sendto(struct.pack("!HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question + ans, peer)
    else:
        s.sendto(struct.pack("!HHHHHH", qid, 0x8180, 1, 0, 0, 0) + question, peer)
