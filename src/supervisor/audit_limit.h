/* A bound on the audit records a guest can cause (issue 23 item 4).
 *
 * Every record the guest's own traffic makes (net.dns, net.connect,
 * secret.use) goes through here.  Within one interval:
 *   - the first record of each kind -- its type and every string, bool and
 *     identifying number (port) of its details, e.g. (net.dns, name,
 *     decision) -- is written at once;
 *   - repeats are counted, and at the interval's end one record of the
 *     same type says how many ("repeats": N, "interval_ms") with the sum of
 *     their amounts (bytes_up, bytes_down, requests, duration_ms);
 *   - at most max_kinds kinds are written per interval: records of further
 *     kinds (a guest cycling random names) are only counted, and the
 *     interval ends with one "audit.overflow" record giving those counts
 *     per type and decision.
 * So an interval writes at most 2 * max_kinds + 1 records, whatever the
 * guest does.  Nothing is dropped without a count; a flush (stop) writes
 * what is pending. */
#ifndef KOSA8_AUDIT_LIMIT_H
#define KOSA8_AUDIT_LIMIT_H

#include <cjson/cJSON.h>
#include <stdint.h>

#define AUDIT_LIMIT_INTERVAL_MS (10 * 1000)
#define AUDIT_LIMIT_MAX_KINDS 64

struct audit_limit_opts {
	uint64_t interval_ms;  /* 0: AUDIT_LIMIT_INTERVAL_MS */
	unsigned max_kinds;    /* 0: AUDIT_LIMIT_MAX_KINDS */
	/* Writes one record (takes details). */
	void (*emit)(void *arg, const char *type, cJSON *details);
	void *emit_arg;
	/* The clock, in ms (tests scale time with it); NULL: mono_ms. */
	uint64_t (*now_ms)(void *arg);
	void *clock_arg;
};

struct audit_limit;

int audit_limit_new(const struct audit_limit_opts *o, struct audit_limit **out);
/* One record the guest caused; takes details.  Safe from any thread. */
void audit_limit_event(struct audit_limit *l, const char *type, cJSON *details);
/* Ends the interval if its time is up (the supervisor calls this about once
 * a second, so that summaries do not wait for the next record). */
void audit_limit_tick(struct audit_limit *l);
/* Writes every pending summary now (at stop). */
void audit_limit_flush(struct audit_limit *l);
/* Flushes, then frees. */
void audit_limit_free(struct audit_limit *l);

#endif
