/* The egress proxy: one forwarded guest TCP connection, from its header to
 * its audit record (egress.h; the rules are in docs/egress.md).
 *
 *   header  -> destination must be a synthetic IPv4 address (names.h)
 *   name    -> policy: allow, deny, or ask a person
 *   first bytes -> a TLS ClientHello whose SNI equals the name, or an
 *              HTTP/1.x request whose Host equals the name; nothing else
 *   upstream -> the host connects (public addresses only by default)
 *   relay   -> both ways, poll, bounded buffers; plain HTTP has every
 *              request head checked, not just the first; TLS has every
 *              byte both ways held to record framing (tls_records.h), so
 *              a valid ClientHello cannot front another protocol
 *
 * Only TLS and HTTP are let through, on any port: an opaque protocol (SSH,
 * SMTP, a raw socket) carries no name the proxy can hold to the policy, so
 * a connection "to github.com:22" could be to anything behind that address.
 * Protocols where the server speaks first therefore time out here. */
#include "proxy/egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "proxy/proxy_int.h"
#include "proxy/secrets.h"
#include "proxy/tls_records.h"
#include "proxy/upstream_cache.h"

#define CONNECT_TIMEOUT_MS 15000
#define RELAY_BUF (64 * 1024)
#define SPLICE_AFTER (64 * 1024)   /* a direction this far along may splice */
/* A spliced download moves this much per system call where it can: its
 * pipe is made this large and the guest side's send buffer too.  With the
 * default 64 KiB pipe and ~208 KiB unix socket buffer the relay made three
 * calls and a context switch per 64 KiB (bench/results/egress.md). */
#define SPLICE_BIG (1024 * 1024)
/* Pipe pages count against the user's allowance (fs.pipe-user-pages-soft,
 * 64 MiB by default): past it every new pipe of that user is cut to two
 * pages.  So only this many downloads at a time get a big pipe. */
#define SPLICE_BIG_MAX 16

static atomic_int big_pipes;
static sigset_t sigpipe_set;
static pthread_once_t sigpipe_once = PTHREAD_ONCE_INIT;

static void sigpipe_init(void)
{
	sigemptyset(&sigpipe_set);
	sigaddset(&sigpipe_set, SIGPIPE);
}

int egress_parse_header(const uint8_t *buf, size_t len, int *family, uint8_t addr[16],
			uint16_t *port)
{
	size_t alen;

	if (len < 8) {
		/* Say no as soon as the bytes we have cannot start a header. */
		if (memcmp(buf, EGRESS_HDR_MAGIC, len < 4 ? len : 4) ||
		    (len > 4 && buf[4] != 4 && buf[4] != 6) || (len > 5 && buf[5] != 0))
			return -EBADMSG;
		return 0;
	}
	if (memcmp(buf, EGRESS_HDR_MAGIC, 4) || (buf[4] != 4 && buf[4] != 6) || buf[5] != 0)
		return -EBADMSG;
	alen = buf[4] == 4 ? 4 : 16;
	if (len < 8 + alen)
		return 0;
	*family = buf[4];
	*port = (uint16_t)(buf[6] << 8 | buf[7]);
	memset(addr, 0, 16);
	memcpy(addr, buf + 8, alen);
	return (int)(8 + alen);
}

/* Reads exactly the header, never a byte of the stream after it.  No
 * header is shorter than an IPv4 one, so that much is asked for at once:
 * one read for the usual header, not two. */
static int read_header(struct egress_conn *c, int *family, uint8_t addr[16])
{
	uint8_t buf[EGRESS_HDR_MAX];
	size_t got = 0, want = EGRESS_HDR_V4_LEN;
	int r;

	for (;;) {
		ssize_t n = egress_read_until(c->gfd, buf + got, want - got, c->deadline);
		if (n <= 0)
			return n ? (int)n : -ECONNRESET;
		got += (size_t)n;
		if ((r = egress_parse_header(buf, got, family, addr, &c->port)) != 0)
			return r < 0 ? r : 0;
		if (got > 4 && buf[4] == 6)
			want = EGRESS_HDR_MAX;
	}
}

