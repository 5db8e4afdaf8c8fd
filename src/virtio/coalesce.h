/* Interrupt coalescing for a virtio device that completes requests faster
 * than its driver submits them.
 *
 * A device that finishes each request before the driver has queued the next
 * raises one interrupt per request, even when the driver keeps many in
 * flight (fio at queue depth 16, a compiler reading many files).  Each
 * interrupt costs the guest an exit to read the interrupt status and
 * another to acknowledge it, plus the injection itself; under nested
 * virtualization that is hundreds of microseconds, more than the request.
 *
 * So when the queue runs dry with completions not yet signalled, the device
 * may wait a short window before interrupting, and serve whatever the driver
 * queues meanwhile under the same interrupt.  How long is a rent-or-buy
 * choice: waiting up to what an interrupt costs (measured here, from raising
 * the line to the driver's acknowledgement) is never worse than twice the
 * better of the two choices, whatever the driver does next.  Windows that
 * caught requests grow (up to 4x that cost, 2 ms at most); windows that
 * caught none shrink, and at zero the policy is off: a driver that waits for
 * each completion (queue depth 1) pays only an occasional probe, whose
 * spacing doubles while probes keep failing.
 *
 * Pure bookkeeping, no clock or lock of its own: the device feeds it times
 * and outcomes under its lock, and tests drive it directly. */
#ifndef KOSA8_VIRTIO_COALESCE_H
#define KOSA8_VIRTIO_COALESCE_H

#include <stdbool.h>
#include <stdint.h>

#define COALESCE_MAX_MULT 4u
#define COALESCE_MAX_WINDOW_NS 2000000ull /* 2 ms: a bound on the added latency */
#define COALESCE_COST_CAP_NS 2000000ull   /* a longer sample is a guest busy elsewhere */
#define COALESCE_PROBE_MIN 16u            /* batches between probes while off... */
#define COALESCE_PROBE_MAX 256u           /* ...doubling up to this while probes fail */

struct coalesce {
	uint64_t cost_ns;   /* moving average: line raised to the driver's acknowledgement */
	unsigned mult;      /* window = mult * cost_ns; 0: off */
	unsigned probe_gap; /* batches between probes while off */
	unsigned until_probe;
	/* Counted for `kosa8 -v vm`: windows that caught requests, that caught none. */
	uint64_t caught, expired;
};

void coalesce_init(struct coalesce *c);
/* One interrupt's cost: from raising the line to the driver's acknowledgement. */
void coalesce_cost_sample(struct coalesce *c, uint64_t ns);
/* The queue ran dry with completions unsignalled: how long to wait before
 * the interrupt, in ns; 0 means interrupt now. */
uint64_t coalesce_window(struct coalesce *c);
/* How a window ended: the number of requests served during it. */
void coalesce_outcome(struct coalesce *c, unsigned served);

#endif
