#include "ui/state.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "audit/audit.h"
#include "common/log.h"
#include "common/regdomain.h"
#include "common/util.h"
#include "sandbox/checkpoints.h"
#include "sandbox/owner.h"
#include "sandbox/sandbox.h"
#include "supervisor/ckpt_ops.h"
#include "supervisor/control.h"
#include "ui/action.h"
#include "ui/run.h"

#define STATE_CALL_MS 1000      /* status, as kosa8 ps waits */
/* approvals.list, as kosa8 approvals waits: a supervisor slow to answer
 * (seen under emulation) must not make its requests vanish from the page
 * between one second and the next. */
#define STATE_LIST_MS 5000
#define STATE_PERIOD_MS 1000
/* Request ids already put on the desktop, per sandbox name: a ring. */
#define NOTIFIED_MAX 256
/* Checkpoints shown per sandbox (the newest): a tree is kept to what a
 * page can draw, whatever the records on disk say. */
#define STATE_CKPT_MAX 256
/* One snapshot line from the helper machine's `__ui-state SECONDS`. */
#define STATE_LINE_MAX (4 << 20)
/* How long one such child runs before the next one is started: the
 * machine may have started or stopped since (while it is stopped the
 * child runs here, cmd_machine.c's local_when_stopped). */
#define STATE_FOLLOW_S "20"
/* A forwarded `kosa8 approvals` answers within this. */
#define STATE_ANSWER_S 60

extern char **environ;

