/* The egress proxy's cache of upstream name resolutions
 * (src/proxy/upstream_cache.c): answers kept for their time and no longer,
 * failures not kept, the bound with the least recently used name making
 * room, many threads at once, and the host's own resolver behind it.
 *
 * The resolver is the cache's seam: a table here that counts its calls
 * (names "nK" answer 203.0.113.K), and a clock the tests move. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/upstream_cache.h"

static atomic_int resolved;          /* calls of fake_resolve */
static uint64_t clock_ms;

static uint64_t fake_now(void *arg)
{
	return clock_ms;
}

/* "nK" (K < 256): 203.0.113.K; "none": no such name; "fail": no answer. */
static int fake_resolve(void *arg, const char *name, struct upstream_addrs *out)
{
	char *end;
	long k;

	atomic_fetch_add(&resolved, 1);
	memset(out, 0, sizeof(*out));
	if (!strcmp(name, "none"))
		return -ENOENT;
	if (!strcmp(name, "fail"))
		return -EHOSTUNREACH;
	k = strtol(name + 1, &end, 10);
	if (name[0] != 'n' || *end || k < 0 || k > 255)
		return -ENOENT;
	out->n = 1;
	out->addr[0].in.sin_family = AF_INET;
	out->addr[0].in.sin_addr.s_addr = htonl(0xcb007100u | (uint32_t)k);
	return 0;
}

static struct upstream_cache *new_cache(size_t max_names)
{
	struct upstream_cache_opts o = {.max_names = max_names, .resolve = fake_resolve,
					.now_ms = fake_now};
	struct upstream_cache *c;

	atomic_store(&resolved, 0);
	clock_ms = 1000;
	assert_int_equal(upstream_cache_new(&o, &c), 0);
	return c;
}

/* Looks name "nK" up and checks the answer is K's. */
static void lookup_n(struct upstream_cache *c, unsigned k)
{
	struct upstream_addrs a;
	char name[16];

	snprintf(name, sizeof(name), "n%u", k);
	assert_int_equal(upstream_cache_lookup(c, name, &a), 0);
	assert_int_equal(a.n, 1);
	assert_int_equal(ntohl(a.addr[0].in.sin_addr.s_addr), 0xcb007100u | k);
}

static void test_hits_within_ttl(void **state)
{
	struct upstream_cache *c = new_cache(0);

	lookup_n(c, 1);
	lookup_n(c, 2);
	assert_int_equal(atomic_load(&resolved), 2);
	for (int i = 0; i < 10; i++) {
		clock_ms += 1000;
		lookup_n(c, 1);
		lookup_n(c, 2);
	}
	assert_int_equal(atomic_load(&resolved), 2);
	upstream_cache_free(c);
}

/* An answer is used until UPSTREAM_CACHE_TTL_MS after it came, not after
 * its last use: a name looked up all the time is still asked again. */
static void test_expiry(void **state)
{
	struct upstream_cache *c = new_cache(0);

	lookup_n(c, 7);
	clock_ms += UPSTREAM_CACHE_TTL_MS - 1;
	lookup_n(c, 7);
	assert_int_equal(atomic_load(&resolved), 1);
	clock_ms += 1;
	lookup_n(c, 7);
	assert_int_equal(atomic_load(&resolved), 2);
	clock_ms += UPSTREAM_CACHE_TTL_MS - 1;
	lookup_n(c, 7);
	assert_int_equal(atomic_load(&resolved), 2);
	upstream_cache_free(c);
}

/* A failure is asked again at the next connection, and does not push out
 * what was kept. */
static void test_failures_not_kept(void **state)
{
	struct upstream_cache *c = new_cache(2);
	struct upstream_addrs a;

	lookup_n(c, 1);
	lookup_n(c, 2);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(upstream_cache_lookup(c, "none", &a), -ENOENT);
		assert_int_equal(a.n, 0);
		assert_int_equal(upstream_cache_lookup(c, "fail", &a), -EHOSTUNREACH);
	}
	assert_int_equal(atomic_load(&resolved), 8);
	lookup_n(c, 1);
	lookup_n(c, 2);
	assert_int_equal(atomic_load(&resolved), 8);
	upstream_cache_free(c);
}