static void addr_text(int family, const uint8_t addr[16], char *out, size_t len)
{
	if (!inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, out, (socklen_t)len))
		snprintf(out, len, "?");
}

/* The destination as a name: only a synthetic address has one. */
static int map_name(struct egress_conn *c, int family, const uint8_t addr[16])
{
	uint32_t a;

	if (family != 4) {
		c->reason = "not a synthetic address";
		return -EACCES;
	}
	memcpy(&a, addr, 4);
	if (names_lookup(c->ctx->names, ntohl(a), c->name, sizeof(c->name))) {
		c->reason = "not a synthetic address";
		return -EACCES;
	}
	return 0;
}

static enum policy_action decide(struct egress_conn *c, char *rule, size_t rulelen, bool *asked)
{
	enum policy_action a = policy_decide(c->ctx->policy, c->name, c->port, rule, rulelen);

	*asked = false;
	if (a == POLICY_ASK) {
		*asked = true;
		a = c->ctx->ask ? c->ctx->ask(c->ctx->arg, "connect", c->name, c->port) : POLICY_DENY;
	}
	return a == POLICY_ALLOW ? POLICY_ALLOW : POLICY_DENY;
}

static int check_tls(struct egress_conn *c, int r, const struct tls_hello *h)
{
	if (r < 0) {
		c->reason = r == -E2BIG ? "ClientHello too large" : "malformed ClientHello";
		return -EACCES;
	}
	if (!h->has_sni) {
		c->reason = "ClientHello without SNI";
		return -EACCES;
	}
	snprintf(c->seen, sizeof(c->seen), "%s", h->sni);
	/* With ECH the name that counts is encrypted to the server: the outer
	 * SNI would say nothing about where the connection really goes. */
	if (h->ech) {
		c->reason = "encrypted ClientHello";
		return -EACCES;
	}
	if (!egress_same_name(h->sni, c->name)) {
		c->reason = "SNI does not match the name";
		return -EACCES;
	}
	return 0;
}

static int check_http(struct egress_conn *c, int r, const struct http_head *h)
{
	if (r < 0) {
		c->reason = r == -E2BIG ? "HTTP head too large" : "malformed HTTP request";
		return -EACCES;
	}
	return egress_check_request(c, c->first, h);
}

/* Reads the guest's first bytes until they make a whole ClientHello or
 * request head, and holds them to the name.  The whole of it, not each
 * read, is bounded by c->deadline: a guest dripping a byte every few
 * seconds would otherwise hold the connection's slot for ever. */
static int check_first_bytes(struct egress_conn *c)
{
	struct tls_hello th;
	struct http_head hh;
	int r = 0;

	while (r == 0) {
		ssize_t n = egress_read_until(c->gfd, c->first + c->first_len,
					      sizeof(c->first) - c->first_len, c->deadline);
		if (n <= 0) {
			c->reason = n == -ETIMEDOUT ? "no TLS or HTTP from the client" : "client closed";
			return n ? (int)n : -ECONNRESET;
		}
		c->first_len += (size_t)n;
		if (c->first[0] == 0x16) {
			c->proto = "tls";
			if ((r = tls_hello_parse(c->first, c->first_len, &th)) != 0)
				return check_tls(c, r, &th);
		} else if ((c->first[0] >= 'A' && c->first[0] <= 'Z')) {
			c->proto = "http";
			if ((r = http_head_parse(c->first, c->first_len, false, &hh)) != 0)
				return check_http(c, r, &hh);
		} else {
			c->reason = "neither TLS nor HTTP";
			return -EACCES;
		}
		if (c->first_len == sizeof(c->first))
			r = -E2BIG;
	}
	c->reason = "first bytes too large";
	return -EACCES;
}

/* ---- upstream ---- */

/* Addresses the host's default connector will not reach for a guest:
 * a name that resolves to them (DNS rebinding, an /etc/hosts entry) would
 * give the sandbox the host's own services or its private network. */
