/* Egress proxy benchmark, host side, on loopback: the same HTTP exchanges
 * made directly to a local server, through kosa8's proxy path, and through
 * a forward proxy such as squid, interleaved in rounds in one process.
 *
 * The kosa8 path is what the supervisor runs for every guest connection
 * (src/supervisor/egress.c): a unix socket listener (where the VMM's vsock
 * device delivers guest connections) served by threads that accept for
 * themselves (common/acceptpool.h, the supervisor's numbers), and
 * egress_connect_serve() on each connection: the K8E1 header, synthetic address ->
 * name, policy, Host check on every request head, upstream connect, relay.
 * Audit records are built and dropped instead of written to the log (said
 * so in the results).
 *
 * The upstream server listens on BENCH_ADDR (run.sh: 203.0.113.1, put on
 * the loopback device of a network namespace of its own, with an
 * /etc/hosts naming NAME there), and kosa8's path uses the proxy's own
 * connector: it resolves NAME with the host's resolver, checks the address
 * is public (which loopback is not, rightly) and connects, as the
 * supervisor does, with the sandbox's cache of resolutions when the
 * library has one.  Without BENCH_ADDR everything is on 127.0.0.1 and the
 * bench plugs in a connector that resolves nothing (the earlier runs).
 *
 * TLS (port 443) is measured direct and through kosa8 only: kosa8 checks
 * the ClientHello's SNI and then relays the bytes (no secret is bound to
 * the name), which squid does only as an interception proxy (ssl_bump
 * peek/splice on a NAT-redirected port, another build of squid).
 *
 *   bench_egress ROUNDS LAT_N CONN_N BULK_MIB [SQUID_PORT]
 *
 * BENCH_ONLY=N in the environment runs path N alone (0 direct, 1 kosa8,
 * 2 squid, 3 direct TLS, 4 kosa8 TLS): for a profile of one path.
 *
 * The upstream server's threads accept for themselves; BENCH_UPSTREAM=spawn
 * starts a thread per connection instead (the server of the earlier runs).
 * Downloads: BULK_N per path and round, the paths taking turns.
 *
 * Prints one Markdown table row per round, path and measurement. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "common/acceptpool.h"
#include "common/util.h"
#include "proxy/egress.h"
#include "proxy/names.h"
#include "proxy/policy.h"
#include "proxy/upstream_cache.h"

/* A library built before the cache has no upstream_cache_new: the bench
 * then runs its proxy without one, as that build's supervisor did. */
#pragma weak upstream_cache_new

#define NAME "api.test.example"
#define HEAD_MAX 8192

