/* The supervisor's egress: listeners for the guest's DNS streams and TCP
 * connections, each served by threads that accept for themselves
 * (common/acceptpool.h; bounded), the proxy's context built from the
 * sandbox's policy, secrets and CA.  See egress.h. */
#include "supervisor/egress.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/acceptpool.h"
#include "common/log.h"
#include "common/util.h"
#include "proxy/ca.h"
#include "proxy/egress.h"
#include "proxy/names.h"
#include "proxy/secrets.h"
#include "proxy/upstream_cache.h"
#include "supervisor/approvals.h"
#include "supervisor/audit_limit.h"

#define STOP_WAIT_MS 3000
#define REFUSED_LOG_MS 10000   /* at most one "refused" line this often */
#define IDLE_ACCEPTORS 4       /* threads kept waiting for a connection */

struct listener {
	struct sup_egress *e;
	const struct egress_ctx *ctx;
	int (*serve)(const struct egress_ctx *ctx, int fd);
	int fd;
	char path[PATH_MAX];
	struct accept_pool *pool;
};

struct sup_egress {
	struct policy *policy;
	struct names *names;
	struct approvals *approvals;
	struct secret_set *secrets;
	struct egress_ca *ca;
	struct upstream_cache *upstream;  /* the proxy's resolutions */
	struct egress_ctx dns_ctx, tcp_ctx;
	struct listener dns, tcp;
	atomic_int active;          /* connections being served */
	pthread_mutex_t lock;       /* stopping, asking, refused* */
	bool stopping;
	int asking;                 /* threads inside approvals_ask */
	unsigned long refused;      /* at the limit, not yet logged */
	uint64_t refused_logged_ms; /* when the last such line went out */
	char sandbox[64];
	void (*audit)(void *arg, const char *type, cJSON *details);
	void *audit_arg;
	struct audit_limit *limit;  /* what the guest's traffic records */
};

static const char *const no_env[] = {NULL};

/* ---- policy ---- */

static void policy_why(char *why, size_t len, const struct policy_error *pe)
{
	if (pe->line)
		snprintf(why, len, "policy error in %s line %u: %s", pe->file, pe->line, pe->reason);
	else
		snprintf(why, len, "policy error in %s: %s", pe->file, pe->reason);
}

/* Adds path's rules if the file exists. */
static int add_optional_file(struct policy *p, const char *path, char *why, size_t whylen)
{
	struct policy_error pe;
	int err = policy_add_file(p, path, &pe);

	if (err == -ENOENT)
		return 0;
	if (err)
		policy_why(why, whylen, &pe);
	return err;
}

int sup_egress_policy(const char *state_dir, const char *const *allow, size_t nallow,
		      struct policy **out, char *why, size_t whylen)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	struct policy *p = NULL;
	struct policy_error pe;
	int err;

	if ((err = policy_new(&p))) {
		snprintf(why, whylen, "out of memory for the policy");
		return err;
	}
	if ((err = kosa8_config_dir(dir, sizeof(dir))) == 0) {
		snprintf(path, sizeof(path), "%s/policy", dir);
		err = add_optional_file(p, path, why, whylen);
	} else {
		snprintf(why, whylen, "cannot find the configuration folder for the default policy");
	}
	if (!err && state_dir) {
		snprintf(path, sizeof(path), "%s/policy", state_dir);
		err = add_optional_file(p, path, why, whylen);
	}
	for (size_t i = 0; !err && i < nallow; i++)
		if ((err = policy_add_allow(p, allow[i], &pe)))
			snprintf(why, whylen, "--allow %s: %s", allow[i], pe.reason);
	if (err) {
		policy_free(p);
		return err;
	}
	*out = p;
	return 0;
}

/* ---- connections ---- */

static void serve_conn(void *arg, int fd)
{
	struct listener *l = arg;

	l->serve(l->ctx, fd);   /* closes fd; audits what it did */
}

/* A guest that keeps connecting at the limit must not fill the host's log
 * (one line per refusal was 2000 lines for one flood): a line at the first
 * refusal, then at most one per REFUSED_LOG_MS with the count since, and
 * the rest at stop (force). */
