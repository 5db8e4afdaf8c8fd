/* The supervisor's egress wiring (src/supervisor/egress.c) without a VM:
 * the policy layering and its error messages, then the real listeners on
 * <vsock>_1053 / <vsock>_1080 driven the way the VMM's vsock device would
 * (a unix connection per guest connection): a DNS query answered from
 * policy with a synthetic address and audited, a TCP connection to an
 * address that is not synthetic refused, and a clean stop.  Also the
 * sandbox config's egress lists (src/sandbox/sandbox.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "egress_dirs.h"

#include "common/util.h"
#include "supervisor/egress.h"
#include "sandbox/sandbox.h"


static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state) { return egress_dirs_make("supeg"); }

static int teardown(void **state) { return egress_dirs_remove(); }

static void clear_policies(void)
{
	char p[200];
	snprintf(p, sizeof(p), "%s/policy", cfgdir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/policy", statedir);
	unlink(p);
}

/* ---- policy layering ---- */

static void test_policy_layers(void **state)
{
	const char *allow[] = { "c.test", "*.d.test:443" };
	char why[256] = "", p[200];
	struct policy *pol = NULL;

	clear_policies();
	/* Nothing at all: everything denied. */
	assert_int_equal(sup_egress_policy(statedir, NULL, 0, &pol, why, sizeof(why)), 0);
	assert_int_equal(policy_decide(pol, "a.test", 443, NULL, 0), POLICY_DENY);
	policy_free(pol);
	/* User defaults, then the sandbox's file, then --allow. */
	snprintf(p, sizeof(p), "%s/policy", cfgdir);
	write_text(p, "default ask\nallow a.test\n");
	snprintf(p, sizeof(p), "%s/policy", statedir);
	write_text(p, "allow b.test\ndeny a.test\n");
	assert_int_equal(sup_egress_policy(statedir, allow, 2, &pol, why, sizeof(why)), 0);
	assert_int_equal(policy_decide(pol, "a.test", 443, NULL, 0), POLICY_DENY);   /* deny wins */
	assert_int_equal(policy_decide(pol, "b.test", 80, NULL, 0), POLICY_ALLOW);
	assert_int_equal(policy_decide(pol, "c.test", 80, NULL, 0), POLICY_ALLOW);
	assert_int_equal(policy_decide(pol, "x.d.test", 443, NULL, 0), POLICY_ALLOW);
	assert_int_not_equal(policy_decide(pol, "x.d.test", 80, NULL, 0), POLICY_ALLOW);
	assert_int_equal(policy_decide(pol, "unknown.test", 443, NULL, 0), POLICY_ASK);
	policy_free(pol);
	clear_policies();
}

static void test_policy_errors(void **state)
{
	const char *bad_allow[] = { "ok.test", "no spaces allowed" };
	char why[256], p[200];
	struct policy *pol = NULL;

	clear_policies();
	snprintf(p, sizeof(p), "%s/policy", statedir);
	write_text(p, "allow fine.test\nallow *.\n");
	assert_int_equal(sup_egress_policy(statedir, NULL, 0, &pol, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, p));
	assert_non_null(strstr(why, "line 2"));
	clear_policies();
	snprintf(p, sizeof(p), "%s/policy", cfgdir);
	write_text(p, "bogus\n");
	assert_true(sup_egress_policy(statedir, NULL, 0, &pol, why, sizeof(why)) < 0);
	assert_non_null(strstr(why, cfgdir));
	assert_non_null(strstr(why, "line 1"));
	clear_policies();
	assert_true(sup_egress_policy(statedir, bad_allow, 2, &pol, why, sizeof(why)) < 0);
	assert_non_null(strstr(why, "--allow no spaces allowed"));
}

/* ---- listeners ---- */

struct rec { char types[16][32]; int n; pthread_mutex_t lock; };

static void record(void *arg, const char *type, cJSON *details)
{
	struct rec *r = arg;
	pthread_mutex_lock(&r->lock);
	if (r->n < 16)
		snprintf(r->types[r->n++], sizeof(r->types[0]), "%s", type);
	pthread_mutex_unlock(&r->lock);
	cJSON_Delete(details);
}