static uint16_t upstream_port, tls_port;
static SSL_CTX *server_tls, *client_tls;
static struct egress_ctx ctx;
static char unix_path[108];
static uint32_t synthetic;     /* NAME's synthetic address */
static int squid_port;
static struct in_addr bench_addr;   /* where the upstream server listens */
static bool resolving;              /* BENCH_ADDR: the proxy resolves NAME */

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char *what)
{
	fprintf(stderr, "bench_egress: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* A connection, plain (ssl NULL) or TLS. */
struct conn {
	int fd;
	SSL *ssl;
};

static ssize_t conn_read(struct conn *c, void *buf, size_t len)
{
	int n;

	if (!c->ssl)
		return read(c->fd, buf, len);
	n = SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	return n > 0 ? n : -1;
}

static int conn_write_all(struct conn *c, const void *buf, size_t len)
{
	size_t done;

	if (!c->ssl)
		return write_all(c->fd, buf, len);
	return SSL_write_ex(c->ssl, buf, len, &done) == 1 && done == len ? 0 : -1;
}

static void conn_close(struct conn *c)
{
	if (c->ssl) {
		SSL_shutdown(c->ssl);
		SSL_free(c->ssl);
	}
	close(c->fd);
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- the upstream server: GET / answers "ok", GET /bulk/N answers N bytes ---- */

static char bulk_block[1 << 16];

static int serve_request(struct conn *fd, const char *head)
{
	char hdr[160];
	unsigned long long len = 2;
	const char *body = "ok";
	bool bulk = !strncmp(head, "GET /bulk/", 10);

	if (bulk) {
		len = strtoull(head + 10, NULL, 10);
		body = bulk_block;
	}
	snprintf(hdr, sizeof(hdr), "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\n\r\n", len);
	if (conn_write_all(fd, hdr, strlen(hdr)))
		return -1;
	if (!bulk)
		return conn_write_all(fd, body, len);
	while (len) {
		size_t n = len < sizeof(bulk_block) ? len : sizeof(bulk_block);
		if (conn_write_all(fd, bulk_block, n))
			return -1;
		len -= n;
	}
	return 0;
}

/* Requests have no body here: a head ends the request. */
static void serve_conn(struct conn *fd)
{
	char buf[HEAD_MAX + 1];
	size_t have = 0;
	ssize_t n;

	nodelay(fd->fd);
	while ((n = conn_read(fd, buf + have, HEAD_MAX - have)) > 0) {
		char *end;
		have += (size_t)n;
		buf[have] = 0;
		while ((end = strstr(buf, "\r\n\r\n"))) {
			size_t used = (size_t)(end + 4 - buf);
			char *conn = strcasestr(buf, "\r\nConnection: close");
			bool close_after = conn && conn < end;
			if (serve_request(fd, buf) || close_after)
				goto out;
			memmove(buf, buf + used, have - used + 1);
			have -= used;
		}
		if (have == HEAD_MAX)
			break;
	}
out:
	conn_close(fd);
}

static void upstream_conn(void *arg, int fd)
{
	struct conn c = {.fd = fd};

	(void)arg;
	serve_conn(&c);
}

static void upstream_tls_conn(void *arg, int fd)
{
	struct conn c = {.fd = fd, .ssl = SSL_new(server_tls)};

	(void)arg;
	if (!c.ssl || !SSL_set_fd(c.ssl, c.fd) || SSL_accept(c.ssl) != 1) {
		conn_close(&c);
		return;
	}
	serve_conn(&c);
}

/* The upstream server's threads accept for themselves (as the proxy's do,
 * and as servers that do not start a thread per connection).
 * BENCH_UPSTREAM=spawn gives the server of the runs before 2026-12-07
 * evening instead: one accepting thread that starts a thread per
 * connection.  That costs a thread creation and a wake-up on every new
 * connection of the direct and kosa8 paths, but not of squid's, which
 * keeps its upstream connections open across client connections. */
struct listener {
	int fd;
	void (*fn)(void *, int);
};

static void *spawned_conn(void *arg)
{
	const struct listener *l = arg;

	l[0].fn(NULL, l[1].fd);
	free(arg);
	return NULL;
}

static void *accept_loop(void *arg)
{
	const struct listener *l = arg;

	for (;;) {
		int c = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
		struct listener *job = malloc(2 * sizeof(*job));
		pthread_t t;
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			die("accept");
		}
		if (!job)
			die("malloc");
		job[0] = *l;
		job[1].fd = c;
		if (pthread_create(&t, NULL, spawned_conn, job))
			die("pthread_create");
		pthread_detach(t);
	}
	return NULL;
}

static void start_accepting(int fd, void (*fn)(void *, int))
{
	static struct listener ls[2];   /* upstream, upstream TLS */
	static atomic_int busy;
	static int n;
	const char *how = getenv("BENCH_UPSTREAM");
	struct accept_pool_opts po = {.fd = fd, .busy = &busy, .max_busy = 1024, .max_idle = 4,
				      .stack = 256 * 1024, .serve = fn};
	struct accept_pool *pool;
	pthread_t t;

	if (!how || strcmp(how, "spawn")) {
		if (accept_pool_start(&po, &pool))
			die("upstream threads");
		return;
	}
	if (n == (int)(sizeof(ls) / sizeof(ls[0])))
		die("too many listeners");
	ls[n] = (struct listener){.fd = fd, .fn = fn};
	if (pthread_create(&t, NULL, accept_loop, &ls[n++]))
		die("pthread_create");
	pthread_detach(t);
}

static uint16_t listen_upstream(void (*fn)(void *, int))
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = bench_addr};
	socklen_t sl = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (lfd < 0 || bind(lfd, (void *)&sa, sizeof(sa)) || listen(lfd, 512) ||
	    getsockname(lfd, (void *)&sa, &sl))
		die("upstream listener");
	start_accepting(lfd, fn);
	return ntohs(sa.sin_port);
}

