/* The approvals queue of one sandbox: what policy marks `ask` waits here
 * for a person to answer with `kosa8 approvals`.
 *
 * A request blocks its caller (a DNS or proxy thread) until it is answered
 * or its time runs out (a deny).  "allow once" lets the name through for
 * APPROVAL_ONCE_MS (so the DNS answer and the connection that follows it
 * ask once, not twice); "allow always" adds an allow rule for the name to
 * the sandbox's policy; "deny" refuses it.  A second request for a name that
 * is already waiting joins the first rather than queueing again; past 64
 * waiting requests new ones are denied at once (who = "queue full").  Every
 * answer names who gave it (a user name, from the control socket's peer
 * credentials, or "timeout"). */
#ifndef KOSA8_SUPERVISOR_APPROVALS_H
#define KOSA8_SUPERVISOR_APPROVALS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "proxy/policy.h"

#define APPROVAL_TIMEOUT_MS (120 * 1000)
#define APPROVAL_ONCE_MS (60 * 1000)

enum approval_answer { APPROVAL_ALLOW_ONCE, APPROVAL_ALLOW_ALWAYS, APPROVAL_DENY };

struct approvals;

/* policy: where "allow always" adds its rule. */
int approvals_new(struct policy *policy, int timeout_ms, struct approvals **out);
/* Wakes every waiter with a deny (who = "shutdown") and frees. */
void approvals_free(struct approvals *a);

/* Blocks until answered.  Returns POLICY_ALLOW or POLICY_DENY; who (if not
 * NULL) gets the answerer. */
enum policy_action approvals_ask(struct approvals *a, const char *kind, const char *name,
				 uint16_t port, char *who, size_t wholen);
/* The waiting requests, oldest first:
 * [{"id":N,"kind":..,"name":..,"port":..,"waiting_ms":..,"waiters":..}]
 * (waiters: how many DNS/proxy threads wait on it, joined duplicates too). */
cJSON *approvals_list(struct approvals *a);
/* -ENOENT if id is not waiting (answered already, timed out). */
int approvals_answer(struct approvals *a, uint64_t id, enum approval_answer ans, const char *who);

/* Where requests and answers are audited: "approval.request" {id, kind,
 * name, port, waiting_ms} when one starts waiting, "approval.answer" (the
 * same and answer, who) when it ends, timeouts and shutdown included.  The
 * hook takes ownership of details; it is called with the queue's lock held
 * (so a request's records are in order) and must not call back into the
 * queue.  Free the queue before what the hook writes to.  NULL (the
 * default): nothing is audited. */
void approvals_set_audit(struct approvals *a, void (*audit)(void *arg, const char *type, cJSON *details),
			 void *arg);

/* Where "allow always" also writes its rule, so that it outlives the
 * running sandbox: the sandbox's policy file (<state dir>/policy), appended
 * to (created 0600 if missing).  NULL (the default): the live policy only.
 * A failed write is logged; the rule still holds in the live policy. */
int approvals_set_policy_file(struct approvals *a, const char *path);

/* How long an "allow once" lets the name through (APPROVAL_ONCE_MS unless
 * set; tests set it short). */
void approvals_set_once_ms(struct approvals *a, int once_ms);

/* "allow" (or "once"), "always", "deny" -> the answer; -EINVAL otherwise. */
int approval_answer_parse(const char *s, enum approval_answer *out);
const char *approval_answer_name(enum approval_answer a);

#endif
