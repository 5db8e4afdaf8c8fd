/* The bound on what a guest's traffic writes into the audit log
 * (src/supervisor/audit_limit.c, issue 23 item 4): the coalescing rules on
 * their own, with a clock the test moves; then ten minutes of a guest's
 * DNS flood, time-scaled, through the real path: the supervisor's egress
 * listener, the proxy's DNS server, the coalescing and the real audit log
 * on disk.  The log must stay under a few MiB and still count every query. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "egress_dirs.h"

#include "audit/audit.h"
#include "common/util.h"
#include "supervisor/audit_limit.h"
#include "supervisor/egress.h"

static _Atomic uint64_t fake_now = 1000000;

static uint64_t clock_fn(void *arg)
{
	return atomic_load(&fake_now);
}

static int setup(void **state) { return egress_dirs_make("alim"); }

static int teardown(void **state) { return egress_dirs_remove(); }

/* ---- the rules ---- */

#define KEPT 64
struct kept {
	char type[32][KEPT];
	cJSON *d[KEPT];
	int n;
};

static void keep(void *arg, const char *type, cJSON *details)
{
	struct kept *k = arg;

	assert_true(k->n < KEPT);
	snprintf(k->type[k->n], sizeof(k->type[0]), "%s", type);
	k->d[k->n++] = details;
}

static void kept_free(struct kept *k)
{
	for (int i = 0; i < k->n; i++)
		cJSON_Delete(k->d[i]);
	k->n = 0;
}

static cJSON *ev(const char *name, const char *decision, double bytes)
{
	cJSON *d = cJSON_CreateObject();

	cJSON_AddStringToObject(d, "name", name);
	cJSON_AddStringToObject(d, "decision", decision);
	if (bytes >= 0)
		cJSON_AddNumberToObject(d, "bytes_up", bytes);
	return d;
}

static double num(const cJSON *d, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, k);

	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *str(const cJSON *d, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, k);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static void test_rules(void **state)
{
	struct kept k = {.n = 0};
	struct audit_limit_opts o = {.interval_ms = 10000, .max_kinds = 4, .emit = keep, .emit_arg = &k,
				     .now_ms = clock_fn};
	struct audit_limit *l = NULL;
	char name[32];

	assert_int_equal(audit_limit_new(&o, &l), 0);
	/* The first of a kind at once; its repeats only counted. */
	for (int i = 0; i < 100; i++)
		audit_limit_event(l, "net.dns", ev("a.test", "deny", -1));
	assert_int_equal(k.n, 1);
	assert_string_equal(k.type[0], "net.dns");
	assert_string_equal(str(k.d[0], "name"), "a.test");
	assert_true(num(k.d[0], "repeats") < 0);
	/* Another decision for the same name is another kind; amounts add up. */
	audit_limit_event(l, "net.connect", ev("a.test", "allow", 10));
	audit_limit_event(l, "net.connect", ev("a.test", "allow", 20));
	audit_limit_event(l, "net.connect", ev("a.test", "allow", 30));
	assert_int_equal(k.n, 2);
	assert_int_equal(num(k.d[1], "bytes_up"), 10);
	/* Kinds past the limit: counted only. */
	for (int i = 0; i < 50; i++) {
		snprintf(name, sizeof(name), "r%d.test", i);
		audit_limit_event(l, "net.dns", ev(name, i % 2 ? "deny" : "allow", -1));
	}
	assert_int_equal(k.n, 4);
	/* Nothing more before the interval ends... */
	atomic_fetch_add(&fake_now, 9999);
	audit_limit_tick(l);
	assert_int_equal(k.n, 4);
	/* ...then one summary per kind that repeated, and one overflow. */
	atomic_fetch_add(&fake_now, 1);
	audit_limit_tick(l);
	assert_int_equal(k.n, 7);
	assert_string_equal(k.type[4], "net.dns");
	assert_string_equal(str(k.d[4], "name"), "a.test");
	assert_int_equal(num(k.d[4], "repeats"), 99);
	assert_int_equal(num(k.d[4], "interval_ms"), 10000);
	assert_string_equal(k.type[5], "net.connect");
	assert_int_equal(num(k.d[5], "repeats"), 2);
	assert_int_equal(num(k.d[5], "bytes_up"), 50);
	assert_string_equal(k.type[6], "audit.overflow");
	const cJSON *counts = cJSON_GetObjectItemCaseSensitive(k.d[6], "counts");
	assert_int_equal(num(counts, "net.dns deny"), 24);
	assert_int_equal(num(counts, "net.dns allow"), 24);
	assert_int_equal(num(k.d[6], "records"), 48);
	/* A new interval: the same name is news again, logged at once. */
	audit_limit_event(l, "net.dns", ev("a.test", "deny", -1));
	audit_limit_event(l, "net.dns", ev("a.test", "deny", -1));
	assert_int_equal(k.n, 8);
	/* A stop writes what is pending. */
	audit_limit_free(l);
	assert_int_equal(k.n, 9);
	assert_int_equal(num(k.d[8], "repeats"), 1);
	kept_free(&k);
}

/* ---- ten minutes of a guest's flood ---- */

struct sink {
	struct audit_log *log;
	atomic_uint_fast64_t records;
	atomic_uint_fast64_t queries;  /* how many the records stand for */
};

/* How many queries a record stands for: a first record one, a summary
 * its repeats, an overflow its count. */