static void log_refused(struct sup_egress *e, unsigned long more, bool force)
{
	uint64_t now = mono_ms();
	unsigned long n = 0;

	pthread_mutex_lock(&e->lock);
	e->refused += more;
	if (e->refused && (force || !e->refused_logged_ms || now - e->refused_logged_ms >= REFUSED_LOG_MS)) {
		n = e->refused;
		e->refused = 0;
		e->refused_logged_ms = now;
	}
	pthread_mutex_unlock(&e->lock);
	if (n)
		log_err("egress: %lu guest connection(s) refused: %d connections open (at most one such line per %d s)",
			n, SUP_EGRESS_MAX_CONNS, REFUSED_LOG_MS / 1000);
}

static void refused_conn(void *arg)
{
	struct listener *l = arg;

	log_refused(l->e, 1, false);
}

/* Listens on <vsock>_<port>: the VMM's vsock device connects there for the
 * guest's connections to host port `port`. */
static int listen_port(struct listener *l, const char *vsock, unsigned port)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	struct stat st;
	int err;

	if ((size_t)snprintf(l->path, sizeof(l->path), "%s_%u", vsock, port) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, l->path);
	if (lstat(l->path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(l->path);   /* left by a supervisor that died */
	l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->fd < 0)
		return -errno;
	if (bind(l->fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(l->path, 0600) < 0 ||
	    listen(l->fd, 128) < 0)
		goto fail;
	struct accept_pool_opts po = {.fd = l->fd, .busy = &l->e->active, .max_busy = SUP_EGRESS_MAX_CONNS,
				      .max_idle = IDLE_ACCEPTORS, .stack = 256 * 1024,
				      .serve = serve_conn, .refused = refused_conn, .arg = l};
	if ((err = accept_pool_start(&po, &l->pool)) == 0)
		return 0;
	errno = -err;
fail:
	err = -errno;
	close(l->fd);
	l->fd = -1;
	unlink(l->path);
	return err;
}

static void listener_stop(struct listener *l)
{
	if (l->fd < 0)
		return;
	if (l->pool)
		accept_pool_stop(l->pool);
	else
		shutdown(l->fd, SHUT_RDWR);
	close(l->fd);
	l->fd = -1;
	unlink(l->path);
}

/* Frees l's pool once its threads have ended (by deadline, mono_ms). */
static int pool_free(struct listener *l, uint64_t deadline)
{
	uint64_t now = mono_ms();
	int err = accept_pool_free(l->pool, now < deadline ? (int)(deadline - now) : 0);

	if (!err)
		l->pool = NULL;
	return err;
}

/* ---- the proxy's callbacks ---- */

/* Counted, so that stopping can deny every waiter and know when the queue
 * is no longer in use before freeing it. */
static enum policy_action ask(void *arg, const char *kind, const char *name, uint16_t port)
{
	struct sup_egress *e = arg;
	enum policy_action a;

	pthread_mutex_lock(&e->lock);
	if (e->stopping) {
		pthread_mutex_unlock(&e->lock);
		return POLICY_DENY;
	}
	e->asking++;
	pthread_mutex_unlock(&e->lock);
	a = approvals_ask(e->approvals, kind, name, port, NULL, 0);
	pthread_mutex_lock(&e->lock);
	e->asking--;
	pthread_mutex_unlock(&e->lock);
	return a;
}

/* Denies whatever waits ("shutdown") until no thread is asking. */
static void deny_waiters(struct sup_egress *e, uint64_t deadline)
{
	for (;;) {
		pthread_mutex_lock(&e->lock);
		e->stopping = true;
		int asking = e->asking;
		pthread_mutex_unlock(&e->lock);
		if (!asking || mono_ms() >= deadline)
			return;
		cJSON *list = approvals_list(e->approvals), *r;
		cJSON_ArrayForEach(r, list) {
			const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
			if (cJSON_IsNumber(id))
				approvals_answer(e->approvals, (uint64_t)id->valuedouble, APPROVAL_DENY,
						 "shutdown");
		}
		cJSON_Delete(list);
		usleep(20 * 1000);
	}
}

/* Approvals records pass as they are: a person's answers are never
 * folded into a count, and the queue bounds how many requests a guest
 * makes.  Everything else here is the guest's traffic: coalesced. */
static void audit_hook(void *arg, const char *type, cJSON *details)
{
	struct sup_egress *e = arg;

	if (!e->audit)
		cJSON_Delete(details);
	else if (e->limit && strncmp(type, "approval.", 9))
		audit_limit_event(e->limit, type, details);
	else
		e->audit(e->audit_arg, type, details);
}

/* ---- start / stop ---- */

static int load_secrets(struct sup_egress *e, const struct sup_egress_opts *o, char *why, size_t whylen)
{
	int err;

	if (!o->nsecrets)
		return 0;
	err = secret_set_load(o->secrets, o->nsecrets, o->state_dir, &e->secrets);
	if (!err)
		return 0;
	/* Say which one: the set loads all or nothing. */
	for (size_t i = 0; i < o->nsecrets; i++) {
		struct secret s;
		int e2 = secret_read(o->secrets[i], true, &s);
		if (e2 == 0) {
			secret_clear(&s);
			continue;
		}
		snprintf(why, whylen, "secret %s: %s", o->secrets[i],
			 e2 == -ENOENT ? "no such secret (see 'kosa8 secret ls')" :
			 e2 == -ENOKEY ? "its environment variable is unset or not a valid value" :
					 strerror(-e2));
		return e2;
	}
	snprintf(why, whylen, "loading the sandbox's secrets failed: %s", strerror(-err));
	return err;
}

static void ctx_init(struct sup_egress *e, struct egress_ctx *c, int idle_ms, int decide_ms)
{
	memset(c, 0, sizeof(*c));
	c->sandbox = e->sandbox;
	c->policy = e->policy;
	c->names = e->names;
	c->secrets = e->secrets;
	c->ca = e->secrets ? e->ca : NULL;
	c->ask = ask;
	c->audit = audit_hook;
	/* For a corporate proxy's CA, and for tests with their own CA. */
	c->upstream_ca_file = getenv("KOSA8_UPSTREAM_CA_FILE");
	if (c->upstream_ca_file && !*c->upstream_ca_file)
		c->upstream_ca_file = NULL;
	c->arg = e;
	c->idle_timeout_ms = idle_ms;
	c->decide_ms = decide_ms;
}

/* How long a request waits for a person: KOSA8_APPROVAL_TIMEOUT seconds
 * (5 to 3600), else APPROVAL_TIMEOUT_MS.  A value that does not parse is
 * an error: a sandbox must not start waiting longer or shorter than asked. */
static int approval_timeout_ms(int *ms, char *why, size_t whylen)
{
	const char *v = getenv("KOSA8_APPROVAL_TIMEOUT");
	char *end;
	long n;

	*ms = APPROVAL_TIMEOUT_MS;
	if (!v || !*v)
		return 0;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || *end || n < 5 || n > 3600) {
		snprintf(why, whylen, "KOSA8_APPROVAL_TIMEOUT '%.20s': want seconds, 5 to 3600", v);
		return -EINVAL;
	}
	*ms = (int)n * 1000;
	return 0;
}

