/* The approvals queue.  One mutex guards everything; one condition variable
 * (on CLOCK_MONOTONIC, so a clock change neither ends nor stretches a wait)
 * wakes every waiter when any request is answered, and each waiter checks
 * its own.  Requests are few and people are slow: simplicity wins here.
 *
 * A request lives while anyone waits on it: answering takes it off the
 * waiting list (so it cannot be answered twice) and the last waiter to
 * wake frees it. */
#include "supervisor/approvals.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define WHO_MAX 64
/* A guest asking for many names at once must not bury the person under
 * requests: past this many waiting, new ones are denied at once. */
#define APPROVALS_MAX_WAITING 64

struct request {
	uint64_t id;
	char kind[16];
	char name[POLICY_NAME_MAX + 1];
	uint16_t port;
	uint64_t since_ms, deadline_ms;
	unsigned waiters;
	bool done;
	enum policy_action result;
	char who[WHO_MAX];
	struct request *next;   /* the waiting list, while !done */
};

/* "allow once": the name (and port; 0 = any) may pass until `until_ms`. */
struct grant {
	char name[POLICY_NAME_MAX + 1];
	uint16_t port;
	uint64_t until_ms;
	char who[WHO_MAX];
	struct grant *next;
};

struct approvals {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct policy *policy;
	char *policy_file;      /* "allow always" appends here too; may be NULL */
	int timeout_ms, once_ms;
	uint64_t last_id;
	struct request *waiting;
	struct grant *grants;
	unsigned active;        /* threads inside approvals_ask */
	bool closing;
	void (*audit)(void *arg, const char *type, cJSON *details);
	void *audit_arg;
};

const char *approval_answer_name(enum approval_answer a)
{
	switch (a) {
	case APPROVAL_ALLOW_ONCE: return "allow once";
	case APPROVAL_ALLOW_ALWAYS: return "allow always";
	default: return "deny";
	}
}

int approval_answer_parse(const char *s, enum approval_answer *out)
{
	if (!strcmp(s, "allow") || !strcmp(s, "once"))
		*out = APPROVAL_ALLOW_ONCE;
	else if (!strcmp(s, "always"))
		*out = APPROVAL_ALLOW_ALWAYS;
	else if (!strcmp(s, "deny"))
		*out = APPROVAL_DENY;
	else
		return -EINVAL;
	return 0;
}

int approvals_new(struct policy *policy, int timeout_ms, struct approvals **out)
{
	struct approvals *a = calloc(1, sizeof(*a));
	pthread_condattr_t ca;

	if (!a)
		return -ENOMEM;
	pthread_mutex_init(&a->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&a->cond, &ca);
	pthread_condattr_destroy(&ca);
	a->policy = policy;
	a->timeout_ms = timeout_ms > 0 ? timeout_ms : APPROVAL_TIMEOUT_MS;
	a->once_ms = APPROVAL_ONCE_MS;
	*out = a;
	return 0;
}

void approvals_set_audit(struct approvals *a, void (*audit)(void *arg, const char *type, cJSON *details),
			 void *arg)
{
	pthread_mutex_lock(&a->lock);
	a->audit = audit;
	a->audit_arg = arg;
	pthread_mutex_unlock(&a->lock);
}

int approvals_set_policy_file(struct approvals *a, const char *path)
{
	char *copy = NULL;

	if (path && !(copy = strdup(path)))
		return -ENOMEM;
	pthread_mutex_lock(&a->lock);
	free(a->policy_file);
	a->policy_file = copy;
	pthread_mutex_unlock(&a->lock);
	return 0;
}

void approvals_set_once_ms(struct approvals *a, int once_ms)
{
	pthread_mutex_lock(&a->lock);
	a->once_ms = once_ms > 0 ? once_ms : APPROVAL_ONCE_MS;
	pthread_mutex_unlock(&a->lock);
}

static cJSON *describe(const struct request *r, uint64_t now)
{
	cJSON *d = cJSON_CreateObject();

	cJSON_AddNumberToObject(d, "id", (double)r->id);
	cJSON_AddStringToObject(d, "kind", r->kind);
	cJSON_AddStringToObject(d, "name", r->name);
	cJSON_AddNumberToObject(d, "port", r->port);
	cJSON_AddNumberToObject(d, "waiting_ms", (double)(now - r->since_ms));
	return d;
}

/* Writes an audit record (lock held: records of one request come in the
 * order things happened). */
