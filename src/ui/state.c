#include "ui/state.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/regdomain.h"
#include "common/util.h"
#include "sandbox/owner.h"
#include "sandbox/sandbox.h"
#include "supervisor/control.h"

#define STATE_CALL_MS 1000      /* status, as kosa8 ps waits */
/* approvals.list, as kosa8 approvals waits: a supervisor slow to answer
 * (seen under emulation) must not make its requests vanish from the page
 * between one second and the next. */
#define STATE_LIST_MS 5000
#define STATE_PERIOD_MS 1000
/* Request ids already put on the desktop, per sandbox name: a ring. */
#define NOTIFIED_MAX 256

extern char **environ;

struct ui_state {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	char *text;
	uint64_t gen;
	bool stop, notify;
	struct { char name[SANDBOX_NAME_MAX + 1]; uint64_t id; } notified[NOTIFIED_MAX];
	unsigned nnotified;
};

static cJSON *call(const char *name, const char *op, cJSON *req, int ms)
{
	char dir[PATH_MAX], path[PATH_MAX];
	cJSON *reply = NULL;

	cJSON_AddStringToObject(req, "op", op);
	if (sandbox_run_dir(name, dir, sizeof(dir)) || sandbox_path(path, sizeof(path), dir, "control.sock") ||
	    control_call(path, req, &reply, NULL, ms) ||
	    !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok"))) {
		cJSON_Delete(reply);
		reply = NULL;
	}
	cJSON_Delete(req);
	return reply;
}

/* Seconds since process pid started (from /proc), or -1. */
static double process_age(long pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	double up = 0;
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if (!(f = fopen(path, "re")))
		return -1;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	/* The command name may hold spaces and ')': fields count from the last ')'. */
	if (!p || !(p = strrchr(buf, ')')) ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
		   &start) != 1)
		return -1;
	if (!(f = fopen("/proc/uptime", "re")))
		return -1;
	ok = fscanf(f, "%lf", &up);
	fclose(f);
	return ok == 1 ? up - (double)start / (double)sysconf(_SC_CLK_TCK) : -1;
}

/* Resident memory of pid in bytes (VmRSS), or -1. */
static double process_rss(long pid)
{
	char path[64], line[128];
	unsigned long long kb;
	double rss = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if (!(f = fopen(path, "re")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
			rss = (double)kb * 1024;
	fclose(f);
	return rss;
}

static void add_running(cJSON *o, const cJSON *st)
{
	const cJSON *pid = cJSON_GetObjectItemCaseSensitive(st, "pid");
	const cJSON *vmm = cJSON_GetObjectItemCaseSensitive(st, "vmm_pid");
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(st, "operation");
	const char *limits = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "cgroup_limits"));

	if (cJSON_IsNumber(pid))
		cJSON_AddNumberToObject(o, "uptime_s", process_age(pid->valueint));
	if (cJSON_IsNumber(vmm))
		cJSON_AddNumberToObject(o, "rss", process_rss(vmm->valueint));
	if (op)
		cJSON_AddItemToObject(o, "operation", cJSON_Duplicate(op, true));
	if (limits)
		cJSON_AddStringToObject(o, "cgroup_limits", limits);
}

/* Adds name's waiting requests to list, each with its registered domain. */
static void add_requests(const char *name, cJSON *list)
{
	cJSON *reply = call(name, "approvals.list", cJSON_CreateObject(), STATE_LIST_MS), *r;
	char reg[256];

	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(reply, "requests")) {
		const char *host = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "name"));
		cJSON *c;
		if (!host || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r, "id")))
			continue;
		c = cJSON_Duplicate(r, true);
		cJSON_AddStringToObject(c, "sandbox", name);
		if (regdomain_of(host, reg, sizeof(reg)) == 0)
			cJSON_AddStringToObject(c, "registered", reg);
		cJSON_AddItemToArray(list, c);
	}
	cJSON_Delete(reply);
}

struct read_ctx { cJSON *sandboxes, *approvals; };

static void read_one(const char *name, void *arg)
{
	struct read_ctx *c = arg;
	struct sandbox_cfg cfg;
	struct sandbox_owner who;
	char dir[PATH_MAX];
	cJSON *o, *st = NULL;
	bool owned;

	if (sandbox_state_dir(name, dir, sizeof(dir)) < 0 || sandbox_cfg_load(dir, &cfg) < 0)
		return;
	owned = sandbox_owner_probe(dir, &who) == 1;
	if (owned)
		st = call(name, "status", cJSON_CreateObject(), STATE_CALL_MS);
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", name);
	cJSON_AddStringToObject(o, "state", !owned ? "stopped" : st ? "running" : "running (busy)");
	cJSON_AddNumberToObject(o, "cpus", cfg.cpus);
	cJSON_AddNumberToObject(o, "mem", (double)cfg.mem);
	cJSON_AddNumberToObject(o, "created", (double)cfg.created);
	cJSON_AddStringToObject(o, "workspace", cfg.workspace);
	if (st)
		add_running(o, st);
	cJSON_AddItemToArray(c->sandboxes, o);
	if (owned)
		add_requests(name, c->approvals);
	cJSON_Delete(st);
}