static bool addr_public(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
		uint8_t b0 = (uint8_t)(a >> 24), b1 = (uint8_t)(a >> 16);
		return !(b0 == 0 || b0 == 10 || b0 == 127 || (b0 == 169 && b1 == 254) ||
			 (b0 == 172 && (b1 & 0xf0) == 16) || (b0 == 192 && b1 == 168) ||
			 (b0 == 100 && (b1 & 0xc0) == 64) || (b0 == 198 && (b1 & 0xfe) == 18) ||
			 b0 >= 224);
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		return !(IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a) ||
			 IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_SITELOCAL(a) ||
			 IN6_IS_ADDR_MULTICAST(a) || IN6_IS_ADDR_V4MAPPED(a) ||
			 (a->s6_addr[0] & 0xfe) == 0xfc);
	}
	return false;
}

static int connect_timed(const struct addrinfo *ai)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
	struct pollfd p;
	int err = 0, r;
	socklen_t el = sizeof(err);

	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
		err = -errno;
		goto fail;
	}
	p = (struct pollfd){.fd = fd, .events = POLLOUT};
	while ((r = poll(&p, 1, CONNECT_TIMEOUT_MS)) < 0 && errno == EINTR)
		;
	if (r <= 0) {
		err = r ? -errno : -ETIMEDOUT;
		goto fail;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
		err = err ? -err : -errno;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return err;
}

/* Every address is held to addr_public here, on each use: the cache keeps
 * answers as they came (upstream_cache.c says what it changes). */
static int connect_default(struct upstream_cache *cache, const char *name, uint16_t port)
{
	struct upstream_addrs a;
	struct addrinfo ai = {.ai_socktype = SOCK_STREAM};
	int fd = -EHOSTUNREACH, r;

	if ((r = upstream_cache_lookup(cache, name, &a)))
		return r;
	for (size_t i = 0; i < a.n; i++) {
		if (!addr_public(&a.addr[i].sa)) {
			fd = -EACCES;
			continue;
		}
		ai.ai_family = a.addr[i].sa.sa_family;
		ai.ai_addr = &a.addr[i].sa;
		if (ai.ai_family == AF_INET) {
			a.addr[i].in.sin_port = htons(port);
			ai.ai_addrlen = sizeof(a.addr[i].in);
		} else {
			a.addr[i].in6.sin6_port = htons(port);
			ai.ai_addrlen = sizeof(a.addr[i].in6);
		}
		if ((fd = connect_timed(&ai)) >= 0)
			break;
	}
	return fd;
}

static int connect_upstream(struct egress_conn *c)
{
	const struct egress_ctx *ctx = c->ctx;
	int fd = ctx->connect_upstream ? ctx->connect_upstream(ctx->arg, c->name, c->port)
				       : connect_default(ctx->upstream_cache, c->name, c->port);

	if (fd < 0) {
		c->reason = fd == -EACCES ? "name resolves to a non-public address"
					  : "upstream connection failed";
		return fd;
	}
	c->ufd = fd;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
	return 0;
}

/* ---- relay ---- */

/* One direction: bytes read from one side wait here for the other.  For a
 * plain HTTP guest, `checked` marks how far the request stream has been
 * vetted: only bytes before it are written. */
struct pipe {
	uint8_t *buf;
	size_t start, end, checked;
	bool eof, shut;
	bool filter;                    /* guest -> upstream of plain HTTP */
	struct tls_records *tls;        /* TLS: every byte must be a record */
	struct tls_records_ctx *tx;
	enum http_body body;
	uint64_t body_left;
	struct http_chunked chunked;
	bool may_splice;                /* nothing here looks at the bytes */
	int kp[2];                      /* its kernel pipe once spliced, else -1 */
	size_t kfill, kcap;             /* bytes in that pipe, bytes to ask for */
	bool kbig;                      /* the pipe counts in big_pipes */
	bool kfull;                     /* the pipe took no more: wait for out */
	sigset_t mask;                  /* the thread's signal mask before it */
};