int sup_egress_start(const struct sup_egress_opts *o, struct sup_egress **out, char *why,
		     size_t whylen)
{
	int timeout_ms;
	struct sup_egress *e = calloc(1, sizeof(*e));
	int err;

	if (!e)
		return -ENOMEM;
	e->dns.fd = e->tcp.fd = -1;
	pthread_mutex_init(&e->lock, NULL);
	snprintf(e->sandbox, sizeof(e->sandbox), "%s", o->sandbox);
	e->audit = o->audit;
	e->audit_arg = o->audit_arg;
	if ((err = approval_timeout_ms(&timeout_ms, why, whylen)) ||
	    (err = sup_egress_policy(o->state_dir, o->allow, o->nallow, &e->policy, why, whylen)) ||
	    (err = load_secrets(e, o, why, whylen)))
		goto fail;
	if ((err = names_new(&e->names)) || (err = upstream_cache_new(NULL, &e->upstream)) ||
	    (err = approvals_new(e->policy, timeout_ms, &e->approvals))) {
		snprintf(why, whylen, "cannot set up the egress tables: %s", strerror(-err));
		goto fail;
	}
	if (e->audit) {
		struct audit_limit_opts lo = {.emit = e->audit, .emit_arg = e->audit_arg,
					      .now_ms = o->now_ms, .clock_arg = o->clock_arg};
		if ((err = audit_limit_new(&lo, &e->limit))) {
			snprintf(why, whylen, "cannot set up the audit coalescing: %s", strerror(-err));
			goto fail;
		}
	}
	approvals_set_audit(e->approvals, audit_hook, e);
	/* "allow always" outlives this run: it goes into the sandbox's policy. */
	{
		char pf[PATH_MAX + 16];
		snprintf(pf, sizeof(pf), "%s/policy", o->state_dir);
		if ((err = approvals_set_policy_file(e->approvals, pf))) {
			snprintf(why, whylen, "cannot set up approvals: %s", strerror(-err));
			goto fail;
		}
	}
	if ((err = egress_ca_open(o->state_dir, o->sandbox, &e->ca))) {
		snprintf(why, whylen, "the sandbox's egress CA in %s cannot be used: %s", o->state_dir,
			 strerror(-err));
		goto fail;
	}
	/* A DNS stream stays open as long as the guest keeps it (the agent
	 * reuses a few for every query); TCP connections time out when idle. */
	ctx_init(e, &e->dns_ctx, 0, o->decide_ms);
	ctx_init(e, &e->tcp_ctx, SUP_EGRESS_IDLE_MS, o->decide_ms);
	e->tcp_ctx.upstream_cache = e->upstream;
	e->dns = (struct listener){.e = e, .ctx = &e->dns_ctx, .serve = egress_dns_serve, .fd = -1};
	e->tcp = (struct listener){.e = e, .ctx = &e->tcp_ctx, .serve = egress_connect_serve, .fd = -1};
	if ((err = listen_port(&e->dns, o->vsock_path, EGRESS_DNS_PORT)) ||
	    (err = listen_port(&e->tcp, o->vsock_path, EGRESS_TCP_PORT))) {
		snprintf(why, whylen, "cannot listen for the guest's network next to %s: %s", o->vsock_path,
			 strerror(-err));
		goto fail;
	}
	*out = e;
	return 0;
fail:
	sup_egress_stop(e);
	return err;
}

