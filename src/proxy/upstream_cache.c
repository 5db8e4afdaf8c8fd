/* Upstream name resolutions of one sandbox, kept a short while
 * (upstream_cache.h).
 *
 * DNS rebinding.  The cache decides nothing about where a connection may
 * go: the default connector checks each address it is about to use, fresh
 * or cached, so a name answering with a private or loopback address is
 * refused either way.  What the cache changes: an answer is used for up to
 * UPSTREAM_CACHE_TTL_MS after it came, so a name whose owner moves it
 * keeps reaching the old (public) address that long, and one that answered
 * with only private addresses stays refused that long after it is fixed;
 * a name answering differently on each query (a rebinding attempt) is
 * asked once per TTL instead of once per connection, which gives such a
 * server fewer answers to play with, not more.  Each sandbox has its own cache, so what one
 * sandbox looked up never shows in another's connection times.
 *
 * Only answers with addresses are kept.  A failure may pass (a resolver
 * timing out, the host's network coming up, a name being created) and
 * keeping it would refuse the name for the whole TTL after the cause went;
 * a name that does not resolve therefore costs a query per connection, as
 * it did before the cache, and only names the policy allows get that far.
 *
 * Two connections that miss the same name at once both resolve it (the
 * resolving is outside the lock); the later answer is kept. */
#include "proxy/upstream_cache.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "proxy/policy.h"

struct entry {
	char name[POLICY_NAME_MAX + 1];   /* "": a free slot */
	uint32_t hash;
	uint64_t expires;                 /* the clock's ms */
	uint64_t used;                    /* c->tick when last looked up */
	struct upstream_addrs addrs;
};

struct upstream_cache {
	pthread_mutex_t lock;
	struct upstream_cache_opts o;
	uint64_t tick;
	size_t n;
	struct entry e[];
};

/* FNV-1a: compared before the name, so a miss rarely touches a string. */
static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;

	while (*s)
		h = (h ^ (uint8_t)*s++) * 16777619u;
	return h;
}

static uint64_t now(const struct upstream_cache *c)
{
	return c->o.now_ms ? c->o.now_ms(c->o.clock_arg) : mono_ms();
}

int upstream_cache_new(const struct upstream_cache_opts *o, struct upstream_cache **out)
{
	struct upstream_cache_opts d = o ? *o : (struct upstream_cache_opts){0};
	struct upstream_cache *c;

	if (!d.max_names)
		d.max_names = UPSTREAM_CACHE_NAMES;
	if (!d.ttl_ms)
		d.ttl_ms = UPSTREAM_CACHE_TTL_MS;
	if (!d.resolve)
		d.resolve = upstream_resolve_host;
	if (!(c = calloc(1, sizeof(*c) + d.max_names * sizeof(c->e[0]))))
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->o = d;
	c->n = d.max_names;
	*out = c;
	return 0;
}

void upstream_cache_free(struct upstream_cache *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static struct entry *find(struct upstream_cache *c, const char *name, uint32_t h)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->e[i].hash == h && c->e[i].name[0] && !strcmp(c->e[i].name, name))
			return &c->e[i];
	return NULL;
}

/* A free slot, else the least recently used one. */
static struct entry *slot(struct upstream_cache *c)
{
	struct entry *lru = &c->e[0];

	for (size_t i = 0; i < c->n; i++) {
		if (!c->e[i].name[0])
			return &c->e[i];
		if (c->e[i].used < lru->used)
			lru = &c->e[i];
	}
	return lru;
}

static bool cached(struct upstream_cache *c, const char *name, uint32_t h,
		   struct upstream_addrs *out)
{
	struct entry *e;
	bool hit = false;

	pthread_mutex_lock(&c->lock);
	if ((e = find(c, name, h)) && now(c) < e->expires) {
		e->used = ++c->tick;
		*out = e->addrs;
		hit = true;
	}
	pthread_mutex_unlock(&c->lock);
	return hit;
}

static void keep(struct upstream_cache *c, const char *name, uint32_t h,
		 const struct upstream_addrs *a)
{
	struct entry *e;

	pthread_mutex_lock(&c->lock);
	if (!(e = find(c, name, h))) {
		e = slot(c);
		snprintf(e->name, sizeof(e->name), "%s", name);
		e->hash = h;
	}
	e->expires = now(c) + c->o.ttl_ms;
	e->used = ++c->tick;
	e->addrs = *a;
	pthread_mutex_unlock(&c->lock);
}

int upstream_cache_lookup(struct upstream_cache *c, const char *name, struct upstream_addrs *out)
{
	uint32_t h;
	int r;

	memset(out, 0, sizeof(*out));
	if (!c)
		return upstream_resolve_host(NULL, name, out);
	/* A name too long to keep is not one the policy allows; it is
	 * resolved, not kept, rather than cut to a different name. */
	if (strlen(name) > POLICY_NAME_MAX)
		return c->o.resolve(c->o.resolve_arg, name, out);
	h = name_hash(name);
	if (cached(c, name, h, out))
		return 0;
	if ((r = c->o.resolve(c->o.resolve_arg, name, out)))
		return r;
	if (!out->n)
		return -ENOENT;
	keep(c, name, h, out);
	return 0;
}

int upstream_resolve_host(void *arg, const char *name, struct upstream_addrs *out)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG}, *res, *ai;
	int r;

	(void)arg;
	memset(out, 0, sizeof(*out));
	if ((r = getaddrinfo(name, NULL, &hints, &res)))
		return r == EAI_NONAME || r == EAI_NODATA ? -ENOENT : -EHOSTUNREACH;
	for (ai = res; ai && out->n < UPSTREAM_ADDRS_MAX; ai = ai->ai_next) {
		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
		    ai->ai_addrlen > sizeof(out->addr[0]))
			continue;
		memcpy(&out->addr[out->n++], ai->ai_addr, ai->ai_addrlen);
	}
	freeaddrinfo(res);
	return out->n ? 0 : -ENOENT;
}
