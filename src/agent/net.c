/* The guest's only road out (DESIGN.md "No network device"; docs/egress.md).
 *
 * The guest has no NIC.  At boot the agent gives it loopback, a dummy
 * interface with the default route (so that connect() to any address gets
 * as far as netfilter instead of failing with ENETUNREACH), IPv6 off, and
 * nat OUTPUT rules:
 *
 *   TCP to anything but loopback  -> REDIRECT to the agent (127.0.0.1:1081)
 *   UDP and TCP to port 53        -> the agent's DNS listener (127.0.0.53:53)
 *
 * Everything else (other UDP, ICMP, raw sockets) goes out of the dummy
 * device, which drops every packet: there is nothing behind it.  A guest
 * root that flushes the rules reaches exactly that nothing.
 *
 * The agent then forwards, in one epoll loop (one process, no thread per
 * connection):
 *   - each redirected TCP connection: SO_ORIGINAL_DST, a vsock connection to
 *     the host (WIRE_HOST_CID) port EGRESS_TCP_PORT, the "K8E1" header
 *     (src/proxy/egress.h), then bytes both ways with bounded buffers (a
 *     full buffer stops reading its source: back-pressure), half-closes
 *     passed on;
 *   - DNS over UDP: each query, its id replaced by one of our own, over one
 *     of a few vsock streams to port EGRESS_DNS_PORT with 2-byte length
 *     framing; the answer goes back to the client that asked with its own
 *     id.  Several streams, so that a query held for an approval on the
 *     host does not hold every other query behind it;
 *   - DNS over TCP: already length-framed, so relayed as a byte stream to
 *     port EGRESS_DNS_PORT.
 * Nothing here decides anything: the host checks every name, address, SNI
 * and Host header itself.
 *
 * The interfaces and rules are set with ip(8) and iptables-restore(8) from
 * the image (build.sh always installs iptables): one batch each, applied
 * atomically, readable in this file as the text an administrator would
 * type.  Encoding nf_tables rules over netlink by hand would be a few
 * hundred lines that iptables already maintains. */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/netfilter_ipv4.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define NET_CONN_MAX 512          /* relayed TCP connections at once */
#define RELAY_BUF (64 * 1024)     /* per direction per connection */
#define DNS_STREAMS 4
#define DNS_SLOTS 256             /* queries in flight per stream */
#define DNS_MSG_IN 4096           /* a UDP query larger than this is dropped */
#define DNS_ANSWER_MAX 4096       /* a framed answer larger than this ends the stream */
#define DNS_PENDING_MS 150000     /* longer than the host's approval timeout */
#define DNS_OUT_BUF (16 * 1024)
#define VOID_DEV "kosa8-void"

struct net_opts net_opts = {
	.upstream = NULL,
	.tcp_listen = "127.0.0.1:1081",
	.dns_listen = "127.0.0.53:53",
};

/* ---------------------------------------------------------------- set-up */

