/* The sandbox's DNS server, asked by a real resolver client: dig (BIND's,
 * Debian package bind9-dnsutils) over UDP and TCP against egress_dns_answer /
 * egress_dns_serve behind loopback sockets in this process.  Malformed
 * messages are packed by hand below, byte by byte, never by kosa8's own
 * builder, so the answers are checked by code that shares nothing with the
 * code under test.  Also the synthetic name table. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "proxy/dns.h"
#include "proxy/egress.h"
#include "proxy/names.h"
#include "proxy/policy.h"

#define POLICY_TEXT                                                                \
	"allow api.github.com\n"                                                   \
	"allow *.pypi.org\n"                                                       \
	"ask ask.example\n"                                                        \
	"deny evil.example\n"

/* ---- the server under test, on loopback ---- */

static struct policy *pol;
static struct names *tbl;
static struct egress_ctx ctx;
static int udp_fd = -1, tcp_fd = -1;
static uint16_t udp_port, tcp_port;
static pthread_t udp_thread, tcp_thread;
static volatile bool stopping;
static int last_serve_rc = 1;

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static char audit_text[64][512];
static unsigned audit_n;
static enum policy_action ask_answer = POLICY_DENY;
static int ask_calls;

static void record_audit(void *arg, const char *type, cJSON *d)
{
	char *s = cJSON_PrintUnformatted(d);

	pthread_mutex_lock(&audit_lock);
	snprintf(audit_text[audit_n++ % 64], sizeof(audit_text[0]), "%s %s", type, s ? s : "?");
	pthread_mutex_unlock(&audit_lock);
	free(s);
	cJSON_Delete(d);
}

static enum policy_action ask_cb(void *arg, const char *kind, const char *name, uint16_t port)
{
	/* Called on the server's thread: count, check in the test. */
	__atomic_add_fetch(&ask_calls, strcmp(kind, "dns") || port ? 1000 : 1, __ATOMIC_SEQ_CST);
	return ask_answer;
}

/* The last audit record, for checks. */
static const char *last_audit(void)
{
	static char copy[512];

	pthread_mutex_lock(&audit_lock);
	snprintf(copy, sizeof(copy), "%s", audit_n ? audit_text[(audit_n - 1) % 64] : "");
	pthread_mutex_unlock(&audit_lock);
	return copy;
}

static void *udp_loop(void *arg)
{
	uint8_t in[2048], out[DNS_MSG_MAX];

	while (!stopping) {
		struct sockaddr_in from;
		socklen_t flen = sizeof(from);
		struct pollfd p = {.fd = udp_fd, .events = POLLIN};
		ssize_t n;
		int m;
		if (poll(&p, 1, 100) <= 0)
			continue;
		n = recvfrom(udp_fd, in, sizeof(in), 0, (struct sockaddr *)&from, &flen);
		if (n < 0)
			continue;
		m = egress_dns_answer(&ctx, in, (size_t)n, out, sizeof(out));
		if (m > 0)
			sendto(udp_fd, out, (size_t)m, 0, (struct sockaddr *)&from, flen);
	}
	return NULL;
}

static void *tcp_loop(void *arg)
{
	while (!stopping) {
		struct pollfd p = {.fd = tcp_fd, .events = POLLIN};
		int fd;
		if (poll(&p, 1, 100) <= 0)
			continue;
		if ((fd = accept(tcp_fd, NULL, NULL)) < 0)
			continue;
		__atomic_store_n(&last_serve_rc, 1, __ATOMIC_SEQ_CST);
		__atomic_store_n(&last_serve_rc, egress_dns_serve(&ctx, fd), __ATOMIC_SEQ_CST);
	}
	return NULL;
}