/* Vets what arrived: each request head (Host, target) whole before any of
 * it is passed on, bodies counted so the next head is found. */
static int filter_requests(struct egress_conn *c, struct pipe *p)
{
	while (p->checked < p->end) {
		uint8_t *at = p->buf + p->checked;
		size_t avail = p->end - p->checked;
		struct http_head h;
		int r;

		if (p->body == HTTP_BODY_LENGTH) {
			size_t n = avail < p->body_left ? avail : (size_t)p->body_left;
			p->checked += n;
			if (!(p->body_left -= n))
				p->body = HTTP_BODY_NONE;
			continue;
		}
		if (p->body == HTTP_BODY_CHUNKED) {
			long n = http_chunked_feed(&p->chunked, at, avail, NULL, NULL);
			if (n < 0) {
				c->reason = "malformed chunked request body";
				return -EACCES;
			}
			p->checked += (size_t)n;
			if (p->chunked.done)
				p->body = HTTP_BODY_NONE;
			continue;
		}
		if ((r = http_head_parse(at, avail, false, &h)) == 0)
			return 0;
		if (r < 0 || egress_check_request(c, at, &h) ||
		    http_body_framing(at, &h, false, &p->body, &p->body_left)) {
			if (!c->reason)
				c->reason = "malformed HTTP request";
			return -EACCES;
		}
		memset(&p->chunked, 0, sizeof(p->chunked));
		if (p->body == HTTP_BODY_LENGTH && !p->body_left)
			p->body = HTTP_BODY_NONE;
		p->checked += (size_t)r;
	}
	return 0;
}

static size_t writable(const struct pipe *p)
{
	if (p->kp[0] >= 0)
		return p->kfill;
	return (p->filter || p->tls ? p->checked : p->end) - p->start;
}

/* Holds what arrived to TLS record framing; a record header not yet whole
 * is kept back (not written) until it can be judged.  Its bytes, just
 * after `checked`, were fed already: only what follows them is new. */
static int check_records(struct egress_conn *c, struct pipe *p)
{
	size_t fed = p->checked + tls_records_pending(p->tls);
	const char *why = NULL;

	if (tls_records_feed(p->tx, p->tls, p->buf + fed, p->end - fed, &why)) {
		c->reason = why;
		return -EACCES;
	}
	p->checked = p->end - tls_records_pending(p->tls);
	return 0;
}

/* Room to read into; an unvetted head is kept whole by moving the
 * buffer's content to its front. */
static size_t room(struct pipe *p)
{
	if (p->start == p->end) {
		p->start = p->end = p->checked = 0;
	} else if (p->start > 0 && RELAY_BUF - p->end < HTTP_HEAD_MAX) {
		memmove(p->buf, p->buf + p->start, p->end - p->start);
		p->end -= p->start;
		p->checked -= p->start;
		p->start = 0;
	}
	return RELAY_BUF - p->end;
}

/* Whether to ask for input: room in the buffer, or in the kernel pipe. */
static bool wants_input(struct pipe *p)
{
	return !p->eof && (p->kp[0] >= 0 ? !p->kfull && p->kfill < p->kcap : room(p) > 0);
}

static bool drained(const struct pipe *p)
{
	return p->start == p->end && !p->kfill;
}

/* A direction whose bytes nothing checks -- plain HTTP's responses --
 * moves them socket to pipe to socket with splice once it has carried
 * SPLICE_AFTER and its buffer is empty: bulk data then stays in the
 * kernel.  Short exchanges never pay for the pipe; without one (out of
 * descriptors) the bytes are copied as before. */
