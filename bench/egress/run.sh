#!/usr/bin/env bash
# Egress proxy benchmark, host side, on loopback: the same plain-HTTP
# exchanges directly to a local server, through kosa8's proxy path
# (egress_connect_serve behind a unix socket, as the supervisor runs it) and
# through squid configured with the same one-name allow-list, interleaved in
# rounds in one run; then TLS without CONNECT, direct and through kosa8 (SNI
# checked, then relayed).  Prints a Markdown report (bench/results/egress.md
# holds one).
#
#   bench/egress/run.sh            full run (a few minutes)
#   bench/egress/run.sh --quick    smaller counts, for a smoke test
#
# squid comes from Debian (package squid): installed with apt-get when it is
# missing and this runs as root; otherwise the run stops and says so.  Not
# part of CI.  REL_DIR picks the build folder (default build).  KOSA8_LIB
# links another build's libkosa8.a instead (e.g. main's, for a before and
# after with the same bench), KOSA8_REV names it in the report.
#
# kosa8's proxy resolves the upstream name itself, as the supervisor does
# (the host's resolver, then its public-address check), so as root the
# run goes into a network and mount namespace of its own: 203.0.113.1
# (TEST-NET-3: public by the proxy's rules, routed nowhere) on that
# namespace's loopback device, and an /etc/hosts there naming
# api.test.example at it, which squid reads too (hosts_file).  Every path
# connects to that address.  BENCH_RESOLVE=0, or not root: everything on
# 127.0.0.1 and kosa8's path resolves nothing (the runs before
# 2026-12-07 night).  BENCH_DNS=1 (in the namespace): neither /etc/hosts
# nor squid's hosts_file names it; a DNS server in the namespace does
# (bench/egress/one_name_dns.py, TTL 60), named by a bind-mounted
# /etc/resolv.conf, and both proxies ask it.
set -euo pipefail
self=$(readlink -f "$0")
cd "$(dirname "$self")/../.."
REL_DIR=${REL_DIR:-build}
quick=${1:-}

if ! command -v squid >/dev/null; then
	[ "$(id -u)" = 0 ] || { echo "bench/egress: squid is not installed (apt-get install squid)" >&2; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends squid >/dev/null
fi
addr=127.0.0.1
if [ "${BENCH_RESOLVE:-1}" = 1 ] && [ "$(id -u)" = 0 ]; then
	[ -n "${BENCH_IN_NS:-}" ] || exec env BENCH_IN_NS=1 unshare --mount --net --propagation private "$self" "$@"
	addr=203.0.113.1
	ip link set lo up
	ip addr add "$addr/32" dev lo
	export BENCH_ADDR=$addr
fi

lib=${KOSA8_LIB:-$REL_DIR/libkosa8.a}
[ -n "${KOSA8_LIB:-}" ] || make -s REL_DIR="$REL_DIR" "$REL_DIR/libkosa8.a" >/dev/null
mkdir -p "$REL_DIR/bench"
bin=$(mktemp "$REL_DIR/bench/bench_egress.XXXXXX")
cc -O2 -std=gnu11 -Wall -Wextra -Werror -Isrc -D_GNU_SOURCE -pthread bench/egress/bench_egress.c \
	"$lib" -lcjson -lssl -lcrypto -lz -lpthread -o "$bin"

work=$(mktemp -d /tmp/kosa8-egress-bench.XXXXXX)
squid_pid=
cleanup() {
	[ -z "$squid_pid" ] || { kill "$squid_pid" 2>/dev/null; wait "$squid_pid" 2>/dev/null || true; }
	[ -z "${dns_pid:-}" ] || kill "$dns_pid" 2>/dev/null || true
	rm -rf "$work" "$bin"
}
trap cleanup EXIT

# The upstream server's port is only known inside bench_egress, so squid
# gets the name from its own hosts file and every port of it: the
# allow-list is the name, as in kosa8's policy.  No cache, no access log
# (kosa8's side drops its audit records too), one worker.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dns_pid=
if [ "$addr" != 127.0.0.1 ] && [ "${BENCH_DNS:-0}" = 1 ]; then
	printf '127.0.0.1 localhost\n' >"$work/hosts"
	printf 'nameserver 127.0.0.1\n' >"$work/resolv.conf"
	mount --bind "$work/resolv.conf" /etc/resolv.conf
	python3 bench/egress/one_name_dns.py "$addr" &
	dns_pid=$!
else
	printf '127.0.0.1 localhost\n%s api.test.example\n' "$addr" >"$work/hosts"
fi
[ "$addr" = 127.0.0.1 ] || mount --bind "$work/hosts" /etc/hosts
cat >"$work/squid.conf" <<EOF
http_port 127.0.0.1:$port
acl allowed dstdomain api.test.example
http_access allow allowed
http_access deny all
hosts_file $work/hosts
cache deny all
cache_mem 0 MB
access_log none
cache_store_log none
cache_log $work/cache.log
pid_filename $work/squid.pid
coredump_dir $work
pinger_enable off
visible_hostname kosa8-bench
workers 1
shutdown_lifetime 0 seconds
EOF
# squid started as root runs as the proxy user, which writes the cache log.
[ "$(id -u)" != 0 ] || chown proxy: "$work"
squid -N -f "$work/squid.conf" &
squid_pid=$!
for _ in $(seq 1 150); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.2
done
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "squid did not start:"; cat "$work/cache.log"; exit 1; }

if [ "$quick" = --quick ]; then
	set -- 1 2000 300 64
else
	set -- 3 20000 2000 256
fi

echo "## Run of $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo
echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; kernel $(uname -r)"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- $(squid -v | head -1); kosa8 ${KOSA8_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")}"
echo "- rounds: $1; keep-alive requests per round: $2; new connections per round: $3; download: $4 MiB, 5 per path and round"
[ -z "$dns_pid" ] || echo "- the name from a DNS server in the namespace (BENCH_DNS=1), not from a hosts file"
echo "- upstream server: ${BENCH_UPSTREAM:-pool} (threads that accept for themselves; spawn: a thread per connection)"
echo
"$bin" "$@" "$port"
echo
echo "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