/* Runs argv with text on its stdin; 0 if it exited 0. */
static int run_with_input(const char *const argv[], const char *text)
{
	static char *const env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	int p[2], status;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (pid == 0) {
		dup2(p[0], 0);
		dup2(2, 1);   /* anything it says goes to the console */
		/* execvpe searches the caller's PATH, not env's, and the kernel
		 * starts PID 1 without one (glibc then looks in /bin:/usr/bin
		 * only, missing iptables in /usr/sbin). */
		setenv("PATH", env[0] + 5, 1);
		execvpe(argv[0], (char *const *)argv, env);
		fprintf(stderr, "kosa8-agent: %s: %s\n", argv[0], strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	close(p[0]);
	int werr = write_all(p[1], text, strlen(text));
	close(p[1]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (werr)
		return werr;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
		return -ENOENT;   /* not there: the caller may try another name */
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* The address on the dummy device only gives connect() a source address;
 * 192.0.2.1 is TEST-NET-1 (RFC 5737), routed nowhere.  The kernel makes a
 * dummy0 of its own (CONFIG_DUMMY, numdummies=1): renamed when present, so
 * that the guest has exactly lo and kosa8-void. */
static const char ip_batch_tail[] =
	"link set " VOID_DEV " up\n"
	"addr add 192.0.2.1/32 dev " VOID_DEV "\n"
	"route add default dev " VOID_DEV "\n";

static const char nat_rules[] =
	"*nat\n"
	":PREROUTING ACCEPT [0:0]\n"
	":INPUT ACCEPT [0:0]\n"
	":OUTPUT ACCEPT [0:0]\n"
	":POSTROUTING ACCEPT [0:0]\n"
	"-A OUTPUT -p udp --dport 53 -j DNAT --to-destination 127.0.0.53:53\n"
	"-A OUTPUT -p tcp --dport 53 -j DNAT --to-destination 127.0.0.53:53\n"
	"-A OUTPUT -d 127.0.0.0/8 -j RETURN\n"
	"-A OUTPUT -p tcp -j REDIRECT --to-ports 1081\n"
	"COMMIT\n";

/* iptables-restore through Debian's alternatives link first; the nft
 * variant by its own name if that link is missing. */
static int load_rules(void)
{
	static const char *const names[] = { "iptables-restore", "iptables-nft-restore" };
	int err = -ENOENT;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && err == -ENOENT; i++) {
		const char *argv[] = { names[i], "-w", NULL };
		err = run_with_input(argv, nat_rules);
	}
	return err;
}

int net_setup(void)
{
	static const char *const ip[] = { "ip", "-batch", "-", NULL };
	char batch[512];
	int err = 0, e;

	/* IPv6 off: the host's synthetic addresses are IPv4 and a v6 socket
	 * should fail at once rather than wait on the dummy device. */
	if ((e = write_text_file("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1")) ||
	    (e = write_text_file("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1"))) {
		fprintf(stderr, "kosa8-agent: turning IPv6 off: %s\n", strerror(-e));
		err = err ? err : e;
	}
	snprintf(batch, sizeof(batch), "link set lo up\n%s%s",
		 access("/sys/class/net/dummy0", F_OK) == 0 ? "link set dummy0 name " VOID_DEV "\n" :
							      "link add " VOID_DEV " type dummy\n",
		 ip_batch_tail);
	if ((e = run_with_input(ip, batch))) {
		fprintf(stderr, "kosa8-agent: setting up loopback and %s failed\n", VOID_DEV);
		err = err ? err : e;
	}
	if ((e = load_rules())) {
		fprintf(stderr, "kosa8-agent: installing the nat rules failed (%s): no network in this guest\n",
			strerror(-e));
		err = err ? err : e;
	}
	return err;
}

/* "A.B.C.D:PORT" -> sockaddr.  -EINVAL if malformed. */
static int parse_inet(const char *spec, struct sockaddr_in *sa)
{
	char host[32];
	const char *colon = strrchr(spec, ':');
	char *end;
	unsigned long port;

	if (!colon || (size_t)(colon - spec) >= sizeof(host))
		return -EINVAL;
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = 0;
	port = strtoul(colon + 1, &end, 10);
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	if (!colon[1] || *end || port == 0 || port > 65535 || inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return -EINVAL;
	return 0;
}

static int bind_inet(const char *spec, int type)
{
	struct sockaddr_in sa;
	int one = 1, fd, err;

	if ((err = parse_inet(spec, &sa)))
		return err;
	fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    (type == SOCK_STREAM && listen(fd, 128) < 0)) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* A non-blocking connection to the host's port: vsock CID 2, or in tests
 * the unix socket "<prefix>_<port>" (the VMM's vsock device does the same
 * mapping on the host, docs/vsock.md).  *pending is set while connecting. */
static int connect_host(uint32_t port, bool *pending)
{
	int fd, rc;

	if (net_opts.upstream) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		if ((size_t)snprintf(a.sun_path, sizeof(a.sun_path), "%s_%u", net_opts.upstream, port) >=
		    sizeof(a.sun_path))
			return -ENAMETOOLONG;
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	} else {
		struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_cid = WIRE_HOST_CID, .svm_port = port };
		fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	}
	*pending = rc < 0 && errno == EINPROGRESS;
	if (rc < 0 && !*pending) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* ---------------------------------------------------------------- loop */

enum ev_kind { EV_TCP_LISTEN, EV_DNS_UDP, EV_DNS_TCP_LISTEN, EV_RELAY, EV_DNS_STREAM };

struct ev {
	enum ev_kind kind;
	int fd;
	uint32_t mask;      /* what epoll has now; 0 = not registered */
	void *owner;
};

struct half {                /* bytes from one side waiting for the other */
	uint8_t *buf;
	size_t off, len;
	bool eof;            /* the source said EOF */
	bool shut;           /* ... and the sink got shutdown(SHUT_WR) */
};

struct relay {
	struct ev guest, host;
	struct half up, down;   /* up: guest -> host */
	bool connecting, dead;
	struct relay *next, **pprev;
};

struct dns_slot {
	bool used;
	uint16_t id, orig_id;
	uint64_t since;
	struct sockaddr_in from;
};

struct dns_stream {
	struct ev ev;
	bool connecting;
	uint8_t out[DNS_OUT_BUF];
	size_t out_off, out_len;
	uint8_t in[2 + DNS_ANSWER_MAX];
	size_t in_len;
	struct dns_slot slot[DNS_SLOTS];
	unsigned pending;
	uint16_t gen;
};

struct loop {
	int ep;
	int spare;          /* held in reserve for refusing when out of fds */
	struct ev tcp_listen, dns_udp, dns_tcp_listen;
	struct relay *relays, *dead;
	unsigned nrelays;
	struct dns_stream dns[DNS_STREAMS];
};

static void ev_want(struct loop *l, struct ev *e, uint32_t mask)
{
	struct epoll_event ee = { .events = mask, .data.ptr = e };

	if (e->fd < 0 || mask == e->mask)
		return;
	/* A registered fd always reports HUP/ERR, even with an empty mask: an
	 * fd we want nothing from leaves the set, or a hung-up peer whose data
	 * we cannot take yet would spin the loop. */
	if (!mask)
		epoll_ctl(l->ep, EPOLL_CTL_DEL, e->fd, NULL);
	else
		epoll_ctl(l->ep, e->mask ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, e->fd, &ee);
	e->mask = mask;
}

static void ev_close(struct loop *l, struct ev *e)
{
	if (e->fd < 0)
		return;
	if (e->mask)
		epoll_ctl(l->ep, EPOLL_CTL_DEL, e->fd, NULL);
	close(e->fd);
	e->fd = -1;
	e->mask = 0;
}

/* ---- TCP relays ---- */

/* Closes both sides now; the memory goes after the current batch of
 * events, which may still name this relay's other descriptor. */
static void relay_free(struct loop *l, struct relay *r)
{
	ev_close(l, &r->guest);
	ev_close(l, &r->host);
	*r->pprev = r->next;
	if (r->next)
		r->next->pprev = r->pprev;
	r->dead = true;
	r->next = l->dead;
	l->dead = r;
	l->nrelays--;
}

static void relays_reap(struct loop *l)
{
	while (l->dead) {
		struct relay *r = l->dead;
		l->dead = r->next;
		free(r->up.buf);
		free(r->down.buf);
		free(r);
	}
}

static void relay_update(struct loop *l, struct relay *r)
{
	uint32_t g = 0, h = 0;

	if (!r->up.eof && r->up.off + r->up.len < RELAY_BUF)
		g |= EPOLLIN;
	if (r->down.len)
		g |= EPOLLOUT;
	if (r->connecting) {
		h = EPOLLOUT;
	} else {
		if (!r->down.eof && r->down.off + r->down.len < RELAY_BUF)
			h |= EPOLLIN;
		if (r->up.len)
			h |= EPOLLOUT;
	}
	ev_want(l, &r->guest, g);
	ev_want(l, &r->host, h);
}

/* Reads what fits from src into h.  -errno on a socket error. */
static int half_fill(struct half *h, int src)
{
	if (h->off && h->off + h->len == RELAY_BUF) {
		memmove(h->buf, h->buf + h->off, h->len);
		h->off = 0;
	}
	size_t room = RELAY_BUF - h->off - h->len;
	if (h->eof || !room)
		return 0;
	ssize_t n = read(src, h->buf + h->off + h->len, room);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0)
		h->eof = true;
	h->len += (size_t)n;
	return 0;
}

/* Writes what dst takes, then passes an EOF on once h is empty. */
static int half_drain(struct half *h, int dst)
{
	if (h->len) {
		ssize_t n = send(dst, h->buf + h->off, h->len, MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		h->off += (size_t)n;
		h->len -= (size_t)n;
		if (!h->len)
			h->off = 0;
	}
	if (!h->len && h->eof && !h->shut) {
		shutdown(dst, SHUT_WR);
		h->shut = true;
	}
	return 0;
}

static void relay_event(struct loop *l, struct relay *r, struct ev *e, uint32_t events)
{
	int err = 0;

	if (e == &r->host && r->connecting) {
		socklen_t sl = sizeof(err);
		if (getsockopt(r->host.fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0 || err) {
			relay_free(l, r);   /* the host refused: the guest's connection ends */
			return;
		}
		r->connecting = false;
	}
	if (events & EPOLLERR)
		err = -EIO;
	/* Read first, so that data and a hang-up arriving together are both
	 * taken; then write both ways. */
	if (!err && e == &r->guest && (events & (EPOLLIN | EPOLLHUP)))
		err = half_fill(&r->up, r->guest.fd);
	if (!err && e == &r->host && (events & (EPOLLIN | EPOLLHUP)))
		err = half_fill(&r->down, r->host.fd);
	if (!err && !r->connecting)
		err = half_drain(&r->up, r->host.fd);
	if (!err)
		err = half_drain(&r->down, r->guest.fd);
	if (err || (r->up.shut && r->down.shut)) {
		relay_free(l, r);
		return;
	}
	relay_update(l, r);
}

/* A relay from the accepted guest fd to host port; the header (may be
 * empty) is the first thing the host reads. */
static int relay_new(struct loop *l, int gfd, uint32_t port, const uint8_t *hdr, size_t hlen)
{
	struct relay *r = calloc(1, sizeof(*r));
	int hfd;

	if (!r || !(r->up.buf = malloc(RELAY_BUF)) || !(r->down.buf = malloc(RELAY_BUF))) {
		if (r)
			free(r->up.buf);
		free(r);
		return -ENOMEM;
	}
	hfd = connect_host(port, &r->connecting);
	if (hfd < 0) {
		free(r->up.buf);
		free(r->down.buf);
		free(r);
		return hfd;
	}
	r->guest = (struct ev){ .kind = EV_RELAY, .fd = gfd, .owner = r };
	r->host = (struct ev){ .kind = EV_RELAY, .fd = hfd, .owner = r };
	if (hlen)
		memcpy(r->up.buf, hdr, hlen);
	r->up.len = hlen;
	r->next = l->relays;
	r->pprev = &l->relays;
	if (l->relays)
		l->relays->pprev = &r->next;
	l->relays = r;
	l->nrelays++;
	relay_update(l, r);
	return 0;
}

/* The K8E1 header for an IPv4 destination (agentproto/wire.h). */
size_t net_egress_header(uint8_t *out, const struct sockaddr_in *dst)
{
	memcpy(out, EGRESS_HDR_MAGIC, EGRESS_HDR_MAGIC_LEN);
	out[4] = 4;
	out[5] = 0;
	memcpy(out + 6, &dst->sin_port, 2);        /* already big-endian */
	memcpy(out + 8, &dst->sin_addr.s_addr, 4); /* network order */
	return EGRESS_HDR_V4_LEN;
}

/* Out of descriptors, accept() fails and leaves the client queued: the
 * listener stays readable and retrying never ends.  Giving up the spare
 * descriptor lets the client be taken and closed (refused, as at
 * NET_CONN_MAX).  -EAGAIN: stop accepting for this turn. */
static int refuse_queued(struct loop *l, int lfd)
{
	int fd;

	if (l->spare < 0 && (l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		return -EAGAIN;
	close(l->spare);
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0)
		close(fd);
	l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return fd >= 0 ? 0 : -EAGAIN;
}

/* An accepted fd; 0: nothing to serve, try the next; -EAGAIN: stop for
 * this turn (queue empty, or an error that a retry would only repeat). */
static int accept_one(struct loop *l, int lfd)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0 && (errno == EMFILE || errno == ENFILE))
		return refuse_queued(l, lfd);
	if (fd < 0)
		return errno == EINTR || errno == ECONNABORTED ? 0 : -EAGAIN;
	if (l->nrelays >= NET_CONN_MAX) {
		close(fd);   /* the guest sees a reset-like close, not a hang */
		return 0;
	}
	return fd;
}

static void on_tcp_accept(struct loop *l)
{
	for (;;) {
		struct sockaddr_in dst;
		socklen_t sl = sizeof(dst);
		uint8_t hdr[EGRESS_HDR_V4_LEN];
		int fd = accept_one(l, l->tcp_listen.fd);

		if (fd == -EAGAIN)
			return;
		if (fd <= 0)
			continue;
		/* Where the guest meant to go; a connection made to this port
		 * directly (not redirected) or to loopback has no business here. */
		if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &sl) < 0 || dst.sin_family != AF_INET ||
		    (ntohl(dst.sin_addr.s_addr) >> 24) == 127) {
			close(fd);
			continue;
		}
		if (relay_new(l, fd, EGRESS_TCP_PORT, hdr, net_egress_header(hdr, &dst)) < 0)
			close(fd);
	}
}

static void on_dns_tcp_accept(struct loop *l)
{
	for (;;) {
		int fd = accept_one(l, l->dns_tcp_listen.fd);

		if (fd == -EAGAIN)
			return;
		if (fd <= 0)
			continue;
		/* TCP DNS is framed as the host wants it already (RFC 1035
		 * 4.2.2): a plain byte relay. */
		if (relay_new(l, fd, EGRESS_DNS_PORT, NULL, 0) < 0)
			close(fd);
	}
}

/* ---- DNS over UDP ---- */

static void dns_stream_reset(struct loop *l, struct dns_stream *s)
{
	ev_close(l, &s->ev);
	s->connecting = false;
	s->out_off = s->out_len = 0;
	s->in_len = 0;
	memset(s->slot, 0, sizeof(s->slot));
	s->pending = 0;
}

static void dns_stream_update(struct loop *l, struct dns_stream *s)
{
	uint32_t m = EPOLLIN;

	if (s->connecting || s->out_len)
		m |= EPOLLOUT;
	ev_want(l, &s->ev, m);
}

static struct dns_stream *dns_pick(struct loop *l)
{
	struct dns_stream *best = &l->dns[0];

	for (int i = 1; i < DNS_STREAMS; i++)
		if (l->dns[i].pending < best->pending)
			best = &l->dns[i];
	return best->pending < DNS_SLOTS ? best : NULL;
}

/* Queues one query (our id in place of the client's) on a stream. */
static void dns_forward(struct loop *l, uint8_t *q, size_t len, const struct sockaddr_in *from)
{
	struct dns_stream *s = dns_pick(l);
	int fd, i;

	if (!s || s->out_len + s->out_off + 2 + len > sizeof(s->out))
		return;   /* everything busy: dropped, as UDP may be; the client retries */
	if (s->ev.fd < 0) {
		fd = connect_host(EGRESS_DNS_PORT, &s->connecting);
		if (fd < 0)
			return;
		s->ev = (struct ev){ .kind = EV_DNS_STREAM, .fd = fd, .owner = s };
	}
	for (i = 0; i < DNS_SLOTS && s->slot[i].used; i++)
		;
	struct dns_slot *sl = &s->slot[i];
	sl->used = true;
	sl->orig_id = (uint16_t)(q[0] << 8 | q[1]);
	/* Low byte: the slot; high byte: a counter, so that a late answer for
	 * an earlier use of the slot does not reach the wrong client. */
	sl->id = (uint16_t)(++s->gen << 8 | i);
	sl->since = boottime_ms();
	sl->from = *from;
	s->pending++;
	q[0] = (uint8_t)(sl->id >> 8);
	q[1] = (uint8_t)sl->id;
	uint8_t *o = s->out + s->out_off + s->out_len;
	o[0] = (uint8_t)(len >> 8);
	o[1] = (uint8_t)len;
	memcpy(o + 2, q, len);
	s->out_len += 2 + len;
	dns_stream_update(l, s);
}

static void on_dns_udp(struct loop *l)
{
	uint8_t q[DNS_MSG_IN];

	for (;;) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(l->dns_udp.fd, q, sizeof(q), MSG_TRUNC, (struct sockaddr *)&from, &fl);
		if (n < 0)
			return;
		/* Shorter than a header, or cut short: nothing worth asking. */
		if (n < 12 || (size_t)n > sizeof(q) || from.sin_family != AF_INET)
			continue;
		dns_forward(l, q, (size_t)n, &from);
	}
}