static uint64_t queries_in(const char *type, const cJSON *d)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "counts");

	if (!strcmp(type, "net.dns"))
		return num(d, "repeats") > 0 ? (uint64_t)num(d, "repeats") : 1;
	if (!strcmp(type, "audit.overflow") && num(c, "net.dns deny") > 0)
		return (uint64_t)num(c, "net.dns deny");
	return 0;
}

static void to_log(void *arg, const char *type, cJSON *details)
{
	struct sink *s = arg;
	char *d = cJSON_PrintUnformatted(details);
	struct audit_event e = {.sandbox = "flood", .actor = "egress", .type = type, .details = d};

	assert_int_equal(audit_log_append(s->log, &e, NULL), 0);
	atomic_fetch_add(&s->records, 1);
	atomic_fetch_add(&s->queries, queries_in(type, details));
	free(d);
	cJSON_Delete(details);
}

static int uconnect(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_true(strlen(path) < sizeof(a.sun_path));
	memcpy(a.sun_path, path, strlen(path) + 1);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* One framed query for name on the stream fd; its answer read whole. */
static void dns_query(int fd, const char *name, uint16_t id)
{
	uint8_t q[300], a[600];
	size_t n = 2, len, got = 0;
	const char *p = name;

	q[n++] = (uint8_t)(id >> 8);
	q[n++] = (uint8_t)id;
	memcpy(q + n, "\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", 10);
	n += 10;
	while (*p) {
		size_t l = strcspn(p, ".");
		q[n++] = (uint8_t)l;
		memcpy(q + n, p, l);
		n += l;
		p += l + (p[l] == '.');
	}
	memcpy(q + n, "\x00\x00\x01\x00\x01", 5);
	n += 5;
	q[0] = (uint8_t)((n - 2) >> 8);
	q[1] = (uint8_t)(n - 2);
	assert_int_equal(write_all(fd, q, n), 0);
	while (got < 2 || got < 2 + ((size_t)a[0] << 8 | a[1])) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		assert_int_equal(poll(&pf, 1, 10000), 1);
		ssize_t r = read(fd, a + got, sizeof(a) - got);
		assert_true(r > 0);
		got += (size_t)r;
	}
	len = (size_t)a[0] << 8 | a[1];
	assert_int_equal(got, 2 + len);
	assert_int_equal(a[2] << 8 | a[3], id);
}

static off_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? st.st_size : 0;
}

/* The review's attack, time-scaled: DNS queries back to back for ten
 * minutes of the coalescing's clock, half for one denied name and half for
 * random names, on the real listener with the real log behind it.  Before
 * the bound each query was one record (~300 bytes, 0.8 MB/s measured in a
 * guest): 600 queries a simulated 10 s came to about 10 MiB here. */
#define FLOOD_INTERVALS 60
#define FLOOD_PER_INTERVAL 600
static void test_flood_ten_minutes(void **state)
{
	char vsock[200], p[240], logp[200], heads[220], why[256] = "", name[64];
	/* Durable or not, the bytes are the same: no fdatasync per record. */
	struct audit_opts ao = {.path = logp, .no_sync = true};
	struct sink s = {.records = 0, .queries = 0};
	struct sup_egress_opts o = {
		.sandbox = "flood", .vsock_path = vsock, .audit = to_log, .audit_arg = &s,
		.now_ms = clock_fn,
	};
	struct sup_egress *e = NULL;
	char keydir[128];
	uint64_t t0 = mono_ms(), sent = 0;
	off_t total;
	int fd;

	snprintf(keydir, sizeof(keydir), "%s/keys", dir);
	ao.key_dir = keydir;
	o.state_dir = statedir;
	snprintf(logp, sizeof(logp), "%s/audit.log", dir);
	snprintf(heads, sizeof(heads), "%s.heads", logp);
	snprintf(vsock, sizeof(vsock), "%s/vsock.sock", dir);
	assert_int_equal(audit_log_open(&ao, &s.log), 0);
	assert_int_equal(sup_egress_start(&o, &e, why, sizeof(why)), 0);
	snprintf(p, sizeof(p), "%s_1053", vsock);
	fd = uconnect(p);
	for (int iv = 0; iv < FLOOD_INTERVALS; iv++) {
		for (int i = 0; i < FLOOD_PER_INTERVAL; i++, sent++) {
			if (i % 2)
				snprintf(name, sizeof(name), "r%08x.flood.test", (unsigned)random());
			else
				snprintf(name, sizeof(name), "denied.flood.test");
			dns_query(fd, name, (uint16_t)sent);
			atomic_fetch_add(&fake_now, 10000 / FLOOD_PER_INTERVAL);
		}
		sup_egress_tick(e);
	}
	close(fd);
	sup_egress_stop(e);
	audit_log_close(s.log);
	total = file_size(logp) + file_size(heads);
	print_message("%llu queries in %llu ms (simulated 600 s): %llu records, log + heads %lld bytes\n",
		      (unsigned long long)sent, (unsigned long long)(mono_ms() - t0),
		      (unsigned long long)atomic_load(&s.records), (long long)total);
	/* The bound: 2 * max kinds + 1 records an interval, whatever the guest does. */
	assert_true(atomic_load(&s.records) <= (FLOOD_INTERVALS + 1) * (2 * AUDIT_LIMIT_MAX_KINDS + 1));
	assert_true(total < 3 * (off_t)MiB);
	/* Nothing lost: every query is a record, a repeat or an overflow count. */
	assert_int_equal(atomic_load(&s.queries), sent);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rules),
		cmocka_unit_test(test_flood_ten_minutes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
