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