void sup_egress_stop(struct sup_egress *e)
{
	uint64_t deadline = mono_ms() + STOP_WAIT_MS;

	if (!e)
		return;
	listener_stop(&e->dns);
	listener_stop(&e->tcp);
	log_refused(e, 0, true);
	if (e->approvals)
		deny_waiters(e, deadline);
	audit_limit_flush(e->limit);
	pthread_mutex_lock(&e->lock);
	bool idle = e->asking == 0;
	pthread_mutex_unlock(&e->lock);
	if (!idle) {
		log_err("egress: a connection is still waiting for an approval at stop");
		return;
	}
	approvals_free(e->approvals);
	e->approvals = NULL;
	/* The VMM is gone by now, so every guest connection has ended or is
	 * about to.  A thread still busy (an upstream that does not answer)
	 * keeps the tables: leaking them at exit beats freeing them under it. */
	if (pool_free(&e->dns, deadline) || pool_free(&e->tcp, deadline)) {
		log_err("egress: %d connection(s) still open at stop", atomic_load(&e->active));
		return;
	}
	audit_limit_free(e->limit);
	names_free(e->names);
	upstream_cache_free(e->upstream);
	policy_free(e->policy);
	secret_set_free(e->secrets);
	egress_ca_free(e->ca);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

void sup_egress_tick(struct sup_egress *e)
{
	if (e)
		audit_limit_tick(e->limit);
}

int sup_egress_active(const struct sup_egress *e)
{
	return e ? atomic_load(&e->active) : 0;
}

struct approvals *sup_egress_approvals(struct sup_egress *e)
{
	return e ? e->approvals : NULL;
}

const char *const *sup_egress_guest_env(struct sup_egress *e)
{
	return e && e->secrets ? secret_set_env(e->secrets) : no_env;
}

const char *sup_egress_ca_pem(struct sup_egress *e)
{
	return e && e->ca ? egress_ca_cert_pem(e->ca) : NULL;
}