static void maybe_splice(struct pipe *p, uint64_t moved, int to)
{
	int cap;

	if (!p->may_splice || p->kp[0] >= 0 || p->eof || moved < SPLICE_AFTER || p->start != p->end)
		return;
	if (pipe2(p->kp, O_CLOEXEC | O_NONBLOCK)) {
		p->kp[0] = p->kp[1] = -1;
		p->may_splice = false;
		return;
	}
	/* splice into a socket whose peer is gone raises SIGPIPE (there is no
	 * MSG_NOSIGNAL for it): held blocked here, taken back in splice_out. */
	pthread_sigmask(SIG_BLOCK, &sigpipe_set, &p->mask);
	/* Both are best effort: a smaller pipe or buffer only means more
	 * calls (the kernel caps SO_SNDBUF at net.core.wmem_max). */
	if (atomic_fetch_add(&big_pipes, 1) < SPLICE_BIG_MAX &&
	    fcntl(p->kp[1], F_SETPIPE_SZ, SPLICE_BIG) >= 0) {
		p->kbig = true;
		setsockopt(to, SOL_SOCKET, SO_SNDBUF, &(int){SPLICE_BIG}, sizeof(int));
	} else {
		atomic_fetch_sub(&big_pipes, 1);
	}
	cap = fcntl(p->kp[1], F_GETPIPE_SZ);
	p->kcap = cap > 0 ? (size_t)cap : 4096;
}

static void unsplice(struct pipe *p)
{
	if (p->kp[0] < 0)
		return;
	close(p->kp[0]);
	close(p->kp[1]);
	if (p->kbig)
		atomic_fetch_sub(&big_pipes, 1);
	pthread_sigmask(SIG_SETMASK, &p->mask, NULL);
}

static int splice_in(int fd, struct pipe *p)
{
	ssize_t n = splice(fd, NULL, p->kp[1], NULL, p->kcap - p->kfill,
			   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);

	if (n < 0) {
		/* With bytes in it, the pipe may be out of slots (a slot per
		 * page piece, not per byte): wait until some go out. */
		if (errno == EAGAIN && p->kfill)
			p->kfull = true;
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	}
	if (n == 0)
		p->eof = true;
	p->kfill += (size_t)n;
	return 0;
}

static int splice_out(int fd, struct pipe *p, uint64_t *count)
{
	ssize_t n;

	if (!p->kfill)
		return 0;
	n = splice(p->kp[0], NULL, fd, NULL, p->kfill, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n < 0) {
		int e = errno;
		if (e == EPIPE)
			sigtimedwait(&sigpipe_set, NULL, &(struct timespec){0});
		return e == EAGAIN || e == EINTR ? 0 : -e;
	}
	p->kfill -= (size_t)n;
	p->kfull = false;
	*count += (uint64_t)n;
	return 0;
}

static int pipe_read(struct egress_conn *c, int fd, struct pipe *p)
{
	ssize_t n;

	if (p->kp[0] >= 0)
		return splice_in(fd, p);
	n = read(fd, p->buf + p->end, room(p));

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0) {
		p->eof = true;
		if (p->filter && (p->body != HTTP_BODY_NONE || p->checked != p->end)) {
			c->reason = "client closed inside a request";
			return -EACCES;
		}
		if (p->tls && tls_records_pending(p->tls)) {
			c->reason = "stream ended inside a TLS record header";
			return -EACCES;
		}
		return 0;
	}
	p->end += (size_t)n;
	return p->filter ? filter_requests(c, p) : p->tls ? check_records(c, p) : 0;
}

static int pipe_write(int fd, struct pipe *p, uint64_t *count)
{
	ssize_t n;

	if (p->kp[0] >= 0)
		return splice_out(fd, p, count);
	if (!writable(p))
		return 0;
	n = send(fd, p->buf + p->start, writable(p), MSG_NOSIGNAL);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	p->start += (size_t)n;
	*count += (uint64_t)n;
	maybe_splice(p, *count, fd);
	return 0;
}

/* After EOF on one side and its bytes flushed, pass the half-close on. */
static void pipe_shut(struct pipe *p, int to)
{
	if (p->eof && !p->shut && drained(p)) {
		shutdown(to, SHUT_WR);
		p->shut = true;
	}
}