/* One framed answer from the host: back to the client that asked. */
static void dns_answer(struct loop *l, struct dns_stream *s, uint8_t *a, size_t len)
{
	uint16_t id;
	struct dns_slot *sl;

	if (len < 12)
		return;
	id = (uint16_t)(a[0] << 8 | a[1]);
	sl = &s->slot[id & 0xff];
	if (!sl->used || sl->id != id)
		return;   /* expired, or not ours */
	a[0] = (uint8_t)(sl->orig_id >> 8);
	a[1] = (uint8_t)sl->orig_id;
	sendto(l->dns_udp.fd, a, len, MSG_DONTWAIT, (struct sockaddr *)&sl->from, sizeof(sl->from));
	sl->used = false;
	s->pending--;
}

static int dns_stream_read(struct loop *l, struct dns_stream *s)
{
	ssize_t n = read(s->ev.fd, s->in + s->in_len, sizeof(s->in) - s->in_len);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0)
		return -ECONNRESET;
	s->in_len += (size_t)n;
	for (;;) {
		size_t flen;
		if (s->in_len < 2)
			return 0;
		flen = (size_t)s->in[0] << 8 | s->in[1];
		if (flen > DNS_ANSWER_MAX)
			return -EBADMSG;
		if (s->in_len < 2 + flen)
			return 0;
		dns_answer(l, s, s->in + 2, flen);
		memmove(s->in, s->in + 2 + flen, s->in_len - 2 - flen);
		s->in_len -= 2 + flen;
	}
}