static void emit(struct approvals *a, const char *type, cJSON *d)
{
	if (d && a->audit)
		a->audit(a->audit_arg, type, d);
	else
		cJSON_Delete(d);
}

/* Ends a waiting request and audits its answer (lock held). */
static void finish(struct approvals *a, struct request *r, enum policy_action result,
		   const char *answer, const char *who)
{
	struct request **pp = &a->waiting;
	cJSON *d;

	while (*pp && *pp != r)
		pp = &(*pp)->next;
	if (*pp)
		*pp = r->next;
	r->next = NULL;
	r->done = true;
	r->result = result;
	snprintf(r->who, sizeof(r->who), "%s", who);
	pthread_cond_broadcast(&a->cond);
	if (!a->audit || !(d = describe(r, mono_ms())))
		return;
	cJSON_AddStringToObject(d, "answer", answer);
	cJSON_AddStringToObject(d, "who", who);
	emit(a, "approval.answer", d);
}

/* A live "allow once" for name:port (lock held); expired ones are dropped. */
static const struct grant *find_grant(struct approvals *a, const char *name, uint16_t port)
{
	uint64_t now = mono_ms();

	for (struct grant **pp = &a->grants; *pp;) {
		struct grant *g = *pp;
		if (g->until_ms <= now) {
			*pp = g->next;
			free(g);
			continue;
		}
		if (!strcmp(g->name, name) && (!g->port || !port || g->port == port))
			return g;
		pp = &g->next;
	}
	return NULL;
}

static int add_grant(struct approvals *a, const struct request *r, const char *who)
{
	struct grant *g = calloc(1, sizeof(*g));

	if (!g)
		return -ENOMEM;
	memcpy(g->name, r->name, sizeof(g->name));
	g->port = r->port;
	g->until_ms = mono_ms() + (uint64_t)a->once_ms;
	snprintf(g->who, sizeof(g->who), "%s", who);
	g->next = a->grants;
	a->grants = g;
	return 0;
}

/* The waiting request for name:port, or a new one (lock held). */
static struct request *join_or_queue(struct approvals *a, const char *kind, const char *name,
				     uint16_t port)
{
	struct request *r;
	unsigned n = 0;

	for (r = a->waiting; r; r = r->next, n++)
		if (r->port == port && !strcmp(r->name, name))
			return r;
	if (n >= APPROVALS_MAX_WAITING || !(r = calloc(1, sizeof(*r))))
		return NULL;
	r->id = ++a->last_id;
	snprintf(r->kind, sizeof(r->kind), "%s", kind ? kind : "connect");
	memcpy(r->name, name, strlen(name) + 1);
	r->port = port;
	r->since_ms = mono_ms();
	r->deadline_ms = r->since_ms + (uint64_t)a->timeout_ms;
	r->next = a->waiting;
	a->waiting = r;
	if (a->audit)
		emit(a, "approval.request", describe(r, r->since_ms));
	return r;
}

static void deadline_ts(uint64_t ms, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ms / 1000);
	ts->tv_nsec = (long)(ms % 1000) * 1000000;
}

/* Waits (lock held) until r is answered or its deadline passes. */
static void wait_answer(struct approvals *a, struct request *r)
{
	struct timespec ts;

	deadline_ts(r->deadline_ms, &ts);
	while (!r->done) {
		if (pthread_cond_timedwait(&a->cond, &a->lock, &ts) == ETIMEDOUT && !r->done)
			finish(a, r, POLICY_DENY, "deny", "timeout");
	}
}

enum policy_action approvals_ask(struct approvals *a, const char *kind, const char *name,
				 uint16_t port, char *who, size_t wholen)
{
	char norm[POLICY_NAME_MAX + 1];
	const struct grant *g;
	struct request *r;
	enum policy_action res = POLICY_DENY;
	const char *by = "policy";

	if (policy_normalise_name(name, norm, sizeof(norm)))
		goto out_nolock; /* not a host name: nothing a person could approve */
	pthread_mutex_lock(&a->lock);
	if (a->closing) {
		by = "shutdown";
	} else if ((g = find_grant(a, norm, port))) {
		res = POLICY_ALLOW;
		if (who && wholen)
			snprintf(who, wholen, "%s", g->who);
		by = NULL;
	} else if (!(r = join_or_queue(a, kind, norm, port))) {
		by = "queue full";
	} else {
		r->waiters++;
		a->active++;
		wait_answer(a, r);
		res = r->result;
		if (who && wholen)
			snprintf(who, wholen, "%s", r->who);
		by = NULL;
		if (--r->waiters == 0)
			free(r);
		if (--a->active == 0 && a->closing)
			pthread_cond_broadcast(&a->cond);
	}
	pthread_mutex_unlock(&a->lock);
out_nolock:
	if (by && who && wholen)
		snprintf(who, wholen, "%s", by);
	return res;
}

