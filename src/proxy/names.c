/* The synthetic address table: a name gets the next free address of
 * 198.18.0.0/15 the first time DNS answers for it and keeps it for the
 * sandbox's life, so a guest's cached answers stay valid.  Addresses are not
 * reused: the range holds 131070 names, far more than one sandbox asks for,
 * and a reused address could send an old connection's bytes to a new name.
 *
 * Both directions are O(1): an array indexed by address offset holds the
 * names, and an open-addressing hash table of offsets finds a name's
 * address. */
#include "proxy/names.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct names {
	pthread_mutex_t lock;
	char **byaddr;       /* [offset] -> name; offset 0 is the network address */
	size_t used, cap;    /* offsets 1..used are given out */
	uint32_t *hash;      /* offsets, 0 = empty slot */
	size_t hcap;         /* power of two, at least twice `used` */
};

/* FNV-1a: names are short and not chosen to collide against a per-process
 * table of this size in any way that matters (the worst case is a slower
 * lookup for the guest that did it). */
static uint64_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

int names_new(struct names **out)
{
	struct names *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	*out = t;
	return 0;
}

void names_free(struct names *t)
{
	if (!t)
		return;
	for (size_t i = 1; i <= t->used; i++)
		free(t->byaddr[i]);
	free(t->byaddr);
	free(t->hash);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* The slot holding name, or the empty slot where it would go. */
static size_t find_slot(const struct names *t, const char *name)
{
	size_t mask = t->hcap - 1, i = (size_t)hash_name(name) & mask;

	while (t->hash[i] && strcmp(t->byaddr[t->hash[i]], name))
		i = (i + 1) & mask;
	return i;
}

static int grow_hash(struct names *t)
{
	size_t ncap = t->hcap ? t->hcap * 2 : 64, oldcap = t->hcap;
	uint32_t *old = t->hash;

	if (!(t->hash = calloc(ncap, sizeof(*t->hash)))) {
		t->hash = old;
		return -ENOMEM;
	}
	t->hcap = ncap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i])
			t->hash[find_slot(t, t->byaddr[old[i]])] = old[i];
	free(old);
	return 0;
}

static int grow_array(struct names *t)
{
	size_t ncap = t->cap ? t->cap * 2 : 64;
	char **nb;

	if (ncap > (size_t)NAMES_COUNT + 1)
		ncap = (size_t)NAMES_COUNT + 1;
	if (!(nb = realloc(t->byaddr, ncap * sizeof(*nb))))
		return -ENOMEM;
	t->byaddr = nb;
	t->cap = ncap;
	return 0;
}

static int insert(struct names *t, const char *name, uint32_t *off)
{
	char *copy;
	int err;

	if (t->used >= NAMES_COUNT)
		return -ENOSPC;
	if ((t->used + 1) * 2 > t->hcap && (err = grow_hash(t)))
		return err;
	if (t->used + 2 > t->cap && (err = grow_array(t)))
		return err;
	if (!(copy = strdup(name)))
		return -ENOMEM;
	*off = (uint32_t)++t->used;
	t->byaddr[*off] = copy;
	t->hash[find_slot(t, name)] = *off;
	return 0;
}

int names_assign(struct names *t, const char *name, uint32_t *addr)
{
	size_t len = name ? strlen(name) : 0;
	uint32_t off = 0;
	int err = 0;

	if (len == 0 || len > POLICY_NAME_MAX)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	if (t->hcap)
		off = t->hash[find_slot(t, name)];
	if (!off)
		err = insert(t, name, &off);
	pthread_mutex_unlock(&t->lock);
	if (!err)
		*addr = NAMES_BASE + off;
	return err;
}

int names_lookup(struct names *t, uint32_t addr, char *name, size_t namelen)
{
	uint32_t off = addr - NAMES_BASE;
	int err = -ENOENT;

	if (addr < NAMES_BASE || off == 0 || off > NAMES_COUNT)
		return -ENOENT;
	pthread_mutex_lock(&t->lock);
	if (off <= t->used) {
		size_t len = strlen(t->byaddr[off]);
		err = len < namelen ? 0 : -ENAMETOOLONG;
		if (!err)
			memcpy(name, t->byaddr[off], len + 1);
	}
	pthread_mutex_unlock(&t->lock);
	return err;
}