static void dns_stream_event(struct loop *l, struct dns_stream *s, uint32_t events)
{
	int err = 0;

	if (s->connecting) {
		socklen_t sl = sizeof(err);
		if (getsockopt(s->ev.fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0 || err) {
			dns_stream_reset(l, s);   /* queries lost; clients retry */
			return;
		}
		s->connecting = false;
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		err = dns_stream_read(l, s);
	if (!err && s->out_len) {
		ssize_t n = send(s->ev.fd, s->out + s->out_off, s->out_len, MSG_NOSIGNAL);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			err = -errno;
		if (n > 0) {
			s->out_off += (size_t)n;
			s->out_len -= (size_t)n;
		}
		if (!s->out_len)
			s->out_off = 0;
	}
	if (err) {
		dns_stream_reset(l, s);   /* reconnected by the next query */
		return;
	}
	dns_stream_update(l, s);
}

/* Queries the host never answered (it drops what it cannot parse) free
 * their slot after a while. */
static void dns_expire(struct loop *l)
{
	uint64_t now = boottime_ms();

	for (int i = 0; i < DNS_STREAMS; i++)
		for (int j = 0; j < DNS_SLOTS; j++) {
			struct dns_slot *sl = &l->dns[i].slot[j];
			if (sl->used && now - sl->since > DNS_PENDING_MS) {
				sl->used = false;
				l->dns[i].pending--;
			}
		}
}

/* ---- the loop ---- */

static int loop_open(struct loop *l)
{
	int fd;

	memset(l, 0, sizeof(*l));
	l->tcp_listen.fd = l->dns_udp.fd = l->dns_tcp_listen.fd = -1;
	l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	for (int i = 0; i < DNS_STREAMS; i++)
		l->dns[i].ev.fd = -1;
	if ((l->ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return -errno;
	if ((fd = bind_inet(net_opts.tcp_listen, SOCK_STREAM)) < 0)
		return fd;
	l->tcp_listen = (struct ev){ .kind = EV_TCP_LISTEN, .fd = fd };
	if ((fd = bind_inet(net_opts.dns_listen, SOCK_DGRAM)) < 0)
		return fd;
	l->dns_udp = (struct ev){ .kind = EV_DNS_UDP, .fd = fd };
	if ((fd = bind_inet(net_opts.dns_listen, SOCK_STREAM)) < 0)
		return fd;
	l->dns_tcp_listen = (struct ev){ .kind = EV_DNS_TCP_LISTEN, .fd = fd };
	ev_want(l, &l->tcp_listen, EPOLLIN);
	ev_want(l, &l->dns_udp, EPOLLIN);
	ev_want(l, &l->dns_tcp_listen, EPOLLIN);
	return 0;
}

static void dispatch(struct loop *l, struct ev *e, uint32_t events)
{
	switch (e->kind) {
	case EV_TCP_LISTEN:
		on_tcp_accept(l);
		break;
	case EV_DNS_TCP_LISTEN:
		on_dns_tcp_accept(l);
		break;
	case EV_DNS_UDP:
		on_dns_udp(l);
		break;
	case EV_RELAY:
		if (!((struct relay *)e->owner)->dead)
			relay_event(l, e->owner, e, events);
		break;
	case EV_DNS_STREAM:
		dns_stream_event(l, e->owner, events);
		break;
	}
}

int net_serve(void)
{
	struct epoll_event evs[64];
	struct rlimit rl;
	struct loop l;
	int err;

	signal(SIGPIPE, SIG_IGN);
	/* NET_CONN_MAX relays take two descriptors each, more than the soft
	 * limit of 1024 that init starts with: up to the hard limit, so that
	 * NET_CONN_MAX is the bound that refuses. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if ((err = loop_open(&l)) < 0) {
		fprintf(stderr, "kosa8-agent: egress: cannot listen (%s / %s): %s\n", net_opts.tcp_listen,
			net_opts.dns_listen, strerror(-err));
		return err;
	}
	fprintf(stderr, "kosa8-agent: egress: TCP on %s, DNS on %s\n", net_opts.tcp_listen,
		net_opts.dns_listen);
	for (;;) {
		int n = epoll_wait(l.ep, evs, (int)(sizeof(evs) / sizeof(evs[0])), 5000);
		if (n < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; i < n; i++)
			dispatch(&l, evs[i].data.ptr, (uint32_t)evs[i].events);
		relays_reap(&l);
		dns_expire(&l);
	}
}