cJSON *approvals_list(struct approvals *a)
{
	cJSON *arr = cJSON_CreateArray();
	uint64_t now = mono_ms();

	if (!arr)
		return NULL;
	pthread_mutex_lock(&a->lock);
	/* Oldest first: the list is kept newest first. */
	for (struct request *r = a->waiting; r; r = r->next) {
		cJSON *d = describe(r, now);
		cJSON_AddNumberToObject(d, "waiters", r->waiters); /* joined connections */
		cJSON_InsertItemInArray(arr, 0, d);
	}
	pthread_mutex_unlock(&a->lock);
	return arr;
}

/* Appends the rule to the sandbox's policy file, with a comment saying who
 * approved it and when (the file is the user's: it must stay readable). */
static void persist_rule(const struct approvals *a, const char *rule, uint64_t id, const char *who)
{
	char line[POLICY_NAME_MAX + WHO_MAX + 128], when[32];
	time_t now = time(NULL);
	struct tm tm;
	int fd, err;

	if (!a->policy_file)
		return;
	gmtime_r(&now, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(line, sizeof(line), "%s\t# approval %llu by %s, %s\n", rule, (unsigned long long)id,
		 who, when);
	fd = open(a->policy_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	err = fd < 0 ? -errno : write_all(fd, line, strlen(line));
	if (fd >= 0)
		close(fd);
	if (err)
		log_warn("approvals: cannot add '%s' to %s: %s (it holds until the sandbox stops)", rule,
			 a->policy_file, strerror(-err));
}

/* "allow always": an allow rule for exactly what was asked, named after
 * who gave it, added to the live policy (and the sandbox's file). */
static int add_rule(struct approvals *a, const struct request *r, const char *who)
{
	char rule[POLICY_NAME_MAX + 16], origin[WHO_MAX + 48];
	struct policy_error pe;
	int err;

	if (r->port)
		snprintf(rule, sizeof(rule), "allow %s:%u", r->name, r->port);
	else
		snprintf(rule, sizeof(rule), "allow %s", r->name);
	snprintf(origin, sizeof(origin), "approval %llu by %s", (unsigned long long)r->id, who);
	if ((err = policy_add_text(a->policy, rule, strlen(rule), origin, &pe)))
		return err;
	persist_rule(a, rule, r->id, who);
	return 0;
}

int approvals_answer(struct approvals *a, uint64_t id, enum approval_answer ans, const char *who_in)
{
	char who[WHO_MAX];
	struct request *r;
	int err = 0;

	/* who lands in a comment of the policy file: one line, no control
	 * bytes, or a crafted name could add a rule of its own. */
	snprintf(who, sizeof(who), "%s", who_in && *who_in ? who_in : "unknown");
	for (char *c = who; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	pthread_mutex_lock(&a->lock);
	for (r = a->waiting; r && r->id != id; r = r->next)
		;
	if (!r) {
		err = -ENOENT;
	} else if (ans == APPROVAL_DENY) {
		finish(a, r, POLICY_DENY, approval_answer_name(ans), who);
	} else if ((ans == APPROVAL_ALLOW_ALWAYS && a->policy && (err = add_rule(a, r, who))) ||
		   (err = add_grant(a, r, who))) {
		/* nothing answered: the request keeps waiting */
	} else {
		finish(a, r, POLICY_ALLOW, approval_answer_name(ans), who);
	}
	pthread_mutex_unlock(&a->lock);
	return err;
}

void approvals_free(struct approvals *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->closing = true;
	while (a->waiting)
		finish(a, a->waiting, POLICY_DENY, "deny", "shutdown");
	while (a->active)
		pthread_cond_wait(&a->cond, &a->lock);
	pthread_mutex_unlock(&a->lock);
	while (a->grants) {
		struct grant *g = a->grants;
		a->grants = g->next;
		free(g);
	}
	free(a->policy_file);
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->lock);
	free(a);
}
