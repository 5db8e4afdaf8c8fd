#include "ui/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


extern char **environ;

/* One view at a time: each runs a whole verify. */
static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;

/* Keeps at most cap bytes of what it is given: the newest, from a line's
 * start (show's output can be the whole log). */
struct tail {
	char *buf;
	size_t len, cap;
	bool cut;
};

static void tail_add(struct tail *t, const char *p, size_t n)
{
	if (n >= t->cap) {
		p += n - t->cap;
		n = t->cap;
		t->len = 0;
		t->cut = true;
	} else if (t->len + n > t->cap) {
		size_t drop = t->len + n - t->cap;
		memmove(t->buf, t->buf + drop, t->len - drop);
		t->len -= drop;
		t->cut = true;
	}
	memcpy(t->buf + t->len, p, n);
	t->len += n;
}

/* Runs this kosa8 with argv (argv[0] ignored), its stdout kept in t, its
 * stderr too when err_too; returns its exit status, -ETIMEDOUT or -errno. */
static int run_self(char *const argv[], struct tail *t, bool err_too)
{
	posix_spawn_file_actions_t fa;
	int p[2], st, rc = 0;
	pid_t pid;
	struct timespec start, now;
	char buf[16384];

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], err_too ? 2 : 1);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc) {
		close(p[0]);
		return -rc;
	}
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		ssize_t n;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > UI_AUDIT_TIMEOUT_S) {
			kill(pid, SIGKILL);
			rc = -ETIMEDOUT;
			break;
		}
		if (poll(&pf, 1, 1000) == 0)
			continue;
		if ((n = read(p[0], buf, sizeof(buf))) <= 0)
			break;
		tail_add(t, buf, (size_t)n);
	}
	close(p[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (rc)
		return rc;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -EINTR;
}

static cJSON *verify(void)
{
	static char *const argv[] = {"kosa8", "audit", "verify", NULL};
	struct tail t = {.cap = UI_AUDIT_OUT_MAX};
	cJSON *v = cJSON_CreateObject();
	int rc;

	if (!(t.buf = malloc(t.cap + 1)))
		return v;
	rc = run_self(argv, &t, true);
	t.buf[t.len] = '\0';
	cJSON_AddNumberToObject(v, "status", rc);
	cJSON_AddStringToObject(v, "text", t.buf);
	free(t.buf);
	return v;
}

/* The newest records of `audit show --json`, one object a line. */
static cJSON *records(void)
{
	static char *const argv[] = {"kosa8", "audit", "show", "--json", NULL};
	struct tail t = {.cap = UI_AUDIT_RECORDS * 2048};
	cJSON *arr = cJSON_CreateArray();
	char *line, *next;

	if (!(t.buf = malloc(t.cap + 1)))
		return arr;
	run_self(argv, &t, false);
	t.buf[t.len] = '\0';
	line = t.buf;
	if (t.cut && (next = strchr(line, '\n')))
		line = next + 1;   /* the first line may be cut */
	for (; *line; line = next) {
		cJSON *r;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		else
			next = line + strlen(line);
		if ((r = cJSON_Parse(line)))
			cJSON_AddItemToArray(arr, r);
	}
	while (cJSON_GetArraySize(arr) > UI_AUDIT_RECORDS)
		cJSON_DeleteItemFromArray(arr, 0);
	free(t.buf);
	return arr;
}

cJSON *ui_audit_read(int *err)
{
	cJSON *o;

	if (pthread_mutex_trylock(&audit_lock)) {
		*err = -EBUSY;
		return NULL;
	}
	o = cJSON_CreateObject();
	cJSON_AddItemToObject(o, "verify", verify());
	cJSON_AddItemToObject(o, "records", records());
	pthread_mutex_unlock(&audit_lock);
	*err = 0;
	return o;
}