static int uconnect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static size_t read_some(int fd, uint8_t *buf, size_t cap, size_t want)
{
	size_t got = 0;
	while (got < want) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		assert_int_equal(poll(&p, 1, 10000), 1);
		ssize_t n = read(fd, buf + got, cap - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	return got;
}

static bool has_type(struct rec *r, const char *type)
{
	bool found = false;
	pthread_mutex_lock(&r->lock);
	for (int i = 0; i < r->n; i++)
		found |= !strcmp(r->types[i], type);
	pthread_mutex_unlock(&r->lock);
	return found;
}

static void test_listeners(void **state)
{
	static const uint8_t query[] = {
		0, 30,                                   /* framing */
		0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		7, 'a', 'l', 'l', 'o', 'w', 'e', 'd', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1,
	};
	static const uint8_t hdr[] = { 'K', '8', 'E', '1', 4, 0, 0, 80, 192, 0, 2, 10 };
	const char *allow[] = { "allowed.test" };
	char vsock[200], p[240], why[256] = "";
	struct rec r = { .n = 0 };
	struct sup_egress_opts o = {
		.sandbox = "t", .state_dir = statedir, .vsock_path = vsock, .allow = allow,
		.nallow = 1, .audit = record, .audit_arg = &r,
	};
	struct sup_egress *e = NULL;
	uint8_t buf[600];
	struct stat st;

	clear_policies();
	pthread_mutex_init(&r.lock, NULL);
	snprintf(vsock, sizeof(vsock), "%s/vsock.sock", dir);
	assert_int_equal(sup_egress_start(&o, &e, why, sizeof(why)), 0);
	assert_non_null(sup_egress_ca_pem(e));
	assert_non_null(strstr(sup_egress_ca_pem(e), "BEGIN CERTIFICATE"));
	assert_null(sup_egress_guest_env(e)[0]);   /* no secrets */
	assert_non_null(sup_egress_approvals(e));

	/* DNS: the allowed name gets a synthetic A record. */
	snprintf(p, sizeof(p), "%s_1053", vsock);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	int d = uconnect(p);
	assert_int_equal(write(d, query, sizeof(query)), (ssize_t)sizeof(query));
	size_t n = read_some(d, buf, sizeof(buf), 2);
	assert_true(n >= 2);
	size_t alen = (size_t)buf[0] << 8 | buf[1];
	n += read_some(d, buf + n, sizeof(buf) - n, 2 + alen - n);
	assert_int_equal(n, 2 + alen);
	assert_int_equal(buf[2], 0xab);
	assert_int_equal(buf[3], 0xcd);
	assert_int_equal(buf[5] & 0x0f, 0);                 /* NOERROR */
	assert_int_equal(buf[2 + alen - 4], 198);           /* 198.18.x.x */
	assert_int_equal(buf[2 + alen - 3] & 0xfe, 18);
	close(d);

	/* TCP to an address the DNS never gave: closed, nothing relayed. */
	snprintf(p, sizeof(p), "%s_1080", vsock);
	int t = uconnect(p);
	assert_int_equal(write(t, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
	size_t got = read_some(t, buf, sizeof(buf), 1);
	if (got)
		print_message("got %zu bytes: %02x\n", got, buf[0]);
	assert_int_equal(got, 0);
	close(t);
	for (int i = 0; i < 200 && !(has_type(&r, "net.dns") && has_type(&r, "net.connect")); i++)
		usleep(10000);
	assert_true(has_type(&r, "net.dns"));
	assert_true(has_type(&r, "net.connect"));

	sup_egress_stop(e);
	assert_int_equal(stat(p, &st), -1);   /* listeners gone */
	snprintf(p, sizeof(p), "%s_1053", vsock);
	assert_int_equal(stat(p, &st), -1);
	pthread_mutex_destroy(&r.lock);
}

/* One framed DNS query on a new connection to path; true if answered. */
static bool dns_answered(const char *path)
{
	static const uint8_t query[] = {
		0, 30, 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		7, 'a', 'l', 'l', 'o', 'w', 'e', 'd', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1,
	};
	uint8_t buf[600];
	int d = uconnect(path);
	bool ok = write(d, query, sizeof(query)) == (ssize_t)sizeof(query) &&
		  read_some(d, buf, sizeof(buf), 4) >= 4 && buf[2] == 0x12 && buf[3] == 0x34;

	close(d);
	return ok;
}

static int count_lines(const char *path, const char *needle)
{
	char line[512];
	int n = 0;
	FILE *f = fopen(path, "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* For a test holding SUP_EGRESS_MAX_CONNS connections: both ends of each
 * live in this process. */
static void prepare_many(struct rec *r, char *vsock, size_t len)
{
	struct rlimit rl;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 3 * SUP_EGRESS_MAX_CONNS) {
		rl.rlim_cur = rl.rlim_max;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	assert_true(rl.rlim_cur >= 3 * SUP_EGRESS_MAX_CONNS);
	clear_policies();
	pthread_mutex_init(&r->lock, NULL);
	snprintf(vsock, len, "%s/vsock.sock", dir);
}

#define EXTRA_CONNS 40
/* A guest holding SUP_EGRESS_MAX_CONNS connections (DNS streams, which
 * never time out) and connecting again and again: the extra connections
 * are closed at once, and the host's log gets one line for all of them
 * (it used to get one each: a guest could fill the host's disk).  Once the
 * held ones close, a new connection is served within seconds. */
static void test_conn_limit(void **state)
{
	const char *allow[] = { "allowed.test" };
	char vsock[200], p[240], logf[240], why[256] = "";
	struct rec r = { .n = 0 };
	struct sup_egress_opts o = {
		.sandbox = "t", .state_dir = statedir, .vsock_path = vsock, .allow = allow,
		.nallow = 1, .audit = record, .audit_arg = &r,
	};
	static int held[SUP_EGRESS_MAX_CONNS];
	struct sup_egress *e = NULL;
	uint8_t buf[8];
	int saved, lf, tries;

	prepare_many(&r, vsock, sizeof(vsock));
	snprintf(p, sizeof(p), "%s_1053", vsock);
	snprintf(logf, sizeof(logf), "%s/stderr.log", dir);
	assert_int_equal(sup_egress_start(&o, &e, why, sizeof(why)), 0);
	lf = open(logf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(lf >= 0);
	saved = dup(2);
	dup2(lf, 2);
	for (int i = 0; i < SUP_EGRESS_MAX_CONNS; i++)
		held[i] = uconnect(p);
	/* One accept thread, in connect order: these come after the held ones. */
	for (int i = 0; i < EXTRA_CONNS; i++) {
		int x = uconnect(p);
		assert_int_equal(read_some(x, buf, sizeof(buf), 1), 0);
		close(x);
	}
	dup2(saved, 2);
	close(saved);
	close(lf);
	assert_int_equal(count_lines(logf, "refused"), 1);
	for (int i = 0; i < SUP_EGRESS_MAX_CONNS; i++)
		close(held[i]);
	for (tries = 0; tries < 100 && !dns_answered(p); tries++)
		usleep(100 * 1000);
	assert_true(tries < 100);
	sup_egress_stop(e);
	pthread_mutex_destroy(&r.lock);
}

/* Times chosen so that a loaded machine (ASan build beside two VM helpers,
 * load 10 and more) stretches the test instead of failing it.  Accepting
 * the 512 connections took over 4 s there, and the probe that every slot is
 * taken must come after the last accept and before the first deadline: so
 * 8 s.  The proxy's clock for a deadline starts at its accept, which a
 * loaded machine delays, and it closes a connection only when its thread
 * runs: so the shortest message (the 12-byte connection header) takes
 * 16.5 s at one byte per 1.5 s, twice the deadline.  1.5 s is still far
 * under the 15 s per-read timeout, which must never be what closes them. */
#define DRIP_DECIDE_MS 8000
#define DRIP_EVERY_MS 1500
#define DRIP_PROBE_MS 500
/* Only against a proxy that never closes them: the loop ends when the
 * first open connection has sent its whole message, so a loaded machine
 * that steps slower gives the proxy more time, not a failure. */
#define DRIP_GIVE_UP_MS 60000

/* One DNS query for allowed.test on a new connection: its synthetic
 * address, network order. */
static void synthetic_of_allowed(const char *path, uint8_t addr[4])
{
	static const uint8_t query[] = {
		0, 30, 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		7, 'a', 'l', 'l', 'o', 'w', 'e', 'd', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1,
	};
	uint8_t buf[600];
	int d = uconnect(path);
	size_t n, alen;

	assert_int_equal(write(d, query, sizeof(query)), (ssize_t)sizeof(query));
	n = read_some(d, buf, sizeof(buf), 2);
	assert_true(n >= 2);
	alen = (size_t)buf[0] << 8 | buf[1];
	n += read_some(d, buf + n, sizeof(buf) - n, 2 + alen - n);
	assert_int_equal(n, 2 + alen);
	memcpy(addr, buf + 2 + alen - 4, 4);
	close(d);
}

struct drip {
	int fd;
	const uint8_t *msg;
	size_t len, sent;
	uint64_t start, closed;   /* mono_ms */
	uint64_t last;            /* mono_ms of the last byte sent */
};

/* A DNS connection is closed by the proxy within DRIP_PROBE_MS, unserved
 * (one it serves would stay open until its DRIP_DECIDE_MS deadline). */
static bool probe_closed_at_once(const char *dns)
{
	int nul = open("/dev/null", O_WRONLY | O_CLOEXEC), saved = dup(2), x;
	struct pollfd p;
	uint8_t b;
	bool closed;

	dup2(nul, 2);   /* its log line */
	x = uconnect(dns);
	p = (struct pollfd){ .fd = x, .events = POLLIN };
	closed = poll(&p, 1, DRIP_PROBE_MS) == 1 && read(x, &b, 1) == 0;
	close(x);
	dup2(saved, 2);
	close(saved);
	close(nul);
	return closed;
}

/* Some connection still open has sent all of its message. */
static bool drip_any_whole(const struct drip *d, int n)
{
	for (int i = 0; i < n; i++)
		if (!d[i].closed && d[i].sent == d[i].len)
			return true;
	return false;
}

/* One step of one dripping connection: true once the proxy closed it. */
static bool drip_step(struct drip *d)
{
	uint8_t b;
	ssize_t n = recv(d->fd, &b, 1, MSG_DONTWAIT);

	if (n == 0 || (n < 0 && errno != EAGAIN))
		return true;
	assert_true(n < 0);   /* the proxy never writes to these */
	if (d->sent < d->len && mono_ms() - d->last >= DRIP_EVERY_MS) {
		d->last = mono_ms();
		if (send(d->fd, d->msg + d->sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
			d->sent++;
		else if (errno != EAGAIN)
			return true;
	}
	return false;
}

/* A guest holds every connection slot with connections that send a byte
 * every DRIP_EVERY_MS, so that no read ever waits long: a third drip the
 * connection header, a third a whole header and then an HTTP request head,
 * a third a DNS message.  Each is closed when its phase's deadline passes
 * (decide_ms after it began), before its bytes are all sent; then a new
 * connection is served.  A per-read timeout alone never closed them. */
static void test_drip_deadline(void **state)
{
	static const uint8_t dnsq[] = {
		0, 30, 0x56, 0x78, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
		7, 'a', 'l', 'l', 'o', 'w', 'e', 'd', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1,
	};
	static const char req[] = "GET / HTTP/1.1\r\nHost: allowed.test\r\nUser-Agent: drip\r\n\r\n";
	static struct drip d[SUP_EGRESS_MAX_CONNS];
	const char *allow[] = { "allowed.test" };
	char vsock[200], dns[240], tcp[240], why[256] = "";
	struct rec r = { .n = 0 };
	struct sup_egress_opts o = {
		.sandbox = "t", .state_dir = statedir, .vsock_path = vsock, .allow = allow,
		.nallow = 1, .audit = record, .audit_arg = &r, .decide_ms = DRIP_DECIDE_MS,
	};
	uint8_t hdr[12] = { 'K', '8', 'E', '1', 4, 0, 0, 80 };
	struct sup_egress *e = NULL;
	int open_n = SUP_EGRESS_MAX_CONNS;
	bool probed = false;
	uint64_t t0;

	prepare_many(&r, vsock, sizeof(vsock));
	snprintf(dns, sizeof(dns), "%s_1053", vsock);
	snprintf(tcp, sizeof(tcp), "%s_1080", vsock);
	assert_int_equal(sup_egress_start(&o, &e, why, sizeof(why)), 0);
	synthetic_of_allowed(dns, hdr + 8);
	/* That query's connection holds a slot until its thread has seen the
	 * close: on a loaded machine it still did when the drips began, so one
	 * of them was refused at the limit (closed at once, not at its
	 * deadline). */
	for (t0 = mono_ms(); sup_egress_active(e) && mono_ms() - t0 < DRIP_GIVE_UP_MS;)
		usleep(10 * 1000);
	assert_int_equal(sup_egress_active(e), 0);
	for (int i = 0; i < SUP_EGRESS_MAX_CONNS; i++) {
		d[i] = (struct drip){ .start = mono_ms() };
		switch (i % 3) {
		case 0:
			d[i].fd = uconnect(tcp);
			d[i].msg = hdr;
			d[i].len = sizeof(hdr);
			break;
		case 1:
			d[i].fd = uconnect(tcp);
			assert_int_equal(write(d[i].fd, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
			d[i].msg = (const uint8_t *)req;
			d[i].len = sizeof(req) - 1;
			break;
		default:
			d[i].fd = uconnect(dns);
			d[i].msg = dnsq;
			d[i].len = sizeof(dnsq);
		}
	}
	t0 = mono_ms();
	while (open_n && mono_ms() - t0 < DRIP_GIVE_UP_MS && !drip_any_whole(d, SUP_EGRESS_MAX_CONNS)) {
		for (int i = 0; i < SUP_EGRESS_MAX_CONNS; i++) {
			if (d[i].closed || !drip_step(&d[i]))
				continue;
			d[i].closed = mono_ms();
			close(d[i].fd);
			open_n--;
		}
		/* Every slot is taken: a connection more is closed at once.  Tried
		 * once the proxy has accepted them all (the probe's DNS listener is
		 * not the drips' one: probed earlier, it took the slot of a drip
		 * still in the other's queue, which was then refused) until the
		 * first connection's deadline nears. */
		while (!probed && sup_egress_active(e) == SUP_EGRESS_MAX_CONNS &&
		       mono_ms() - d[0].start < DRIP_DECIDE_MS - DRIP_PROBE_MS - 200 && open_n == SUP_EGRESS_MAX_CONNS) {
			probed = probe_closed_at_once(dns);
			if (!probed)
				usleep(50 * 1000);
		}
		usleep(100 * 1000);   /* a close is seen soon; bytes go out per DRIP_EVERY_MS */
	}
	print_message("drip: %d of %d still open after %llu ms\n", open_n, SUP_EGRESS_MAX_CONNS,
		      (unsigned long long)(mono_ms() - t0));
	for (int i = 0; i < SUP_EGRESS_MAX_CONNS; i++) {
		if (!d[i].closed) {
			close(d[i].fd);
			continue;
		}
		assert_true(d[i].closed - d[i].start >= DRIP_DECIDE_MS - 10);
		assert_true(d[i].sent < d[i].len);
	}
	assert_int_equal(open_n, 0);
	assert_true(probed);
	assert_true(dns_answered(dns));
	sup_egress_stop(e);
	pthread_mutex_destroy(&r.lock);
}

/* A secret that does not exist stops the start with its name. */
static void test_missing_secret(void **state)
{
	const char *secrets[] = { "NO_SUCH_KEY" };
	char vsock[200], why[256] = "";
	struct sup_egress_opts o = { .sandbox = "t", .state_dir = statedir, .vsock_path = vsock,
				     .secrets = secrets, .nsecrets = 1 };
	struct sup_egress *e = NULL;

	snprintf(vsock, sizeof(vsock), "%s/vsock2.sock", dir);
	assert_true(sup_egress_start(&o, &e, why, sizeof(why)) < 0);
	assert_null(e);
	assert_non_null(strstr(why, "secret NO_SUCH_KEY"));
}

/* KOSA8_APPROVAL_TIMEOUT out of range or not a number stops the start;
 * a good value starts. */
static void test_approval_timeout_env(void **state)
{
	static const char *const bad[] = { "4", "3601", "30s", "abc", "-30", "99999999999999999999" };
	char vsock[200], why[256];
	struct sup_egress_opts o = { .sandbox = "t", .state_dir = statedir, .vsock_path = vsock };
	struct sup_egress *e = NULL;

	snprintf(vsock, sizeof(vsock), "%s/vsock3.sock", dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("KOSA8_APPROVAL_TIMEOUT", bad[i], 1);
		why[0] = 0;
		assert_int_equal(sup_egress_start(&o, &e, why, sizeof(why)), -EINVAL);
		assert_null(e);
		assert_non_null(strstr(why, "KOSA8_APPROVAL_TIMEOUT"));
	}
	setenv("KOSA8_APPROVAL_TIMEOUT", "30", 1);
	assert_int_equal(sup_egress_start(&o, &e, why, sizeof(why)), 0);
	sup_egress_stop(e);
	unsetenv("KOSA8_APPROVAL_TIMEOUT");
}

/* ---- sandbox.json lists ---- */

static void test_cfg_lists(void **state)
{
	struct sandbox_cfg c, back;
	char p[200];

	memset(&c, 0, sizeof(c));
	snprintf(c.name, sizeof(c.name), "sb1");
	c.mem = 64 << 20;
	c.cpus = 1;
	snprintf(c.allow[0], sizeof(c.allow[0]), "a.test");
	snprintf(c.allow[1], sizeof(c.allow[1]), "*.b.test:443");
	c.nallow = 2;
	snprintf(c.secrets[0], sizeof(c.secrets[0]), "API_KEY");
	c.nsecrets = 1;
	assert_int_equal(sandbox_cfg_save(statedir, &c), 0);
	assert_int_equal(sandbox_cfg_load(statedir, &back), 0);
	assert_int_equal(back.nallow, 2);
	assert_string_equal(back.allow[1], "*.b.test:443");
	assert_int_equal(back.nsecrets, 1);
	assert_string_equal(back.secrets[0], "API_KEY");
	/* A damaged list is refused, not half read. */
	snprintf(p, sizeof(p), "%s/sandbox.json", statedir);
	write_text(p, "{\"name\":\"sb1\",\"kernel\":\"\",\"image\":\"\",\"workspace\":\"\",\"mem\":67108864,"
		      "\"cpus\":1,\"created\":0,\"allow\":[\"a.test\",5]}");
	assert_int_equal(sandbox_cfg_load(statedir, &back), -EBADMSG);
	/* A config from before the lists existed loads with none. */
	write_text(p, "{\"name\":\"sb1\",\"kernel\":\"\",\"image\":\"\",\"workspace\":\"\",\"mem\":67108864,"
		      "\"cpus\":1,\"created\":0}");
	assert_int_equal(sandbox_cfg_load(statedir, &back), 0);
	assert_int_equal(back.nallow, 0);
	assert_int_equal(back.nsecrets, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy_layers),
		cmocka_unit_test(test_policy_errors),
		cmocka_unit_test(test_listeners),
		cmocka_unit_test(test_conn_limit),
		cmocka_unit_test(test_drip_deadline),
		cmocka_unit_test(test_missing_secret),
		cmocka_unit_test(test_approval_timeout_env),
		cmocka_unit_test(test_cfg_lists),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