/* A P-256 key and a self-signed certificate for NAME, made at start.  The
 * client does not verify it: what is measured is the path, not the PKI. */
static void make_tls_contexts(void)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *crt = X509_new();
	X509_NAME *nm;

	if (!key || !crt)
		die("TLS key");
	ASN1_INTEGER_set(X509_get_serialNumber(crt), 1);
	X509_gmtime_adj(X509_getm_notBefore(crt), -3600);
	X509_gmtime_adj(X509_getm_notAfter(crt), 86400);
	X509_set_pubkey(crt, key);
	nm = X509_get_subject_name(crt);
	X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC, (const unsigned char *)NAME, -1, -1, 0);
	X509_set_issuer_name(crt, nm);
	server_tls = SSL_CTX_new(TLS_server_method());
	client_tls = SSL_CTX_new(TLS_client_method());
	if (!X509_sign(crt, key, EVP_sha256()) || !server_tls || !client_tls ||
	    SSL_CTX_use_certificate(server_tls, crt) != 1 || SSL_CTX_use_PrivateKey(server_tls, key) != 1)
		die("TLS contexts");
	SSL_CTX_set_verify(client_tls, SSL_VERIFY_NONE, NULL);
	X509_free(crt);
	EVP_PKEY_free(key);
}

static void start_upstream(void)
{
	memset(bulk_block, 'x', sizeof(bulk_block));
	make_tls_contexts();
	upstream_port = listen_upstream(upstream_conn);
	tls_port = listen_upstream(upstream_tls_conn);
}

/* ---- kosa8's proxy path, as the supervisor runs it ---- */