/* At the bound the least recently used name goes, and only it. */
static void test_bound_evicts_lru(void **state)
{
	struct upstream_cache *c = new_cache(4);

	for (unsigned k = 1; k <= 4; k++)
		lookup_n(c, k);
	lookup_n(c, 1);          /* n2 is now the least recently used */
	assert_int_equal(atomic_load(&resolved), 4);
	lookup_n(c, 5);          /* takes n2's place */
	assert_int_equal(atomic_load(&resolved), 5);
	lookup_n(c, 1);
	lookup_n(c, 3);
	lookup_n(c, 4);
	lookup_n(c, 5);
	assert_int_equal(atomic_load(&resolved), 5);
	lookup_n(c, 2);          /* gone: asked again, and n1 makes room */
	assert_int_equal(atomic_load(&resolved), 6);
	lookup_n(c, 3);
	lookup_n(c, 4);
	lookup_n(c, 5);
	assert_int_equal(atomic_load(&resolved), 6);
	lookup_n(c, 1);
	assert_int_equal(atomic_load(&resolved), 7);
	/* The default bound: UPSTREAM_CACHE_NAMES names kept, one more
	 * pushes the oldest out. */
	upstream_cache_free(c);
	c = new_cache(0);
	for (unsigned k = 0; k < UPSTREAM_CACHE_NAMES; k++)
		lookup_n(c, k);
	for (unsigned k = 0; k < UPSTREAM_CACHE_NAMES; k++)
		lookup_n(c, k);
	assert_int_equal(atomic_load(&resolved), UPSTREAM_CACHE_NAMES);
	upstream_cache_free(c);
}

#define THREADS 8
#define LOOKUPS 20000

struct worker {
	struct upstream_cache *c;
	unsigned names, first;
	int bad;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	struct upstream_addrs a;
	char name[16];

	for (unsigned i = 0; i < LOOKUPS; i++) {
		unsigned k = (w->first + i * 7) % w->names;
		snprintf(name, sizeof(name), "n%u", k);
		if (upstream_cache_lookup(w->c, name, &a) || a.n != 1 ||
		    ntohl(a.addr[0].in.sin_addr.s_addr) != (0xcb007100u | k))
			w->bad++;
	}
	return NULL;
}

static void run_workers(struct upstream_cache *c, unsigned names)
{
	struct worker w[THREADS];
	pthread_t t[THREADS];

	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){.c = c, .names = names, .first = i * 13};
		assert_int_equal(pthread_create(&t[i], NULL, worker, &w[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].bad, 0);
	}
}

/* Many threads on one cache: every answer is the name's own, each name is
 * resolved at most once per thread that missed it together, and after
 * them every name is kept. */
static void test_threads(void **state)
{
	struct upstream_cache *c = new_cache(0);
	int n;

	run_workers(c, 64);
	n = atomic_load(&resolved);
	assert_true(n >= 64 && n <= 64 * THREADS);
	for (unsigned k = 0; k < 64; k++)
		lookup_n(c, k);
	assert_int_equal(atomic_load(&resolved), n);
	upstream_cache_free(c);

	/* More names than places: eviction under the same load. */
	c = new_cache(16);
	run_workers(c, 40);
	assert_true(atomic_load(&resolved) >= 40);
	upstream_cache_free(c);
}

/* The host's resolver behind the cache: localhost is loopback (which the
 * proxy's connector refuses: test_proxy), and a second lookup comes from
 * the cache with the same answer. */
static void test_host_resolver(void **state)
{
	struct upstream_cache *c;
	struct upstream_addrs a, b;

	assert_int_equal(upstream_cache_new(NULL, &c), 0);
	assert_int_equal(upstream_cache_lookup(c, "localhost", &a), 0);
	assert_true(a.n >= 1);
	for (size_t i = 0; i < a.n; i++)
		if (a.addr[i].sa.sa_family == AF_INET)
			assert_int_equal(ntohl(a.addr[i].in.sin_addr.s_addr) >> 24, 127);
		else
			assert_true(IN6_IS_ADDR_LOOPBACK(&a.addr[i].in6.sin6_addr));
	assert_int_equal(upstream_cache_lookup(c, "localhost", &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(upstream_cache_lookup(NULL, "localhost", &b), 0);
	upstream_cache_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hits_within_ttl),
		cmocka_unit_test(test_expiry),
		cmocka_unit_test(test_failures_not_kept),
		cmocka_unit_test(test_bound_evicts_lru),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_host_resolver),
	};
	return cmocka_run_group_tests_name("upstream_cache", tests, NULL, NULL);
}
