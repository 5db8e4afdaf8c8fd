/* A container's state folder: see state.h. */
#include "oci/state.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "common/fileio.h"

static const char *const status_names[] = {
	[OCI_CREATING] = "creating", [OCI_CREATED] = "created",
	[OCI_RUNNING] = "running", [OCI_STOPPED] = "stopped",
};

bool oci_id_valid(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > OCI_ID_MAX || !strcmp(id, ".") || !strcmp(id, ".."))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '+' || c == '-' || c == '.'))
			return false;
	}
	return true;
}

int oci_container_dir(const char *root, const char *id, char *buf, size_t len)
{
	if (!oci_id_valid(id))
		return -EINVAL;
	if (snprintf(buf, len, "%s/%s", root, id) >= (int)len)
		return -ENAMETOOLONG;
	return 0;
}

const char *oci_status_name(enum oci_status s)
{
	return (unsigned)s <= OCI_STOPPED ? status_names[s] : "unknown";
}

/* runc's rules: start only what is created; kill what has a process
 * (created or running); exec only into a running container; delete what
 * is stopped, or anything with
 * --force (created counts as stopped for delete, as in runc, since its
 * process never ran). */
int oci_check_op(enum oci_status s, enum oci_op op, char *why, size_t len)
{
	static const char *const opname[] = { "start", "kill", "delete", "delete", "exec into" };
	bool ok;

	switch (op) {
	case OCI_OP_START: ok = s == OCI_CREATED; break;
	case OCI_OP_KILL: ok = s == OCI_CREATED || s == OCI_RUNNING; break;
	case OCI_OP_DELETE: ok = s == OCI_STOPPED || s == OCI_CREATED; break;
	case OCI_OP_DELETE_FORCE: ok = true; break;
	case OCI_OP_EXEC: ok = s == OCI_RUNNING; break;
	default: ok = false;
	}
	if (ok)
		return 0;
	/* runc's words for a stopped one: containerd's runc shim reads "container
	 * not running" in a failed kill as "the process is gone", as when the
	 * CRI kills what is left of every container that exited. */
	snprintf(why, len, "cannot %s a container that is %s%s", opname[op], oci_status_name(s),
		 op == OCI_OP_DELETE && s == OCI_RUNNING ? " (use delete --force)" :
		 s == OCI_STOPPED ? ": container not running" : "");
	return s == OCI_STOPPED ? -ESRCH : -EBUSY;
}

