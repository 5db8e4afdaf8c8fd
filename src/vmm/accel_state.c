/* The backend-neutral container of accelerator state records (accel.h). */
#include "vmm/accel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void accel_state_free(struct accel_state *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->recs[i].data);
	memset(s, 0, sizeof(*s));
}

const struct accel_rec *accel_state_find(const struct accel_state *s, uint32_t tag)
{
	for (int i = 0; i < s->n; i++)
		if (s->recs[i].tag == tag)
			return &s->recs[i];
	return NULL;
}

int accel_state_add(struct accel_state *s, uint32_t tag, const void *data, size_t len)
{
	uint8_t *copy;

	if (s->n >= ACCEL_MAX_RECS)
		return -ENOSPC;
	if (len > UINT32_MAX)
		return -EINVAL;
	copy = malloc(len ? len : 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, data, len);
	s->recs[s->n++] = (struct accel_rec){.tag = tag, .len = (uint32_t)len, .data = copy};
	return 0;
}

/* Bounds what a pair list can grow to: a record is one checkpoint section. */
#define PAIRS_MAX (4u << 20)

size_t accel_pair_size(uint64_t id)
{
	unsigned int lg = (unsigned int)(id >> ACCEL_PAIR_SIZE_SHIFT) & 0xfu;
	size_t n = (size_t)1 << lg;

	return n <= ACCEL_PAIR_MAX ? n : 0;
}

void accel_pairs_add(struct accel_pairs *p, uint64_t id, const void *val)
{
	size_t n = accel_pair_size(id), need;

	if (p->err)
		return;
	if (!n) {
		p->err = -EINVAL;
		return;
	}
	need = p->len + sizeof(id) + n;
	if (need > PAIRS_MAX) {
		p->err = -E2BIG;
		return;
	}
	if (need > p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 4096;
		uint8_t *nb;
		while (cap < need)
			cap *= 2;
		if (!(nb = realloc(p->buf, cap))) {
			p->err = -ENOMEM;
			return;
		}
		p->buf = nb;
		p->cap = cap;
	}
	memcpy(p->buf + p->len, &id, sizeof(id));
	memcpy(p->buf + p->len + sizeof(id), val, n);
	p->len = need;
}

int accel_pairs_next(const uint8_t *data, size_t len, size_t *off, uint64_t *id,
		     const uint8_t **val)
{
	size_t n;

	if (*off == len)
		return 0;
	if (*off > len || len - *off < sizeof(*id))
		return -EINVAL;
	memcpy(id, data + *off, sizeof(*id));
	n = accel_pair_size(*id);
	if (!n || len - *off - sizeof(*id) < n)
		return -EINVAL;
	*val = data + *off + sizeof(*id);
	*off += sizeof(*id) + n;
	return 1;
}