static int tcp_connect_to(struct in_addr addr, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = addr};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (connect(fd, (void *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	nodelay(fd);
	return fd;
}

static int tcp_connect(uint16_t port)
{
	return tcp_connect_to(bench_addr, port);
}

/* Without BENCH_ADDR: every allowed name is the local server, on
 * loopback, which the proxy's own connector refuses. */
static int bench_connector(void *arg, const char *name, uint16_t port)
{
	(void)arg, (void)name;
	return tcp_connect(port == 443 ? tls_port : upstream_port);
}

/* Records are dropped (the supervisor's writer is not measured), but a
 * connection the proxy refused is said on stderr: a failed run says why. */
static void drop_audit(void *arg, const char *type, cJSON *details)
{
	const cJSON *reason = cJSON_GetObjectItemCaseSensitive(details, "reason");
	const cJSON *decision = cJSON_GetObjectItemCaseSensitive(details, "decision");

	(void)arg;
	if (cJSON_IsString(reason) && cJSON_IsString(decision) && !strcmp(decision->valuestring, "deny"))
		fprintf(stderr, "bench_egress: proxy: %s: %s\n", type, reason->valuestring);
	cJSON_Delete(details);
}

static void proxy_conn(void *arg, int fd)
{
	(void)arg;
	egress_connect_serve(&ctx, fd);
}

static void start_proxy(const char *dir)
{
	struct sockaddr_un su = {.sun_family = AF_UNIX};
	struct policy *p;
	struct names *nm;
	struct policy_error pe;
	char rules[128];
	int lfd;

	/* A rule without a port covers 80 and 443 only: the resolving bench
	 * connects to the servers' own ports. */
	if (resolving)
		snprintf(rules, sizeof(rules), "allow %s:%u %s:%u\n", NAME, upstream_port, NAME, tls_port);
	else
		snprintf(rules, sizeof(rules), "allow %s\n", NAME);
	if (policy_new(&p) || policy_add_text(p, rules, strlen(rules), "bench", &pe) ||
	    names_new(&nm) || names_assign(nm, NAME, &synthetic))
		die("policy or names");
	ctx = (struct egress_ctx){.sandbox = "bench", .policy = p, .names = nm, .audit = drop_audit,
				  .connect_upstream = resolving ? NULL : bench_connector,
				  .idle_timeout_ms = 60000};
	if (resolving && upstream_cache_new && upstream_cache_new(NULL, &ctx.upstream_cache))
		die("upstream cache");
	snprintf(unix_path, sizeof(unix_path), "%s/proxy.sock", dir);
	snprintf(su.sun_path, sizeof(su.sun_path), "%s", unix_path);
	unlink(unix_path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	static atomic_int busy;
	struct accept_pool_opts po = {.busy = &busy, .max_busy = 512, .max_idle = 4, .stack = 256 * 1024,
				      .serve = proxy_conn};
	struct accept_pool *pool;

	if (lfd < 0 || bind(lfd, (void *)&su, sizeof(su)) || listen(lfd, 512))
		die("proxy listener");
	po.fd = lfd;
	if (accept_pool_start(&po, &pool))
		die("proxy threads");
}

/* ---- clients ---- */

enum path { DIRECT, KOSA8, SQUID, TLS_DIRECT, TLS_KOSA8, NPATHS };
static const char *const path_name[NPATHS] = {"direct", "kosa8 proxy", "squid", "direct, TLS",
					      "kosa8 proxy, TLS"};

/* What the guest agent does: connect, then the 12-byte K8E1 header. */
static int kosa8_open(uint16_t port)
{
	struct sockaddr_un su = {.sun_family = AF_UNIX};
	uint8_t h[12] = {'K', '8', 'E', '1', 4, 0, (uint8_t)(port >> 8), (uint8_t)port};
	uint32_t be = htonl(synthetic);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(su.sun_path, sizeof(su.sun_path), "%s", unix_path);
	memcpy(h + 8, &be, 4);
	if (fd < 0 || connect(fd, (void *)&su, sizeof(su)) || write_all(fd, h, sizeof(h)))
		die("connect (kosa8 proxy)");
	return fd;
}

static struct conn path_open(enum path p)
{
	struct conn c = {.fd = p == KOSA8       ? kosa8_open(resolving ? upstream_port : 80)
			      : p == TLS_KOSA8  ? kosa8_open(resolving ? tls_port : 443)
			      : p == SQUID      ? tcp_connect_to((struct in_addr){htonl(INADDR_LOOPBACK)},
							 (uint16_t)squid_port)
			      : p == TLS_DIRECT ? tcp_connect(tls_port)
						: tcp_connect(upstream_port)};

	if (c.fd < 0) {
		errno = -c.fd;
		die(path_name[p]);
	}
	if (p != TLS_DIRECT && p != TLS_KOSA8)
		return c;
	c.ssl = SSL_new(client_tls);
	if (!c.ssl || !SSL_set_fd(c.ssl, c.fd) || !SSL_set_tlsext_host_name(c.ssl, NAME) ||
	    SSL_connect(c.ssl) != 1)
		die("TLS handshake");
	return c;
}

/* A forward proxy takes the absolute form; the others the origin form. */
static int send_get(struct conn *fd, enum path p, const char *target, bool close_after)
{
	char req[512];
	int n;

	if (p == SQUID)
		n = snprintf(req, sizeof(req), "GET http://%s:%u%s HTTP/1.1\r\nHost: %s:%u\r\n%s\r\n", NAME,
			     upstream_port, target, NAME, upstream_port,
			     close_after ? "Connection: close\r\n" : "");
	else
		n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, NAME,
			     close_after ? "Connection: close\r\n" : "");
	return conn_write_all(fd, req, (size_t)n);
}

/* Reads one response (head, then Content-Length bytes of body); returns
 * the body length or -1.  Nothing follows a response here, since each
 * request waits for its answer. */
static long long read_response(struct conn *fd)
{
	static __thread char buf[1 << 16];
	size_t have = 0;
	char *end = NULL, *cl;
	long long body, got;
	ssize_t n;

	while (!end) {
		if (have == sizeof(buf) - 1 || (n = conn_read(fd, buf + have, sizeof(buf) - 1 - have)) <= 0)
			return -1;
		have += (size_t)n;
		buf[have] = 0;
		end = strstr(buf, "\r\n\r\n");
	}
	if (strncmp(buf, "HTTP/1.1 200", 12) || !(cl = strcasestr(buf, "\r\nContent-Length:")) || cl > end)
		return -1;
	body = strtoll(cl + 17, NULL, 10);
	got = (long long)(have - (size_t)(end + 4 - buf));
	while (got < body) {
		n = conn_read(fd, buf, sizeof(buf));
		if (n <= 0)
			return -1;
		got += n;
	}
	return got == body ? body : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void report(int round, enum path p, const char *what, double *v, int n, const char *extra)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	printf("| %d | %s | %s | %d | %.1f | %.1f | %s |\n", round, path_name[p], what, n, v[n / 2],
	       v[(size_t)n * 99 / 100], extra);
	fflush(stdout);
}

/* Keep-alive: n requests on one connection, each timed. */
static void bench_latency(int round, enum path p, int n)
{
	double *v = malloc(sizeof(double) * (size_t)n), t0, total;
	struct conn c = path_open(p), *fd = &c;
	char extra[64];

	if (!v)
		die("malloc");
	for (int i = 0; i < 200; i++)   /* warm-up: upstream connection, caches */
		if (send_get(fd, p, "/", false) || read_response(fd) != 2)
			die("warm-up request");
	total = now_us();
	for (int i = 0; i < n; i++) {
		t0 = now_us();
		if (send_get(fd, p, "/", false) || read_response(fd) != 2)
			die("request");
		v[i] = now_us() - t0;
	}
	total = now_us() - total;
	snprintf(extra, sizeof(extra), "%.0f req/s", n / (total / 1e6));
	report(round, p, "request, keep-alive", v, n, extra);
	conn_close(fd);
	free(v);
}

/* A new connection per request: connect (and header), request, response,
 * close. */
static void bench_connect(int round, enum path p, int n)
{
	double *v = malloc(sizeof(double) * (size_t)n), t0, total;
	char extra[64];

	if (!v)
		die("malloc");
	total = now_us();
	for (int i = 0; i < n; i++) {
		struct conn c;
		t0 = now_us();
		c = path_open(p);
		if (send_get(&c, p, "/", true) || read_response(&c) != 2)
			die("request on a new connection");
		conn_close(&c);
		v[i] = now_us() - t0;
	}
	total = now_us() - total;
	snprintf(extra, sizeof(extra), "%.0f conn/s", n / (total / 1e6));
	report(round, p, "new connection + request", v, n, extra);
	free(v);
}

/* One download: its time in µs, or -1. */
static double download(enum path p, int mib)
{
	char target[64];
	long long len = (long long)mib << 20;
	double t0, us;
	struct conn c = path_open(p), *fd = &c;

	snprintf(target, sizeof(target), "/bulk/%lld", len);
	t0 = now_us();
	if (send_get(fd, p, target, true) || read_response(fd) != len) {
		fprintf(stderr, "bench_egress: %s: bulk download failed: %s\n", path_name[p], strerror(errno));
		conn_close(fd);
		return -1;
	}
	us = now_us() - t0;
	conn_close(fd);
	return us;
}

/* BULK_N downloads per path, the paths taking turns (direct, kosa8,
 * squid, ... then again), so that a change in the machine's load falls on
 * every path alike; one row per path with the median time and its rate,
 * and the range of rates. */
#define BULK_N 5

static void bench_bulk(int round, const bool *run, int mib)
{
	double us[NPATHS][BULK_N];
	int n[NPATHS] = {0};

	for (int i = 0; i < BULK_N; i++)
		for (int p = 0; p < NPATHS; p++) {
			double t;
			if (run[p] && (t = download((enum path)p, mib)) >= 0)
				us[p][n[p]++] = t;
		}
	for (int p = 0; p < NPATHS; p++) {
		if (!run[p])
			continue;
		if (n[p] < BULK_N) {
			/* A row that says so, not the end of the run. */
			printf("| %d | %s | download %d MiB | %d | - | - | %d failed |\n", round, path_name[p], mib,
			       BULK_N, BULK_N - n[p]);
			continue;
		}
		qsort(us[p], BULK_N, sizeof(double), cmp_double);
		printf("| %d | %s | download %d MiB | %d | %.0f | - | %.0f MiB/s (%.0f-%.0f) |\n", round,
		       path_name[p], mib, BULK_N, us[p][BULK_N / 2], mib / (us[p][BULK_N / 2] / 1e6),
		       mib / (us[p][BULK_N - 1] / 1e6), mib / (us[p][0] / 1e6));
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/kosa8-egress-bench.XXXXXX";
	int rounds, lat_n, conn_n, bulk_mib, only = getenv("BENCH_ONLY") ? atoi(getenv("BENCH_ONLY")) : -1;
	bool run[NPATHS];

	if (argc < 5 || argc > 6) {
		fprintf(stderr, "usage: bench_egress ROUNDS LAT_N CONN_N BULK_MIB [SQUID_PORT]\n");
		return 2;
	}
	rounds = atoi(argv[1]);
	lat_n = atoi(argv[2]);
	conn_n = atoi(argv[3]);
	bulk_mib = atoi(argv[4]);
	squid_port = argc == 6 ? atoi(argv[5]) : 0;
	if (rounds < 1 || lat_n < 100 || conn_n < 100 || bulk_mib < 1 || squid_port < 0 || squid_port > 65535) {
		fprintf(stderr, "bench_egress: bad numbers\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);   /* a peer's close is an error return, not a kill */
	bench_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (getenv("BENCH_ADDR") && *getenv("BENCH_ADDR")) {
		if (inet_pton(AF_INET, getenv("BENCH_ADDR"), &bench_addr) != 1) {
			fprintf(stderr, "bench_egress: BENCH_ADDR: not an IPv4 address\n");
			return 2;
		}
		resolving = true;
	}
	if (!mkdtemp(dir))
		die("mkdtemp");
	start_upstream();
	start_proxy(dir);
	for (int p = 0; p < NPATHS; p++)
		run[p] = !(p == SQUID && !squid_port) && !(only >= 0 && p != only);
	if (resolving)
		printf("- kosa8's upstream: the proxy's own connector resolves %s (getaddrinfo) "
		       "and connects to %s; cache of resolutions: %s\n\n",
		       NAME, getenv("BENCH_ADDR"), ctx.upstream_cache ? "yes" : "none in this build");
	else
		printf("- kosa8's upstream: the bench's connector to 127.0.0.1, nothing resolved\n\n");
	printf("| round | path | measurement | n | p50 µs | p99 µs | rate |\n|---:|---|---|---:|---:|---:|---|\n");
	for (int r = 1; r <= rounds; r++) {
		for (int p = 0; p < NPATHS; p++) {
			if (!run[p])
				continue;
			bench_latency(r, (enum path)p, lat_n);
			bench_connect(r, (enum path)p, conn_n);
		}
		bench_bulk(r, run, bulk_mib);
	}
	unlink(unix_path);
	rmdir(dir);
	return 0;
}