struct ui_state {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	char *text;
	uint64_t gen;
	bool stop, notify, remote;
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

/* The sandbox's checkpoint tree, as `kosa8 checkpoints` reads it: each
 * checkpoint with its parent, and the one the sandbox runs from. */
static void add_checkpoints(cJSON *o, const char *dir)
{
	struct ckpt_meta *v = NULL, cur;
	char err[256];
	cJSON *arr;
	int n = 0;

	if (ckpt_meta_list(dir, &v, &n) < 0)
		return;
	arr = cJSON_AddArrayToObject(o, "checkpoints");
	for (int i = n > STATE_CKPT_MAX ? n - STATE_CKPT_MAX : 0; i < n; i++) {
		cJSON *c = cJSON_CreateObject();
		cJSON_AddStringToObject(c, "id", v[i].id);
		cJSON_AddStringToObject(c, "parent", v[i].parent);
		cJSON_AddNumberToObject(c, "created", (double)v[i].created);
		cJSON_AddStringToObject(c, "message", v[i].message);
		cJSON_AddNumberToObject(c, "memory_bytes", (double)v[i].memory_bytes);
		cJSON_AddItemToArray(arr, c);
	}
	for (int i = 0; i < n; i++)
		ckpt_meta_free(&v[i]);
	free(v);
	if (ckpt_current(dir, &cur, err, sizeof(err)) == 0) {
		cJSON_AddStringToObject(o, "running_from", cur.parent);
		ckpt_meta_free(&cur);
	}
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
	add_checkpoints(o, dir);
	cJSON_AddItemToArray(c->sandboxes, o);
	if (owned)
		add_requests(name, c->approvals);
	cJSON_Delete(st);
}

/* The audit log's size and change time: a new record (the proxy's
 * net.connect, the DNS's net.dns) changes them, so the snapshot changes
 * and the pages learn of it through the event stream.  A stat, not a
 * read: the log can be large and this runs every second. */
static void add_audit_mark(cJSON *root)
{
	char path[PATH_MAX];
	struct stat st;
	cJSON *o;

	if (audit_default_path(path, sizeof(path)) || stat(path, &st))
		return;
	o = cJSON_AddObjectToObject(root, "audit_log");
	cJSON_AddNumberToObject(o, "size", (double)st.st_size);
	cJSON_AddNumberToObject(o, "mtime_ns", (double)st.st_mtim.tv_sec * 1e9 + (double)st.st_mtim.tv_nsec);
}

cJSON *ui_state_read(void)
{
	cJSON *root = cJSON_CreateObject();
	struct read_ctx c = {cJSON_AddArrayToObject(root, "sandboxes"),
			     cJSON_AddArrayToObject(root, "approvals")};

	sandbox_list(read_one, &c);
	add_audit_mark(root);
	return root;
}

/* The last line of a command's output, for the page. */
static void last_line(const struct ui_tail *t, char *out, size_t len)
{
	const char *end = t->buf + t->len, *start;

	while (end > t->buf && end[-1] == '\n')
		end--;
	for (start = end; start > t->buf && start[-1] != '\n'; start--)
		;
	snprintf(out, len, "%.*s", (int)(end - start), start);
}

int ui_run_cli(char *const argv[], int timeout_s, char *out, size_t len)
{
	struct ui_tail t = {.cap = 16384};
	int rc;

	if (!(t.buf = malloc(t.cap + 1))) {
		snprintf(out, len, "out of memory");
		return -ENOMEM;
	}
	rc = ui_run_self(argv, &t, true, timeout_s);
	if (rc < 0)
		snprintf(out, len, "kosa8 %s could not run: %s", argv[1], strerror(-rc));
	else
		last_line(&t, out, len);
	free(t.buf);
	return rc > 0 ? -EPERM : rc;
}

/* `kosa8 approvals VERB NAME ID` as a child: where sandboxes live in the
 * helper machine, the child's dispatch forwards it there. */
static int answer_cli(const char *name, uint64_t id, const char *answer, char *why, size_t len)
{
	char idstr[24];
	char *argv[] = {"kosa8", "approvals", (char *)answer, (char *)name, idstr, NULL};

	snprintf(idstr, sizeof(idstr), "%llu", (unsigned long long)id);
	return ui_run_cli(argv, STATE_ANSWER_S, why, len);
}

int ui_answer(const char *name, uint64_t id, const char *answer, bool remote, char *why, size_t len)
{
	cJSON *req = cJSON_CreateObject(), *reply = NULL;
	char dir[PATH_MAX], path[PATH_MAX];
	const char *e;
	int err;

	if (remote) {
		cJSON_Delete(req);
		return answer_cli(name, id, answer, why, len);
	}
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

/* A rewind waits for the restored agent, and a fork for its new VM: under
 * emulation as long as a boot (cmd_checkpoint.c's REWIND_TIMEOUT_MS). */
#define STATE_CKPT_OP_S 600

int ui_checkpoint_op(const struct ui_ckpt_action *a, char *out, size_t len)
{
	static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER;
	char *rewind[] = {"kosa8", "rewind", (char *)a->sandbox, (char *)a->checkpoint, NULL};
	char *fork[] = {"kosa8", "fork", (char *)a->sandbox, (char *)a->checkpoint, "--name", (char *)a->name, NULL};
	int err;

	if (pthread_mutex_trylock(&one)) {
		snprintf(out, len, "another rewind or fork from this console is running");
		return -EBUSY;
	}
	err = ui_run_cli(strcmp(a->op, "fork") ? rewind : fork, STATE_CKPT_OP_S, out, len);
	pthread_mutex_unlock(&one);
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

/* A new snapshot: to the desktop and to every page, when it changed. */
static void publish(struct ui_state *s, cJSON *st)
{
	cJSON *r;
	char *text;

	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(st, "approvals"))
		if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "sandbox")) &&
		    cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "name")))
			notify(s, r);
	text = cJSON_PrintUnformatted(st);
	pthread_mutex_lock(&s->lock);
	if (text && (!s->text || strcmp(text, s->text))) {
		free(s->text);
		s->text = text;
		s->gen++;
		pthread_cond_broadcast(&s->cond);
	} else {
		free(text);
	}
	pthread_mutex_unlock(&s->lock);
}