cJSON *ui_state_read(void)
{
	cJSON *root = cJSON_CreateObject();
	struct read_ctx c = {cJSON_AddArrayToObject(root, "sandboxes"),
			     cJSON_AddArrayToObject(root, "approvals")};

	sandbox_list(read_one, &c);
	return root;
}

int ui_answer(const char *name, uint64_t id, const char *answer, char *why, size_t len)
{
	cJSON *req = cJSON_CreateObject(), *reply = NULL;
	char dir[PATH_MAX], path[PATH_MAX];
	const char *e;
	int err;

	cJSON_AddStringToObject(req, "op", "approvals.answer");
	cJSON_AddNumberToObject(req, "id", (double)id);
	cJSON_AddStringToObject(req, "answer", answer);
	if (!(err = sandbox_run_dir(name, dir, sizeof(dir))) &&
	    !(err = sandbox_path(path, sizeof(path), dir, "control.sock")))
		err = control_call(path, req, &reply, NULL, STATE_LIST_MS);
	cJSON_Delete(req);
	if (err) {
		snprintf(why, len, "sandbox '%s' did not answer: %s", name, strerror(-err));
	} else if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok"))) {
		e = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(reply, "error"));
		snprintf(why, len, "%s", e ? e : "the supervisor said no");
		err = -EPERM;
	}
	cJSON_Delete(reply);
	return err;
}

/* notify-send, when installed, for a request not seen before. */
static void notify(struct ui_state *s, const cJSON *r)
{
	const char *sb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "sandbox"));
	const char *host = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "name"));
	const char *reg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "registered"));
	uint64_t id = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "id"));
	char body[600];
	char *argv[] = {"notify-send", "--app-name=kosa8", "kosa8: approval waiting", body, NULL};
	pid_t pid;

	for (unsigned i = 0; i < NOTIFIED_MAX && i < s->nnotified; i++)
		if (s->notified[i].id == id && !strcmp(s->notified[i].name, sb))
			return;
	snprintf(s->notified[s->nnotified % NOTIFIED_MAX].name, sizeof(s->notified[0].name), "%s", sb);
	s->notified[s->nnotified++ % NOTIFIED_MAX].id = id;
	if (!s->notify)
		return;
	snprintf(body, sizeof(body), "%s asks to reach %s (registered domain %s)", sb, host,
		 reg ? reg : "none");
	if (posix_spawnp(&pid, "notify-send", NULL, NULL, argv, environ) == 0)
		waitpid(pid, NULL, 0);
}

static void *watch(void *arg)
{
	struct ui_state *s = arg;
	struct timespec ts;

	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		cJSON *st, *r;
		char *text;
		pthread_mutex_unlock(&s->lock);
		st = ui_state_read();
		cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(st, "approvals"))
			notify(s, r);
		text = cJSON_PrintUnformatted(st);
		cJSON_Delete(st);
		pthread_mutex_lock(&s->lock);
		if (text && (!s->text || strcmp(text, s->text))) {
			free(s->text);
			s->text = text;
			s->gen++;
			pthread_cond_broadcast(&s->cond);
		} else {
			free(text);
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += STATE_PERIOD_MS / 1000;
		while (!s->stop && pthread_cond_timedwait(&s->cond, &s->lock, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int ui_state_start(bool notify_on, struct ui_state **out)
{
	struct ui_state *s = calloc(1, sizeof(*s));
	pthread_condattr_t ca;
	int err;

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->notify = notify_on;
	if ((err = pthread_create(&s->thread, NULL, watch, s))) {
		free(s);
		return -err;
	}
	*out = s;
	return 0;
}

void ui_state_stop(struct ui_state *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
}

void ui_state_free(struct ui_state *s)
{
	if (!s)
		return;
	free(s->text);
	free(s);
}

char *ui_state_get(struct ui_state *s, uint64_t *gen)
{
	char *t;

	pthread_mutex_lock(&s->lock);
	t = strdup(s->text ? s->text : "{\"sandboxes\":[],\"approvals\":[]}");
	*gen = s->gen;
	pthread_mutex_unlock(&s->lock);
	return t;
}

int ui_state_wait(struct ui_state *s, uint64_t gen, int timeout_ms)
{
	struct timespec ts;
	int err = 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&s->lock);
	while (!s->stop && s->gen == gen && err != ETIMEDOUT)
		err = pthread_cond_timedwait(&s->cond, &s->lock, &ts);
	err = s->stop ? -ESHUTDOWN : s->gen != gen ? 0 : -ETIMEDOUT;
	pthread_mutex_unlock(&s->lock);
	return err;
}
