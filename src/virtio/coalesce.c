#include "virtio/coalesce.h"

#include <string.h>

void coalesce_init(struct coalesce *c)
{
	memset(c, 0, sizeof(*c));
	c->mult = 1;
	c->probe_gap = COALESCE_PROBE_MIN;
}

void coalesce_cost_sample(struct coalesce *c, uint64_t ns)
{
	if (ns > COALESCE_COST_CAP_NS)
		ns = COALESCE_COST_CAP_NS;
	/* An average over about the last eight: one slow acknowledgement (the
	 * guest had interrupts off) should not set the window. */
	if (!c->cost_ns)
		c->cost_ns = ns;
	else
		c->cost_ns = c->cost_ns - c->cost_ns / 8 + ns / 8;
}

uint64_t coalesce_window(struct coalesce *c)
{
	unsigned mult = c->mult;
	uint64_t w;

	if (!c->cost_ns)
		return 0; /* no interrupt acknowledged yet: nothing to weigh */
	if (!mult) {
		if (c->until_probe) {
			c->until_probe--;
			return 0;
		}
		mult = 1; /* a probe: one window of the interrupt's cost */
	}
	w = mult * c->cost_ns;
	return w < COALESCE_MAX_WINDOW_NS ? w : COALESCE_MAX_WINDOW_NS;
}

void coalesce_outcome(struct coalesce *c, unsigned served)
{
	if (served) {
		c->caught++;
		c->probe_gap = COALESCE_PROBE_MIN;
		/* Two or more: the driver queues faster than an interrupt costs,
		 * wait longer.  One: the window paid for itself, keep it. */
		if (!c->mult)
			c->mult = 1;
		else if (served > 1 && c->mult < COALESCE_MAX_MULT)
			c->mult *= 2;
		return;
	}
	c->expired++;
	if (c->mult) {
		c->mult /= 2;
		if (!c->mult)
			c->until_probe = c->probe_gap;
		return;
	}
	/* A failed probe: the driver waits for each completion. */
	c->probe_gap = c->probe_gap * 2 < COALESCE_PROBE_MAX ? c->probe_gap * 2 : COALESCE_PROBE_MAX;
	c->until_probe = c->probe_gap;
}