int oci_lock(const char *dir)
{
	char path[PATH_MAX];
	int fd;

	if (snprintf(path, sizeof(path), "%s/lock", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		return -errno;
	if (flock(fd, LOCK_EX) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int oci_state_save(const char *dir, const struct oci_state *st)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	cJSON *o = cJSON_CreateObject();
	char *text;
	int fd, err = 0;

	cJSON_AddStringToObject(o, "id", st->id);
	cJSON_AddStringToObject(o, "bundle", st->bundle);
	cJSON_AddStringToObject(o, "sandbox", st->sandbox);
	cJSON_AddStringToObject(o, "status", oci_status_name(st->status));
	cJSON_AddNumberToObject(o, "pid", st->pid);
	cJSON_AddNumberToObject(o, "pid_start", (double)st->pid_start);
	cJSON_AddNumberToObject(o, "exit_status", st->exit_status);
	cJSON_AddNumberToObject(o, "created", (double)st->created);
	if (st->annotations)
		cJSON_AddItemToObject(o, "annotations", cJSON_Duplicate(st->annotations, true));
	text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!text)
		return -ENOMEM;
	if (snprintf(path, sizeof(path), "%s/state.json", dir) >= (int)sizeof(path) ||
	    snprintf(tmp, sizeof(tmp), "%s/.state.json.tmp", dir) >= (int)sizeof(tmp)) {
		free(text);
		return -ENAMETOOLONG;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		err = -errno;
	else {
		err = write_all(fd, text, strlen(text));
		if (!err && fsync(fd) < 0)
			err = -errno;
		close(fd);
		if (!err && rename(tmp, path) < 0)
			err = -errno;
	}
	free(text);
	return err;
}

static int num_field(const cJSON *o, const char *name, double lo, double hi, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi)
		return -EINVAL;
	*out = v->valuedouble;
	return 0;
}

static int str_field(const cJSON *o, const char *name, char *buf, size_t len)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (!cJSON_IsString(v) || strlen(v->valuestring) >= len)
		return -EINVAL;
	strcpy(buf, v->valuestring);
	return 0;
}

static int parse_state(const cJSON *o, struct oci_state *st)
{
	char status[16];
	double pid, start, code, created;
	const cJSON *a;

	if (str_field(o, "id", st->id, sizeof(st->id)) || !oci_id_valid(st->id) ||
	    str_field(o, "bundle", st->bundle, sizeof(st->bundle)) ||
	    str_field(o, "sandbox", st->sandbox, sizeof(st->sandbox)) ||
	    str_field(o, "status", status, sizeof(status)) ||
	    num_field(o, "pid", 0, 4194304, &pid) || num_field(o, "pid_start", 0, 1e15, &start) ||
	    num_field(o, "exit_status", 0, 255, &code) || num_field(o, "created", 0, 1e12, &created))
		return -EINVAL;
	st->status = OCI_STOPPED + 1;
	for (int i = 0; i <= OCI_STOPPED; i++)
		if (!strcmp(status, status_names[i]))
			st->status = i;
	if (st->status > OCI_STOPPED)
		return -EINVAL;
	st->pid = (pid_t)pid;
	st->pid_start = (uint64_t)start;
	st->exit_status = (int)code;
	st->created = (int64_t)created;
	a = cJSON_GetObjectItemCaseSensitive(o, "annotations");
	if (a && !cJSON_IsObject(a))
		return -EINVAL;
	st->annotations = a ? cJSON_Duplicate(a, true) : NULL;
	return 0;
}

int oci_state_load(const char *dir, struct oci_state *st)
{
	char path[PATH_MAX];
	uint8_t *buf;
	size_t len;
	cJSON *o;
	int err;

	memset(st, 0, sizeof(*st));
	if (snprintf(path, sizeof(path), "%s/state.json", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if ((err = read_file(path, OCI_STATE_MAX, &buf, &len)))
		return err;
	o = cJSON_ParseWithLength((const char *)buf, len);
	free(buf);
	if (!o)
		return -EINVAL;
	err = parse_state(o, st);
	cJSON_Delete(o);
	return err;
}

void oci_state_free(struct oci_state *st)
{
	cJSON_Delete(st->annotations);
	st->annotations = NULL;
}

uint64_t oci_pid_start(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (pid <= 0 || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* The command name may hold spaces and ')': fields count from the last ')'. */
	if (!(p = strrchr(buf, ')')))
		return 0;
	if (p[1] == ' ' && p[2] == 'Z')   /* a zombie: the container has ended */
		return 0;
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
		   &start) != 1)
		return 0;
	return start;
}

enum oci_status oci_state_now(const struct oci_state *st)
{
	if (st->status == OCI_STOPPED || (st->status == OCI_CREATING && !st->pid))
		return st->status;   /* creating: create itself still runs, under the lock */
	if (!st->pid || !st->pid_start || oci_pid_start(st->pid) != st->pid_start)
		return OCI_STOPPED;
	return st->status;
}

cJSON *oci_state_json(const struct oci_state *st)
{
	enum oci_status now = oci_state_now(st);
	cJSON *o = cJSON_CreateObject();
	char when[40];
	time_t t = (time_t)st->created;
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	cJSON_AddStringToObject(o, "ociVersion", "1.0.2");
	cJSON_AddStringToObject(o, "id", st->id);
	cJSON_AddNumberToObject(o, "pid", now == OCI_STOPPED ? 0 : st->pid);
	cJSON_AddStringToObject(o, "status", oci_status_name(now));
	cJSON_AddStringToObject(o, "bundle", st->bundle);
	cJSON_AddStringToObject(o, "created", when);
	cJSON_AddStringToObject(o, "owner", "");
	cJSON_AddItemToObject(o, "annotations",
			      st->annotations ? cJSON_Duplicate(st->annotations, true) : cJSON_CreateObject());
	return o;
}

int oci_signal_parse(const char *s)
{
	static const struct { const char *name; int sig; } names[] = {
		{"HUP", SIGHUP}, {"INT", SIGINT}, {"QUIT", SIGQUIT}, {"ILL", SIGILL}, {"TRAP", SIGTRAP},
		{"ABRT", SIGABRT}, {"BUS", SIGBUS}, {"FPE", SIGFPE}, {"KILL", SIGKILL}, {"USR1", SIGUSR1},
		{"SEGV", SIGSEGV}, {"USR2", SIGUSR2}, {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},
		{"TERM", SIGTERM}, {"CHLD", SIGCHLD}, {"CONT", SIGCONT}, {"STOP", SIGSTOP},
		{"TSTP", SIGTSTP}, {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU}, {"URG", SIGURG},
		{"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},
		{"WINCH", SIGWINCH}, {"IO", SIGIO}, {"PWR", SIGPWR}, {"SYS", SIGSYS},
	};
	char *end;
	long n;

	if (!*s)
		return -EINVAL;
	if (*s >= '0' && *s <= '9') {
		n = strtol(s, &end, 10);
		return *end || n < 1 || n > SIGRTMAX ? -EINVAL : (int)n;
	}
	if (!strncasecmp(s, "SIG", 3))
		s += 3;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(s, names[i].name))
			return names[i].sig;
	return -EINVAL;
}
