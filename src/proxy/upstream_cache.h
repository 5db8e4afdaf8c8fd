/* The upstream names one sandbox's egress proxy has resolved, kept a short
 * while so that a new guest connection does not wait for a DNS round trip
 * (on a host without a caching resolver, milliseconds each time).
 *
 * What is kept is the resolver's answer as it came, every address of it:
 * the proxy's default connector (proxy.c) holds each address to the same
 * public-address check on every use, so an answer naming a loopback or
 * private address is refused from the cache just as it was when fresh.
 *
 * Bounded: at most max_names names, the least recently used making room;
 * each kept ttl_ms from when it was resolved.  Thread-safe (the proxy's
 * connections are served by several threads, common/acceptpool.h): the
 * resolving itself happens outside the lock, so one slow name never holds
 * up connections to another. */
#ifndef KOSA8_PROXY_UPSTREAM_CACHE_H
#define KOSA8_PROXY_UPSTREAM_CACHE_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* getaddrinfo() says nothing of a record's TTL, so every answer is kept
 * for this long, short enough that a name moved to another address (a
 * failover, a rotation) is followed within half a minute. */
#define UPSTREAM_CACHE_TTL_MS 30000
#define UPSTREAM_CACHE_NAMES 256
/* Addresses kept per name (the first ones, in the resolver's order). */
#define UPSTREAM_ADDRS_MAX 8

struct upstream_cache;

/* A name's TCP addresses, port 0. */
struct upstream_addrs {
	size_t n;
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} addr[UPSTREAM_ADDRS_MAX];
};

/* Fills out with name's addresses: 0, -ENOENT when the name has none, or
 * -EHOSTUNREACH when it could not be resolved (no answer, a failure). */
typedef int (*upstream_resolve_fn)(void *arg, const char *name, struct upstream_addrs *out);

struct upstream_cache_opts {
	size_t max_names;              /* 0: UPSTREAM_CACHE_NAMES */
	uint64_t ttl_ms;               /* 0: UPSTREAM_CACHE_TTL_MS */
	upstream_resolve_fn resolve;   /* NULL: upstream_resolve_host */
	void *resolve_arg;
	uint64_t (*now_ms)(void *arg); /* NULL: mono_ms */
	void *clock_arg;
};

/* o may be NULL (every default). */
int upstream_cache_new(const struct upstream_cache_opts *o, struct upstream_cache **out);
/* NULL is fine.  No lookup may be under way. */
void upstream_cache_free(struct upstream_cache *c);

/* name's addresses, from the cache while they are fresh, else resolved
 * (and kept if there are any).  c NULL: resolved with
 * upstream_resolve_host every time.  Returns as upstream_resolve_fn. */
int upstream_cache_lookup(struct upstream_cache *c, const char *name, struct upstream_addrs *out);

/* The host's resolver: getaddrinfo(), TCP, AI_ADDRCONFIG.  arg unused. */
int upstream_resolve_host(void *arg, const char *name, struct upstream_addrs *out);

#endif