static int relay_loop(struct egress_conn *c, struct pipe *up, struct pipe *down)
{
	int timeout = c->ctx->idle_timeout_ms > 0 ? c->ctx->idle_timeout_ms : -1;
	int err = 0;

	while (!err && !(up->shut && down->shut)) {
		struct pollfd p[2] = {{.fd = c->gfd}, {.fd = c->ufd}};
		int r;

		/* Back-pressure: read a side only while its buffer has room. */
		if (wants_input(up))
			p[0].events |= POLLIN;
		if (wants_input(down))
			p[1].events |= POLLIN;
		if (writable(up))
			p[1].events |= POLLOUT;
		if (writable(down))
			p[0].events |= POLLOUT;
		/* A side we want nothing from is left out, so that its
		 * POLLHUP cannot spin the loop. */
		for (int i = 0; i < 2; i++)
			p[i].fd = p[i].events ? p[i].fd : -1;
		if ((r = poll(p, 2, timeout)) < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			c->reason = r ? "poll failed" : "idle timeout";
			return r ? -errno : -ETIMEDOUT;
		}
		/* Only a side asked for input is read: a hang-up seen while
		 * its buffer is full waits until there is room again. */
		if (p[0].events & POLLIN && p[0].revents & (POLLIN | POLLHUP | POLLERR))
			err = pipe_read(c, c->gfd, up);
		if (!err && p[1].events & POLLIN && p[1].revents & (POLLIN | POLLHUP | POLLERR))
			err = pipe_read(c, c->ufd, down);
		/* What was just read goes out at once, without a poll for
		 * room first: a socket nearly always has some. */
		if (!err)
			err = pipe_write(c->ufd, up, &c->bytes_up);
		if (!err)
			err = pipe_write(c->gfd, down, &c->bytes_down);
		pipe_shut(up, c->ufd);
		pipe_shut(down, c->gfd);
	}
	return err;
}

/* Every ClientHello on a relayed TLS connection, the first included, is
 * held to the name: a second one (after a HelloRetryRequest, or forged)
 * must not name another host. */
static int recheck_hello(void *arg, const struct tls_hello *h, const char **why)
{
	struct egress_conn *c = arg;

	if (check_tls(c, 0, h)) {
		*why = c->reason;
		return -EACCES;
	}
	return 0;
}

static int relay(struct egress_conn *c)
{
	struct pipe up = {.filter = !strcmp(c->proto, "http"), .kp = {-1, -1}},
		    down = {.may_splice = !strcmp(c->proto, "http"), .kp = {-1, -1}};
	struct tls_records_ctx *tx = NULL;
	int err = -ENOMEM;

	pthread_once(&sigpipe_once, sigpipe_init);
	/* One call each, where F_GETFL and F_SETFL took two: a new
	 * connection's path is mostly system calls (bench/results/egress.md). */
	ioctl(c->gfd, FIONBIO, &(int){1});
	ioctl(c->ufd, FIONBIO, &(int){1});
	if (!strcmp(c->proto, "tls") && !(tx = malloc(sizeof(*tx))))
		goto out;
	if (tx) {
		tls_records_init(tx);
		tx->on_hello = recheck_hello;
		tx->arg = c;
		up.tx = down.tx = tx;
		up.tls = &tx->up;
		down.tls = &tx->down;
	}
	if ((up.buf = malloc(RELAY_BUF)) && (down.buf = malloc(RELAY_BUF))) {
		/* The bytes read for the checks go first, vetted again by the
		 * same filter as every later byte (the first ClientHello, or
		 * the first HTTP head, and whatever came right after it). */
		memcpy(up.buf, c->first, c->first_len);
		up.end = c->first_len;
		err = up.filter ? filter_requests(c, &up) : tx ? check_records(c, &up) : 0;
		/* They go out before the first poll: the upstream socket is
		 * connected and has room. */
		if (!err)
			err = pipe_write(c->ufd, &up, &c->bytes_up);
		if (!err)
			err = relay_loop(c, &up, &down);
	}
out:
	unsplice(&down);
	free(up.buf);
	free(down.buf);
	free(tx);
	return err;
}

