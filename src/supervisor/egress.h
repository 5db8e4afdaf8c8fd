/* The supervisor's side of a sandbox's network: it listens where the VMM's
 * vsock device sends the guest's connections to the host's DNS and TCP
 * ports (<vsock path>_1053, <vsock path>_1080, docs/vsock.md), and serves
 * each accepted connection in its own thread with the proxy
 * (src/proxy/egress.h), under the sandbox's policy, names table, approvals
 * queue, secrets and CA.
 *
 * The policy is, in this order (later files add rules, a later "default"
 * wins): the user's defaults <config dir>/policy, the sandbox's own
 * <state dir>/policy (`kosa8 create --policy FILE` puts it there), then the
 * sandbox's --allow rules.  Each file is optional; a file with an error
 * stops the sandbox from starting, with the file, line and reason. */
#ifndef KOSA8_SUPERVISOR_EGRESS_H
#define KOSA8_SUPERVISOR_EGRESS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "proxy/policy.h"

/* Connections served at once (DNS streams and TCP together); more are
 * closed at once.  The vsock device itself allows 1024. */
#define SUP_EGRESS_MAX_CONNS 512
/* A proxied TCP connection idle this long is closed (DNS streams never). */
#define SUP_EGRESS_IDLE_MS (10 * 60 * 1000)

struct sup_egress;

struct sup_egress_opts {
	const char *sandbox;
	const char *state_dir;
	const char *vsock_path;            /* the VMM's vsock device socket */
	const char *const *allow;          /* --allow rules */
	size_t nallow;
	const char *const *secrets;        /* --secret names */
	size_t nsecrets;
	/* Where records go (takes ownership of details).  What the guest's
	 * traffic causes is coalesced first (audit_limit.h); approvals records
	 * are not (a person's answers; their number is bounded by the queue,
	 * APPROVALS_MAX_WAITING per approval timeout). */
	void (*audit)(void *arg, const char *type, cJSON *details);
	void *audit_arg;
	/* For tests only: a shorter bound on what the guest sends before each
	 * decision (egress_ctx.decide_ms: it can only shorten
	 * EGRESS_DECIDE_MS).  The supervisor never sets it from the policy or
	 * the sandbox's config; 0 there. */
	int decide_ms;
	/* The coalescing's clock (tests); NULL: mono_ms. */
	uint64_t (*now_ms)(void *arg);
	void *clock_arg;
};

/* Builds the policy described above.  On an error, why gets one line
 * ("policy error in /path/policy line 3: ..."). */
int sup_egress_policy(const char *state_dir, const char *const *allow, size_t nallow,
		      struct policy **out, char *why, size_t whylen);

/* Loads policy, secrets and CA, and starts listening.  Call before the VMM
 * starts, so that the guest's first query finds a listener.  why as above. */
int sup_egress_start(const struct sup_egress_opts *o, struct sup_egress **out, char *why,
		     size_t whylen);
/* Stops listening, wakes approval waiters, waits briefly for connection
 * threads, frees.  NULL is fine. */
void sup_egress_stop(struct sup_egress *e);

/* Ends the audit coalescing's interval when its time is up: call about
 * once a second.  NULL is fine. */
void sup_egress_tick(struct sup_egress *e);

/* Guest connections being served now, of at most SUP_EGRESS_MAX_CONNS.
 * NULL: 0. */
int sup_egress_active(const struct sup_egress *e);

/* The approvals queue, for the control socket. */
struct approvals *sup_egress_approvals(struct sup_egress *e);
/* "NAME=placeholder" entries for every command run in the guest
 * (NULL-terminated; empty without secrets). */
const char *const *sup_egress_guest_env(struct sup_egress *e);
/* The sandbox CA's certificate (PEM) for the guest's trust store. */
const char *sup_egress_ca_pem(struct sup_egress *e);

#endif