static int bound_socket(int type, uint16_t *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	if (type == SOCK_STREAM)
		assert_int_equal(listen(fd, 8), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static int setup(void **state)
{
	struct policy_error e;

	assert_int_equal(policy_new(&pol), 0);
	assert_int_equal(policy_add_text(pol, POLICY_TEXT, strlen(POLICY_TEXT), "test", &e), 0);
	assert_int_equal(names_new(&tbl), 0);
	ctx = (struct egress_ctx){.sandbox = "t", .policy = pol, .names = tbl, .ask = ask_cb,
				  .audit = record_audit, .idle_timeout_ms = 500};
	udp_fd = bound_socket(SOCK_DGRAM, &udp_port);
	tcp_fd = bound_socket(SOCK_STREAM, &tcp_port);
	stopping = false;
	assert_int_equal(pthread_create(&udp_thread, NULL, udp_loop, NULL), 0);
	assert_int_equal(pthread_create(&tcp_thread, NULL, tcp_loop, NULL), 0);
	return 0;
}

static int teardown(void **state)
{
	stopping = true;
	pthread_join(udp_thread, NULL);
	pthread_join(tcp_thread, NULL);
	close(udp_fd);
	close(tcp_fd);
	names_free(tbl);
	policy_free(pol);
	return 0;
}

static int wait_serve_rc(void);

/* ---- asking with dig ---- */

struct dig {
	char status[16];       /* NOERROR, REFUSED, ... */
	int answers;           /* A records seen */
	char addr[64];         /* the first one */
	unsigned ttl;
	bool aa;
	char out[4096];
};

static void run_dig(const char *args, struct dig *d)
{
	char cmd[512];
	const char *s, *line;
	size_t n;
	FILE *f;

	memset(d, 0, sizeof(*d));
	snprintf(cmd, sizeof(cmd), "dig @127.0.0.1 -p %u +tries=1 +time=5 +noall +comments +answer %s 2>&1",
		 udp_port, args);
	/* A TCP question goes to the stream server. */
	if (strstr(args, "+tcp"))
		snprintf(cmd, sizeof(cmd), "dig @127.0.0.1 -p %u +tries=1 +time=5 +noall +comments +answer %s 2>&1",
			 tcp_port, args);
	f = popen(cmd, "r");
	if (!f)
		fail_msg("cannot run dig (package bind9-dnsutils, scripts/deps.sh)");
	n = fread(d->out, 1, sizeof(d->out) - 1, f);
	d->out[n] = '\0';
	if (pclose(f) != 0)
		fail_msg("dig failed (is bind9-dnsutils installed? scripts/deps.sh): %s", d->out);
	if (!(s = strstr(d->out, "status: ")) || sscanf(s, "status: %15[A-Z],", d->status) != 1)
		fail_msg("no status in dig's output: %s", d->out);
	d->aa = strstr(d->out, "flags: qr aa") != NULL;
	for (line = d->out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		char name[300], cls[8], type[8], addr[64];
		unsigned ttl;
		if (*line == ';' || *line == '\n')
			continue;
		if (sscanf(line, "%299s %u %7s %7s %63s", name, &ttl, cls, type, addr) == 5 &&
		    !strcmp(type, "A")) {
			if (!d->answers++) {
				snprintf(d->addr, sizeof(d->addr), "%s", addr);
				d->ttl = ttl;
			}
		}
	}
}

static bool synthetic(const char *addr)
{
	struct in_addr a;
	uint32_t h;

	if (inet_pton(AF_INET, addr, &a) != 1)
		return false;
	h = ntohl(a.s_addr);
	return (h & 0xfffe0000u) == 0xc6120000u; /* 198.18.0.0/15, written out */
}

static void test_allowed_name_gets_synthetic_a(void **state)
{
	struct dig d, again, other, tcp;

	run_dig("api.github.com A", &d);
	assert_string_equal(d.status, "NOERROR");
	assert_int_equal(d.answers, 1);
	assert_true(synthetic(d.addr));
	assert_int_equal(d.ttl, 60);
	assert_true(d.aa);
	assert_non_null(strstr(last_audit(), "net.dns {\"name\":\"api.github.com\",\"qtype\":\"A\","
					     "\"decision\":\"allow\",\"rule\":\"allow api.github.com (test:1)\""));
	/* Same name (any case, trailing dot), same address; without EDNS too. */
	run_dig("API.GitHub.com. A +noedns", &again);
	assert_string_equal(again.status, "NOERROR");
	assert_string_equal(again.addr, d.addr);
	/* Another name, another address. */
	run_dig("files.pypi.org A", &other);
	assert_string_equal(other.status, "NOERROR");
	assert_true(synthetic(other.addr));
	assert_string_not_equal(other.addr, d.addr);
	/* The stream server (the vsock DNS port's framing) answers the same. */
	run_dig("api.github.com A +tcp", &tcp);
	assert_string_equal(tcp.status, "NOERROR");
	assert_string_equal(tcp.addr, d.addr);
}

static void test_nodata_for_other_types(void **state)
{
	struct dig d;

	run_dig("api.github.com AAAA", &d);
	assert_string_equal(d.status, "NOERROR");
	assert_int_equal(d.answers, 0);
	assert_non_null(strstr(d.out, "ANSWER: 0"));
	assert_non_null(strstr(last_audit(), "\"qtype\":\"AAAA\",\"decision\":\"allow\""));
	run_dig("files.pypi.org TXT", &d);
	assert_string_equal(d.status, "NOERROR");
	assert_non_null(strstr(d.out, "ANSWER: 0"));
}

static void test_refused(void **state)
{
	static const char *const names[] = {
		"evil.example A",
		"unknown.org A",
		"pypi.org A",                       /* *.pypi.org is strictly below */
		"github.com A",                     /* the sibling of an allowed name */
		"x7kq2.github.io A",                /* a random subdomain elsewhere */
		"api.github.com.evil.example A",
		"c2VjcmV0.attacker.example TXT",    /* a tunnel attempt */
		"c2VjcmV0.attacker.example NULL",
		"1.2.3.4 A",                        /* an IP literal as a name */
		"_dmarc.api.github.com TXT",        /* not a host name */
		". NS",
	};
	struct dig d;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		run_dig(names[i], &d);
		if (strcmp(d.status, "REFUSED") || d.answers)
			fail_msg("%s: %s", names[i], d.out);
		assert_non_null(strstr(last_audit(), "\"decision\":\"deny\""));
		assert_non_null(strstr(last_audit(), "\"rcode\":\"REFUSED\""));
	}
	assert_non_null(strstr(last_audit(), "\"rule\":\"not a host name\""));
	run_dig("evil.example A +tcp", &d);
	assert_string_equal(d.status, "REFUSED");
	/* The stream's records follow its answers: the serve ends (dig
	 * hung up) only after the last one. */
	assert_int_equal(wait_serve_rc(), 0);
	assert_non_null(strstr(last_audit(), "\"rule\":\"deny evil.example (test:4)\""));
}

/* An `ask` name gets its synthetic address at once, with nobody asked (a
 * resolver would give up long before a person answers): the address maps
 * back to the name, and the proxy asks when the guest connects to it. */
static void test_ask(void **state)
{
	struct dig d, again;
	struct in_addr ia;
	char name[POLICY_NAME_MAX + 1];
	int before = ask_calls;

	ask_answer = POLICY_DENY; /* would refuse it, if DNS asked */
	run_dig("ask.example A", &d);
	assert_string_equal(d.status, "NOERROR");
	assert_int_equal(d.answers, 1);
	assert_true(synthetic(d.addr));
	assert_non_null(strstr(last_audit(), "\"decision\":\"ask\",\"rule\":\"ask ask.example (test:3)\""));
	assert_null(strstr(last_audit(), "\"asked\""));
	assert_int_equal(inet_pton(AF_INET, d.addr, &ia), 1);
	assert_int_equal(names_lookup(tbl, ntohl(ia.s_addr), name, sizeof(name)), 0);
	assert_string_equal(name, "ask.example");
	/* Without an ask hook too (the proxy then denies the connection). */
	ctx.ask = NULL;
	run_dig("ASK.example. A", &again);
	ctx.ask = ask_cb;
	assert_string_equal(again.status, "NOERROR");
	assert_string_equal(again.addr, d.addr);
	run_dig("ask.example AAAA", &d);
	assert_string_equal(d.status, "NOERROR");
	assert_int_equal(d.answers, 0);
	assert_int_equal(ask_calls, before);
	/* A denied name stays refused. */
	run_dig("evil.example A", &d);
	assert_string_equal(d.status, "REFUSED");
}

/* ---- malformed messages, packed by hand ---- */

/* Sends msg over UDP; returns the reply's length (0: none within 400 ms). */
static size_t udp_ask(const uint8_t *msg, size_t len, uint8_t *reply, size_t rlen)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(udp_port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t n = 0;

	assert_true(fd >= 0);
	assert_int_equal(sendto(fd, msg, len, 0, (struct sockaddr *)&a, sizeof(a)), (ssize_t)len);
	if (poll(&p, 1, 400) == 1)
		n = recv(fd, reply, rlen, 0);
	close(fd);
	assert_true(n >= 0);
	return (size_t)n;
}

/* Expects a 12-byte or longer reply with id 0xbeef, QR set and rcode. */
static void expect_rcode(const uint8_t *msg, size_t len, int rcode)
{
	uint8_t r[1024];
	size_t n = udp_ask(msg, len, r, sizeof(r));

	if (n < 12)
		fail_msg("no answer (%zu bytes) where rcode %d was due", n, rcode);
	assert_int_equal(r[0], 0xbe);
	assert_int_equal(r[1], 0xef);
	assert_true(r[2] & 0x80);
	assert_int_equal(r[3] & 0x0f, rcode);
	assert_int_equal(r[6] | r[7], 0); /* no answers */
}

static void expect_silence(const uint8_t *msg, size_t len)
{
	uint8_t r[1024];

	assert_int_equal(udp_ask(msg, len, r, sizeof(r)), 0);
}

static void test_malformed(void **state)
{
	/* id beef, RD, QD=1: "a.com" A IN */
	static const uint8_t good[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
				       1, 'a', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1};
	/* The question's name cut in the middle of a label. */
	static const uint8_t truncated[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
					    5, 'a', 'b'};
	/* A name without its type and class. */
	static const uint8_t no_type[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
					  1, 'a', 0, 0};
	/* A compression pointer to itself: a loop for a naive reader. */
	static const uint8_t loop[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
				       0xc0, 12, 0, 1, 0, 1};
	/* A label after a pointer back into the header. */
	static const uint8_t pointer[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
					  1, 'a', 0xc0, 2, 0, 1, 0, 1};
	/* Reserved label type 0x40 (the old "extended label"). */
	static const uint8_t ext_label[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
					    0x41, 'a', 0, 0, 1, 0, 1};
	/* Two questions; one answer record in a query. */
	static const uint8_t two_q[] = {0xbe, 0xef, 0x01, 0x00, 0, 2, 0, 0, 0, 0, 0, 0,
					1, 'a', 0, 0, 1, 0, 1, 1, 'b', 0, 0, 1, 0, 1};
	static const uint8_t an_in_query[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 1, 0, 0, 0, 0,
					      1, 'a', 0, 0, 1, 0, 1};
	/* Garbage after the question; an additional record that is not OPT. */
	static const uint8_t trailing[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
					   1, 'a', 0, 0, 1, 0, 1, 0xde, 0xad};
	static const uint8_t not_opt[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1,
					  1, 'a', 0, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0};
	/* An OPT record whose data runs past the end. */
	static const uint8_t opt_overrun[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1,
					      1, 'a', 0, 0, 1, 0, 1, 0, 0, 41, 16, 0, 0, 0, 0, 0, 0, 9, 1};
	/* A byte that is not a host-name character inside a label. */
	static const uint8_t dot_in_label[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
					       3, 'a', '.', 'b', 0, 0, 1, 0, 1};
	/* Opcode 2 (STATUS), class CH (version.bind-style probes). */
	static const uint8_t status_op[] = {0xbe, 0xef, 0x11, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
					    1, 'a', 0, 0, 1, 0, 1};
	static const uint8_t chaos[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
					1, 'a', 0, 0, 16, 0, 3};
	/* A response (QR set) and a message shorter than a header: dropped. */
	static const uint8_t response[] = {0xbe, 0xef, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0,
					   1, 'a', 0, 0, 1, 0, 1};
	static const uint8_t short_msg[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0};
	uint8_t big[600], longname[12 + 5 * 52 + 5];
	size_t p = 12;

	/* The well-formed one parses (REFUSED: a.com is not allowed). */
	expect_rcode(good, sizeof(good), 5);
	expect_rcode(truncated, sizeof(truncated), 1);
	expect_rcode(no_type, sizeof(no_type), 1);
	expect_rcode(loop, sizeof(loop), 1);
	expect_rcode(pointer, sizeof(pointer), 1);
	expect_rcode(ext_label, sizeof(ext_label), 1);
	expect_rcode(two_q, sizeof(two_q), 1);
	expect_rcode(an_in_query, sizeof(an_in_query), 1);
	expect_rcode(trailing, sizeof(trailing), 1);
	expect_rcode(not_opt, sizeof(not_opt), 1);
	expect_rcode(opt_overrun, sizeof(opt_overrun), 1);
	expect_rcode(dot_in_label, sizeof(dot_in_label), 1);
	expect_rcode(status_op, sizeof(status_op), 4);
	expect_rcode(chaos, sizeof(chaos), 4);
	expect_silence(response, sizeof(response));
	expect_silence(short_msg, sizeof(short_msg));
	assert_non_null(strstr(last_audit(), "\"decision\":\"dropped\""));
	/* Over 512 bytes: FORMERR. */
	memset(big, 0, sizeof(big));
	memcpy(big, good, sizeof(good));
	expect_rcode(big, sizeof(big), 1);
	/* 52 labels of 4: 259 characters, over the 253 a name may have. */
	memcpy(longname, good, 12);
	for (int i = 0; i < 52; i++) {
		longname[p++] = 4;
		memcpy(longname + p, "abcd", 4);
		p += 4;
	}
	longname[p++] = 0;
	memcpy(longname + p, "\0\1\0\1", 4);
	p += 4;
	expect_rcode(longname, p, 1);
}

/* ---- the stream framing ---- */

static int tcp_connect(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(tcp_port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static size_t read_some(int fd, uint8_t *buf, size_t len, int timeout_ms)
{
	size_t got = 0;

	while (got < len) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t n;
		if (poll(&p, 1, timeout_ms) != 1)
			break;
		n = read(fd, buf + got, len - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	return got;
}

static int wait_serve_rc(void)
{
	for (int i = 0; i < 300; i++) {
		int rc = __atomic_load_n(&last_serve_rc, __ATOMIC_SEQ_CST);
		if (rc != 1)
			return rc;
		usleep(10000);
	}
	return 1;
}

static void test_stream(void **state)
{
	/* Two queries in one write: "evil.example" A, then "api.github.com" AAAA. */
	static const uint8_t two[] = {
		0, 30, 0x00, 0x01, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		4, 'e', 'v', 'i', 'l', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0, 1, 0, 1,
		0, 32, 0x00, 0x02, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		3, 'a', 'p', 'i', 6, 'g', 'i', 't', 'h', 'u', 'b', 3, 'c', 'o', 'm', 0, 0, 28, 0, 1,
	};
	uint8_t r[256];
	int fd = tcp_connect();
	size_t n;

	assert_int_equal(write(fd, two, sizeof(two)), (ssize_t)sizeof(two));
	/* Answers in order: each a length, then header + the question echoed. */
	n = read_some(fd, r, 2 + 30 + 2 + 32, 3000);
	assert_int_equal(n, 2 + 30 + 2 + 32);
	assert_int_equal(r[0] << 8 | r[1], 30);
	assert_int_equal(r[2] << 8 | r[3], 1);
	assert_int_equal(r[5] & 0x0f, 5);                 /* REFUSED */
	assert_memory_equal(r + 14, two + 14, 18);        /* question as asked */
	assert_int_equal(r[32] << 8 | r[33], 32);
	assert_int_equal(r[34] << 8 | r[35], 2);
	assert_int_equal(r[37] & 0x0f, 0);                /* NODATA */
	assert_int_equal(r[40] << 8 | r[41], 0);
	/* A length, then the stream ends mid-message. */
	assert_int_equal(write(fd, "\0\x20\xab\xcd", 4), 4);
	shutdown(fd, SHUT_WR);
	assert_int_equal(read_some(fd, r, sizeof(r), 3000), 0);
	close(fd);
	assert_int_equal(wait_serve_rc(), -ECONNRESET);
	/* A guest that hangs up before its answers: the server's writes fail
	 * (EPIPE/ECONNRESET), without a SIGPIPE that would end this process. */
	__atomic_store_n(&last_serve_rc, 1, __ATOMIC_SEQ_CST);
	fd = tcp_connect();
	for (int i = 0; i < 4; i++)
		assert_int_equal(write(fd, two, sizeof(two)), (ssize_t)sizeof(two));
	close(fd);
	assert_true(wait_serve_rc() < 0);
	/* A clean end between messages is not an error. */
	__atomic_store_n(&last_serve_rc, 1, __ATOMIC_SEQ_CST);
	fd = tcp_connect();
	shutdown(fd, SHUT_WR);
	assert_int_equal(read_some(fd, r, sizeof(r), 3000), 0);
	close(fd);
	assert_int_equal(wait_serve_rc(), 0);
}

/* The guest has its answer before the record is made: the supervisor
 * writes the first record of a kind with an fdatasync (milliseconds), which
 * a new name's first lookup would otherwise wait for.  Here the audit hook
 * looks at the guest's end of the stream: the answer must be there. */
static int peek_fd = -1;
static int peeked = -2;
static sem_t audited;

/* The first record's moment; the test reads the answer only after it, so
 * that the peek cannot miss an answer the test had already taken. */
static void peek_audit(void *arg, const char *type, cJSON *d)
{
	uint8_t b[64];

	if (peeked == -2) {
		peeked = (int)recv(peek_fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
		sem_post(&audited);
	}
	record_audit(arg, type, d);
}

static struct egress_ctx peek_ctx;

static void *serve_pair(void *arg)
{
	int rc = egress_dns_serve(&peek_ctx, (int)(intptr_t)arg);

	__atomic_store_n(&last_serve_rc, rc, __ATOMIC_SEQ_CST);
	return NULL;
}

static void test_stream_answer_before_audit(void **state)
{
	static const uint8_t q[] = {
		0, 32, 0x00, 0x07, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		3, 'a', 'p', 'i', 6, 'g', 'i', 't', 'h', 'u', 'b', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1,
	};
	uint8_t r[128];
	int sp[2];
	pthread_t t;

	struct timespec until;

	assert_int_equal(sem_init(&audited, 0, 0), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	peek_fd = sp[0];
	peeked = -2;
	peek_ctx = ctx;
	peek_ctx.audit = peek_audit;
	assert_int_equal(pthread_create(&t, NULL, serve_pair, (void *)(intptr_t)sp[1]), 0);
	assert_int_equal(write(sp[0], q, sizeof(q)), (ssize_t)sizeof(q));
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	assert_int_equal(sem_timedwait(&audited, &until), 0);
	assert_int_equal(read_some(sp[0], r, 2 + 48, 3000), 2 + 48);
	assert_int_equal(r[2] << 8 | r[3], 7);
	shutdown(sp[0], SHUT_WR);
	pthread_join(t, NULL);
	close(sp[0]);
	assert_int_equal(__atomic_load_n(&last_serve_rc, __ATOMIC_SEQ_CST), 0);
	assert_true(peeked > 0);
	sem_destroy(&audited);
	assert_non_null(strstr(last_audit(), "\"name\":\"api.github.com\""));
}

static void test_stream_idle_and_oversized(void **state)
{
	uint8_t r[64], big[2 + 1000];
	int fd;

	/* Silence: closed after idle_timeout_ms (500). */
	__atomic_store_n(&last_serve_rc, 1, __ATOMIC_SEQ_CST);
	fd = tcp_connect();
	assert_int_equal(read_some(fd, r, sizeof(r), 5000), 0);
	close(fd);
	assert_int_equal(wait_serve_rc(), -ETIMEDOUT);
	/* A 1000-byte message: read whole, answered FORMERR, stream goes on. */
	memset(big, 0, sizeof(big));
	big[0] = 1000 >> 8;
	big[1] = 1000 & 0xff;
	big[2] = 0x12;
	big[3] = 0x34;
	big[4] = 0x01;
	fd = tcp_connect();
	assert_int_equal(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
	assert_int_equal(read_some(fd, r, 14, 3000), 14);
	assert_int_equal(r[1], 12);
	assert_int_equal(r[2] << 8 | r[3], 0x1234);
	assert_int_equal(r[5] & 0x0f, 1);
	close(fd);
}

/* ---- builder and parser directly ---- */

static void test_build_refuses_to_overflow(void **state)
{
	static const uint8_t q[] = {0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
				    1, 'a', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1};
	const uint8_t addr[4] = {198, 18, 0, 7};
	struct dns_query dq;
	uint8_t out[DNS_MSG_MAX];
	int rcode;

	assert_int_equal(dns_parse_query(q, sizeof(q), &dq, &rcode), 0);
	assert_string_equal(dq.name, "a.com");
	assert_int_equal(dq.qtype, 1);
	assert_int_equal(dq.rd, 1);
	assert_int_equal(dns_build_answer(&dq, 0, addr, 60, out, 12 + 11 + 15), -ENOSPC);
	assert_int_equal(dns_build_answer(&dq, 0, addr, 60, out, sizeof(out)), 12 + 11 + 16);
	assert_int_equal(dns_build_error(q, 11, 1, out, sizeof(out)), -EINVAL);
	dq.qtype = 28; /* an A record for an AAAA question is a caller's bug */
	assert_int_equal(dns_build_answer(&dq, 0, addr, 60, out, sizeof(out)), -EINVAL);
}

/* ---- the synthetic name table ---- */

static void test_names_both_ways(void **state)
{
	struct names *t;
	uint32_t a1, a2, a3;
	char name[POLICY_NAME_MAX + 1];

	assert_int_equal(names_new(&t), 0);
	assert_int_equal(names_assign(t, "a.example", &a1), 0);
	assert_int_equal(names_assign(t, "b.example", &a2), 0);
	assert_int_equal(names_assign(t, "a.example", &a3), 0);
	assert_int_equal(a1, a3);
	assert_int_not_equal(a1, a2);
	assert_int_equal(a1, 0xc6120001u); /* 198.18.0.1: .0 is the network */
	assert_int_equal(names_lookup(t, a2, name, sizeof(name)), 0);
	assert_string_equal(name, "b.example");
	assert_int_equal(names_lookup(t, a2, name, 4), -ENAMETOOLONG);
	assert_int_equal(names_lookup(t, a2 + 1, name, sizeof(name)), -ENOENT);
	assert_int_equal(names_lookup(t, 0xc6120000u, name, sizeof(name)), -ENOENT);
	assert_int_equal(names_lookup(t, 0x7f000001u, name, sizeof(name)), -ENOENT);
	assert_int_equal(names_lookup(t, 0xc6140001u, name, sizeof(name)), -ENOENT);
	assert_int_equal(names_assign(t, "", &a3), -EINVAL);
	names_free(t);
}

static void test_names_fill_the_range(void **state)
{
	struct names *t;
	uint32_t a, last = 0;
	char name[32];

	assert_int_equal(names_new(&t), 0);
	for (uint32_t i = 0; i < NAMES_COUNT; i++) {
		snprintf(name, sizeof(name), "h%u.example", i);
		assert_int_equal(names_assign(t, name, &a), 0);
		if (a != last + 1 && last)
			fail_msg("address %08x after %08x", a, last);
		last = a;
	}
	assert_int_equal(last, 0xc613fffeu); /* 198.19.255.254: .255.255 is broadcast */
	assert_int_equal(names_assign(t, "one.more", &a), -ENOSPC);
	assert_int_equal(names_assign(t, "h7.example", &a), 0);
	assert_int_equal(a, 0xc6120008u);
	assert_int_equal(names_lookup(t, 0xc613fffeu, name, sizeof(name)), 0);
	assert_string_equal(name, "h131069.example");
	names_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allowed_name_gets_synthetic_a),
		cmocka_unit_test(test_nodata_for_other_types),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_ask),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_stream),
		cmocka_unit_test(test_stream_answer_before_audit),
		cmocka_unit_test(test_stream_idle_and_oversized),
		cmocka_unit_test(test_build_refuses_to_overflow),
		cmocka_unit_test(test_names_both_ways),
		cmocka_unit_test(test_names_fill_the_range),
	};
	return cmocka_run_group_tests_name("dns", tests, setup, teardown);
}