/* ---- the whole connection ---- */

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void audit_conn(struct egress_conn *c, const char *decision, const char *rule,
		       bool asked, const char *addr, const struct timespec *t0)
{
	cJSON *d = cJSON_CreateObject();

	if (!d)
		return;
	if (c->name[0])
		cJSON_AddStringToObject(d, "name", c->name);
	else
		cJSON_AddStringToObject(d, "address", addr);
	cJSON_AddNumberToObject(d, "port", c->port);
	cJSON_AddStringToObject(d, "decision", decision);
	if (rule && rule[0])
		cJSON_AddStringToObject(d, "rule", rule);
	if (asked)
		cJSON_AddBoolToObject(d, "asked", true);
	if (c->proto)
		cJSON_AddStringToObject(d, "protocol", c->proto);
	if (c->seen[0])
		cJSON_AddStringToObject(d, c->proto && !strcmp(c->proto, "tls") ? "sni" : "host", c->seen);
	if (c->reason)
		cJSON_AddStringToObject(d, "reason", c->reason);
	cJSON_AddBoolToObject(d, "intercepted", c->intercepted);
	if (c->requests)
		cJSON_AddNumberToObject(d, "requests", c->requests);
	cJSON_AddNumberToObject(d, "bytes_up", (double)c->bytes_up);
	cJSON_AddNumberToObject(d, "bytes_down", (double)c->bytes_down);
	cJSON_AddNumberToObject(d, "duration_ms", (double)ms_since(t0));
	egress_audit(c->ctx, "net.connect", d);
}

/* Decision, checks, upstream and relay.  *decision is what the audit says. */
static int serve(struct egress_conn *c, const char **decision, char *rule, size_t rulelen,
		 bool *asked, char *addrbuf, size_t addrlen)
{
	uint8_t addr[16];
	int family = 0, err;

	c->deadline = egress_deadline(c->ctx);
	if ((err = read_header(c, &family, addr))) {
		c->reason = err == -ETIMEDOUT ? "no connection header in time" : "bad connection header";
		return err;
	}
	addr_text(family, addr, addrbuf, addrlen);
	if ((err = map_name(c, family, addr)))
		return err;
	if (decide(c, rule, rulelen, asked) != POLICY_ALLOW) {
		c->reason = *asked ? "not approved" : "policy";
		return -EACCES;
	}
	*decision = "allow";
	/* A person's time to answer is not the guest's: its first bytes get a
	 * bound of their own after the answer. */
	if (*asked)
		c->deadline = egress_deadline(c->ctx);
	if ((err = check_first_bytes(c)))
		return err;
	if ((err = connect_upstream(c)))
		return err;
	/* Secrets go only over TLS, and only to the hosts they are bound to;
	 * every other connection is relayed untouched. */
	if (!strcmp(c->proto, "tls") && c->ctx->secrets && secret_set_binds(c->ctx->secrets, c->name, c->port)) {
		c->intercepted = true;
		return egress_intercept(c);
	}
	return relay(c);
}

int egress_connect_serve(const struct egress_ctx *ctx, int fd)
{
	struct egress_conn *c = calloc(1, sizeof(*c));
	char rule[POLICY_NAME_MAX + 300] = "", addr[INET6_ADDRSTRLEN] = "";
	const char *decision = "deny";
	struct timespec t0;
	bool asked = false;
	int err;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->ctx = ctx;
	c->gfd = fd;
	c->ufd = -1;
	err = serve(c, &decision, rule, sizeof(rule), &asked, addr, sizeof(addr));
	/* An allowed name whose checks failed is a refusal too. */
	if (err == -EACCES)
		decision = "deny";
	else if (err && !c->reason)
		c->reason = "connection error";
	audit_conn(c, decision, rule, asked, addr, &t0);
	if (c->ufd >= 0)
		close(c->ufd);
	close(fd);
	free(c);
	return err;
}