/* ms from now on CLOCK_MONOTONIC, the condition variable's clock. */
static void deadline(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

/* Sleeps ms, or less when stopped; true while not stopped. */
static bool pause_ms(struct ui_state *s, int ms)
{
	struct timespec ts;
	bool go;

	deadline(&ts, ms);
	pthread_mutex_lock(&s->lock);
	while (!s->stop && pthread_cond_timedwait(&s->cond, &s->lock, &ts) != ETIMEDOUT)
		;
	go = !s->stop;
	pthread_mutex_unlock(&s->lock);
	return go;
}

static bool stopped(struct ui_state *s)
{
	bool st;

	pthread_mutex_lock(&s->lock);
	st = s->stop;
	pthread_mutex_unlock(&s->lock);
	return st;
}

/* Each complete line of buf[0..*len) is a snapshot: published, and taken
 * out of buf.  A line longer than STATE_LINE_MAX is dropped whole. */
static void take_lines(struct ui_state *s, char *buf, size_t *len, bool *skipping)
{
	char *nl;

	while ((nl = memchr(buf, '\n', *len))) {
		size_t n = (size_t)(nl - buf) + 1;
		cJSON *st = *skipping ? NULL : cJSON_ParseWithLength(buf, n - 1);
		if (cJSON_IsObject(st))
			publish(s, st);
		else if (!*skipping)
			log_info("ui: the helper machine's state line is not a JSON object");
		cJSON_Delete(st);
		*skipping = false;
		memmove(buf, buf + n, *len - n);
		*len -= n;
	}
	if (*len == STATE_LINE_MAX) {
		log_info("ui: a state line from the helper machine is longer than %d bytes: dropped",
			 STATE_LINE_MAX);
		*skipping = true;
		*len = 0;
	}
}

/* Where sandboxes live in the helper machine their control sockets do
 * too: the snapshots come from `kosa8 __ui-state SECONDS` run there (this
 * binary as a child; its dispatch forwards it), one JSON line each. */
static void follow_one(struct ui_state *s, char *buf)
{
	static char *const argv[] = {"kosa8", "__ui-state", STATE_FOLLOW_S, NULL};
	size_t len = 0;
	bool skipping = false;
	pid_t pid;
	int fd, st;

	if (ui_spawn_self(argv, false, &pid, &fd)) {
		log_info("ui: cannot run kosa8 __ui-state");
		return;
	}
	while (!stopped(s)) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t n;
		if (poll(&pf, 1, 500) == 0)
			continue;
		if ((n = read(fd, buf + len, STATE_LINE_MAX - len)) <= 0)
			break;
		len += (size_t)n;
		take_lines(s, buf, &len, &skipping);
	}
	/* The forwarding client passes SIGTERM on to the command. */
	kill(pid, SIGTERM);
	close(fd);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
}

static void follow(struct ui_state *s)
{
	char *buf = malloc(STATE_LINE_MAX);

	if (!buf)
		return;
	do
		follow_one(s, buf);
	while (pause_ms(s, 500));
	free(buf);
}

static void *watch(void *arg)
{
	struct ui_state *s = arg;

	if (s->remote) {
		follow(s);
		return NULL;
	}
	do {
		cJSON *st = ui_state_read();
		publish(s, st);
		cJSON_Delete(st);
	} while (pause_ms(s, STATE_PERIOD_MS));
	return NULL;
}

int ui_state_start(bool notify_on, bool remote, struct ui_state **out)
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
	s->remote = remote;
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

	deadline(&ts, timeout_ms);
	pthread_mutex_lock(&s->lock);
	while (!s->stop && s->gen == gen && err != ETIMEDOUT)
		err = pthread_cond_timedwait(&s->cond, &s->lock, &ts);
	err = s->stop ? -ESHUTDOWN : s->gen != gen ? 0 : -ETIMEDOUT;
	pthread_mutex_unlock(&s->lock);
	return err;
}
