/* kosa8 oci: an OCI runtime with runc's command line, so that containerd's
 * runc shim and Docker can run a container as a kosa8 sandbox
 * (docs/kubernetes.md).
 *
 *   kosa8 oci [--root DIR] [--log FILE] [--log-format text|json] COMMAND ...
 *   (or the same words after a `kosa8-runc` link to this binary)
 *
 * One container is one sandbox, named oci-<12 hex> from a hash of the root
 * and the container id.  `create` forks the container's monitor: the pid
 * it writes to --pid-file, a child the shim reaps.  The monitor creates
 * and starts the sandbox (from its template), streams the bundle's rootfs
 * into the guest, prepares the mounts and waits; `start` asks it to run
 * the process (inside the guest, its root the container's rootfs), with
 * the monitor's stdio (create's: as runc without a terminal) or a pty
 * whose master goes to --console-socket.  The monitor ends with the
 * process's status (a signal re-raised), after removing the sandbox.
 * `kill` asks the monitor to deliver a signal in the guest; `exec` runs
 * another process in the guest through a stand-in on the host (the pid
 * the shim waits for and signals). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "agentproto/client.h"
#include "cli/commands.h"
#include "common/fdpass.h"
#include "common/fileio.h"
#include "common/sha256.h"
#include "oci/spec.h"
#include "oci/state.h"

/* Creating a sandbox may first make its template: minutes under emulation. */
#define READY_TIMEOUT_MS (15 * 60 * 1000)
#define DELETE_WAIT_MS (60 * 1000)
#define COPIED_FILE_MAX (64 * 1024)
#define GUEST_ROOT "/oci/root"

struct oci_global {
	const char *root, *log;
	bool json;
};

static struct oci_global g = { .root = OCI_DEFAULT_ROOT };

/* One error line on stderr and, with --log, in the log file in the format
 * asked: containerd's shim reads the last json "error" line to explain a
 * failed call. */
static void say(const char *level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!strcmp(level, "error"))
		fprintf(stderr, "kosa8 oci: %s\n", msg);
	if (!g.log)
		return;
	int fd = open(g.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return;
	char when[40];
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (g.json) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "level", level);
		cJSON_AddStringToObject(o, "msg", msg);
		cJSON_AddStringToObject(o, "time", when);
		char *line = cJSON_PrintUnformatted(o);
		if (line)
			dprintf(fd, "%s\n", line);
		free(line);
		cJSON_Delete(o);
	} else {
		dprintf(fd, "time=\"%s\" level=%s msg=\"%s\"\n", when, level, msg);
	}
	close(fd);
}

#define FAIL(...) (say("error", __VA_ARGS__), 1)

static void sandbox_name(const char *id, char *buf, size_t len)
{
	struct sha256 h;
	uint8_t d[32];

	sha256_init(&h);
	sha256_update(&h, g.root, strlen(g.root) + 1);
	sha256_update(&h, id, strlen(id));
	sha256_final(&h, d);
	snprintf(buf, len, "oci-%02x%02x%02x%02x%02x%02x", d[0], d[1], d[2], d[3], d[4], d[5]);
}

/* ---- running kosa8 itself ---- */

/* Runs this kosa8 with argv, its output into log_fd (or /dev/null), and
 * returns its exit status (-errno if it could not run). */
static int run_kosa8(const char *const *argv, int log_fd)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(log_fd >= 0 ? log_fd : null, 1);
		dup2(log_fd >= 0 ? log_fd : null, 2);
		execv("/proc/self/exe", (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs argv in the sandbox's guest as root (the outer system, not the
 * container), stdin from in_fd (-1: empty), output to out_fd; its status. */
static int guest_run(const char *sandbox, const char *const *argv, int in_fd, int out_fd, char *err,
		     size_t errsz)
{
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	struct agent_client *c = NULL;
	struct agent_exit x;
	cJSON *what = cJSON_CreateObject(), *a = cJSON_CreateArray();
	int rc;

	for (int i = 0; argv[i]; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(argv[i]));
	cJSON_AddStringToObject(what, "kind", "exec");
	cJSON_AddItemToObject(what, "argv", a);
	if (cli_agent_session("oci", sandbox, what, &c, NULL)) {
		snprintf(err, errsz, "no agent session with sandbox %s", sandbox);
		return -EIO;
	}
	o.argv = argv;
	o.user = "0";
	o.stdin_fd = in_fd;
	o.stdout_fd = out_fd;
	o.stderr_fd = out_fd;
	rc = agent_exec(c, &o, &x);
	if (rc)
		snprintf(err, errsz, "%s: %s", argv[0], agent_client_error(c));
	agent_client_close(c);
	if (rc)
		return rc;
	if (x.signaled || x.code)
		snprintf(err, errsz, "%s in the guest ended with %s %d", argv[0], x.signaled ? "signal" : "status",
			 x.code);
	return x.signaled ? 128 + x.code : x.code;
}

/* ---- the monitor ---- */

struct monitor {
	char dir[PATH_MAX], sandbox[64], rootfs[PATH_MAX], console[PATH_MAX];
	struct oci_spec spec;
	int log_fd;      /* the container's monitor.log */
	int slave;       /* with process.terminal: the pty whose master went to the console socket */
	int listen_fd;
	int ctl_w;       /* agent_ctl_signal's pipe, once the process runs */
	pthread_mutex_t lock;
	bool started, ended;
	int exit_code, exit_sig;
	char err[512];
};

static int set_status(struct monitor *m, enum oci_status s, int exit_status)
{
	struct oci_state st;
	int lk = oci_lock(m->dir), err;

	if (lk < 0)
		return lk;
	if (!(err = oci_state_load(m->dir, &st))) {
		st.status = s;
		st.pid = getpid();
		st.pid_start = oci_pid_start(getpid());
		st.exit_status = exit_status;
		err = oci_state_save(m->dir, &st);
		oci_state_free(&st);
	}
	close(lk);
	return err;
}

static int create_sandbox(struct monitor *m)
{
	const char *argv[16 + 2 * (OCI_ALLOW_MAX + OCI_SECRETS_MAX)];
	char cpus[16], mem[32], policy[PATH_MAX];
	int n = 0, rc;

	snprintf(cpus, sizeof(cpus), "%d", m->spec.cpus);
	snprintf(mem, sizeof(mem), "%lluM", (unsigned long long)(m->spec.mem >> 20));
	argv[n++] = "kosa8";
	argv[n++] = "create";
	argv[n++] = "--name";
	argv[n++] = m->sandbox;
	argv[n++] = "--cpus";
	argv[n++] = cpus;
	argv[n++] = "--mem";
	argv[n++] = mem;
	for (int i = 0; i < m->spec.nallow; i++) {
		argv[n++] = "--allow";
		argv[n++] = m->spec.allow[i];
	}
	for (int i = 0; i < m->spec.nsecrets; i++) {
		argv[n++] = "--secret";
		argv[n++] = m->spec.secrets[i];
	}
	if (m->spec.policy[0]) {
		/* A name, never a path: a pod's author picks among the node's policies. */
		const char *pd = getenv("KOSA8_OCI_POLICY_DIR");
		snprintf(policy, sizeof(policy), "%s/%s.policy", pd ? pd : "/etc/kosa8/policies", m->spec.policy);
		argv[n++] = "--policy";
		argv[n++] = policy;
	}
	argv[n] = NULL;
	if ((rc = run_kosa8(argv, m->log_fd))) {
		snprintf(m->err, sizeof(m->err), "kosa8 create failed (status %d, see %.300s/monitor.log)", rc, m->dir);
		return -EIO;
	}
	const char *start[] = { "kosa8", "start", m->sandbox, NULL };
	if ((rc = run_kosa8(start, m->log_fd))) {
		snprintf(m->err, sizeof(m->err), "kosa8 start failed (status %d, see %.300s/monitor.log)", rc, m->dir);
		return -EIO;
	}
	return 0;
}

static void audit_container(struct monitor *m, const char *id, const char *bundle)
{
	cJSON *d = cJSON_CreateObject();
	char *text;

	cJSON_AddStringToObject(d, "container", id);
	cJSON_AddStringToObject(d, "bundle", bundle);
	cJSON_AddStringToObject(d, "root", g.root);
	if ((text = cJSON_PrintUnformatted(d))) {
		const char *argv[] = { "kosa8", "audit", "append", "--type", "oci.create", "--sandbox", m->sandbox,
				       "--actor", "oci", "--details", text, NULL };
		run_kosa8(argv, m->log_fd);
	}
	free(text);
	cJSON_Delete(d);
}

/* The rootfs goes in as a tar stream made on the host (links, owners and
 * modes kept: it is the container's own tree, unpacked inside the guest). */
static int copy_rootfs(struct monitor *m)
{
	const char *argv[] = { "sh", "-c", "mkdir -p " GUEST_ROOT " && tar -xpf - --numeric-owner -C " GUEST_ROOT,
			       NULL };
	int p[2], rc, st;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if ((pid = fork()) == 0) {
		dup2(p[1], 1);
		dup2(m->log_fd, 2);
		execlp("tar", "tar", "-cf", "-", "--numeric-owner", "-C", m->rootfs, ".", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	rc = guest_run(m->sandbox, argv, p[0], m->log_fd, m->err, sizeof(m->err));
	close(p[0]);
	waitpid(pid, &st, 0);
	if (!rc && (!WIFEXITED(st) || WEXITSTATUS(st)))
		snprintf(m->err, sizeof(m->err), "tar of %.200s failed (see %.200s/monitor.log)", m->rootfs, m->dir);
	return rc ? rc : (!WIFEXITED(st) || WEXITSTATUS(st)) ? -EIO : 0;
}

/* A small host file (Docker's /etc/hosts, /etc/hostname) copied over its
 * destination in the guest's root. */
static int copy_file(struct monitor *m, const struct oci_mount *mt)
{
	char dest[PATH_MAX];
	const char *argv[] = { "sh", "-c", "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"", "sh", dest, NULL };
	size_t size;
	int fd = open(mt->source, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK), rc;

	if (fd < 0 || fd_regular_size(fd, COPIED_FILE_MAX, &size) < 0) {
		snprintf(m->err, sizeof(m->err), "mount source %s for %s: not a regular file of at most %d bytes",
			 mt->source, mt->dest, COPIED_FILE_MAX);
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	snprintf(dest, sizeof(dest), GUEST_ROOT "%s", mt->dest);
	rc = guest_run(m->sandbox, argv, fd, m->log_fd, m->err, sizeof(m->err));
	close(fd);
	return rc ? -EIO : 0;
}

/* Kernel file systems and the root's read-only bind, made by one script in
 * the guest; its arguments are the spec's own strings, never spliced into
 * the script. */
static int guest_mounts(struct monitor *m)
{
	static const char script[] =
		"set -e; r=" GUEST_ROOT "; ro=$1; h=$2; shift 2\n"
		"[ -n \"$h\" ] && hostname \"$h\"\n"
		"rm -f $r/etc/resolv.conf; mkdir -p $r/etc; echo 'nameserver 127.0.0.53' > $r/etc/resolv.conf\n"
		"for d in proc sys dev; do mkdir -p $r/$d; done\n"
		"mount --rbind /dev $r/dev\n"
		"while [ $# -ge 4 ]; do\n"
		/* cgroup and mqueue depend on the guest kernel's options: best
		 * effort (a read-only /sys may not have their folder either). */
		"  { mkdir -p \"$r$1\" && mount -t \"$2\" -o \"${4:-defaults}\" \"${3:-$2}\" \"$r$1\"; } ||\n"
		"    case \"$2\" in cgroup*|mqueue) ;; *) exit 1;; esac\n"
		"  shift 4\n"
		"done\n"
		"mountpoint -q $r/proc || mount -t proc proc $r/proc\n"
		"mountpoint -q $r/sys || mount -t sysfs sysfs $r/sys\n"
		/* recursive: a plain bind of the root would hide the mounts above */
		"if [ \"$ro\" = 1 ]; then mount --rbind $r $r; mount -o remount,bind,ro $r; fi\n";
	const char *argv[8 + 4 * OCI_MOUNTS_MAX];
	int n = 0;

	argv[n++] = "sh";
	argv[n++] = "-c";
	argv[n++] = script;
	argv[n++] = "sh";
	argv[n++] = m->spec.root_readonly ? "1" : "0";
	argv[n++] = m->spec.hostname;
	for (int i = 0; i < m->spec.nmounts; i++) {
		const struct oci_mount *mt = &m->spec.mounts[i];
		/* Docker's /dev is the guest's own devtmpfs, bound above. */
		if (mt->kind != OCI_MOUNT_GUEST || !strcmp(mt->dest, "/dev"))
			continue;
		argv[n++] = mt->dest;
		argv[n++] = mt->type;
		argv[n++] = mt->source;
		argv[n++] = mt->options;
	}
	argv[n] = NULL;
	return guest_run(m->sandbox, argv, -1, m->log_fd, m->err, sizeof(m->err)) ? -EIO : 0;
}

static int prepare(struct monitor *m, const char *id, const char *bundle)
{
	int rc;

	if ((rc = create_sandbox(m)))
		return rc;
	audit_container(m, id, bundle);
	if ((rc = copy_rootfs(m)))
		return rc;
	for (int i = 0; i < m->spec.nmounts; i++)
		if (m->spec.mounts[i].kind == OCI_MOUNT_FILE && (rc = copy_file(m, &m->spec.mounts[i])))
			return rc;
	return guest_mounts(m);
}

/* The console: a pty whose master goes to the socket the shim listens
 * on; the monitor relays the guest's pty through the slave. */
static int console_pty(struct monitor *m, int *slave)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct termios t;
	int master, s, rc;

	if (strlen(m->console) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, m->console);
	if (openpty(&master, slave, NULL, NULL, NULL) < 0)
		return -errno;
	/* The guest's pty does the line discipline; this one only carries bytes. */
	if (tcgetattr(*slave, &t) == 0) {
		cfmakeraw(&t);
		tcsetattr(*slave, TCSANOW, &t);
	}
	if ((s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
		rc = -errno;
	else
		rc = fdpass_send(s, "/dev/ptmx", 9, master);
	if (s >= 0)
		close(s);
	close(master);
	if (rc)
		close(*slave);
	return rc;
}

/* The shim receives the console while create runs, as runc sends it. */
static int console(struct monitor *m)
{
	int rc;

	if (!m->spec.terminal)
		return 0;
	if ((rc = console_pty(m, &m->slave)))
		snprintf(m->err, sizeof(m->err), "console socket %.300s: %s", m->console, strerror(-rc));
	return rc;
}

static int run_process(struct monitor *m)
{
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	struct agent_client *c = NULL;
	struct agent_exit x;
	const char *argv[OCI_ARGS_MAX + 16], *env[OCI_ENV_MAX + OCI_SECRETS_MAX + 1];
	char uid[16], gid[16], cwd[OCI_PATH_LEN + 8], **senv = NULL;
	cJSON *what = cJSON_CreateObject(), *a = cJSON_CreateArray();
	int n = 0, ne = 0, ctl[2], slave = -1, rc;

	/* unshare(1) of the guest's util-linux: chroot, chdir and the ids, then exec. */
	snprintf(uid, sizeof(uid), "%u", m->spec.uid);
	snprintf(gid, sizeof(gid), "%u", m->spec.gid);
	snprintf(cwd, sizeof(cwd), "--wd=%s", m->spec.cwd);
	argv[n++] = "/usr/bin/unshare";
	argv[n++] = "--root=" GUEST_ROOT;
	argv[n++] = cwd;
	argv[n++] = "--setgid";
	argv[n++] = gid;
	argv[n++] = "--setuid";
	argv[n++] = uid;
	argv[n++] = "--";
	for (int i = 0; i < m->spec.nargs; i++)
		argv[n++] = m->spec.args[i];
	argv[n] = NULL;
	for (int i = 0; i < m->spec.nargs; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(m->spec.args[i]));
	cJSON_AddStringToObject(what, "kind", "exec");
	cJSON_AddItemToObject(what, "argv", a);
	if (cli_agent_session("oci", m->sandbox, what, &c, &senv))
		return -EIO;
	for (int i = 0; senv && senv[i] && ne < OCI_SECRETS_MAX; i++)
		env[ne++] = senv[i];
	for (int i = 0; i < m->spec.nenv; i++)
		env[ne++] = m->spec.env[i];
	env[ne] = NULL;
	o.argv = argv;
	o.env = env;
	o.user = "0";
	o.pty = m->spec.terminal;
	o.stdin_fd = 0;
	o.stdout_fd = 1;
	o.stderr_fd = 2;
	if (m->spec.terminal) {
		slave = m->slave;
		o.stdin_fd = o.stdout_fd = o.stderr_fd = slave;
	}
	if (pipe2(ctl, O_CLOEXEC) < 0) {
		rc = -errno;
		goto out;
	}
	o.ctl_fd = ctl[0];
	pthread_mutex_lock(&m->lock);
	m->ctl_w = ctl[1];
	pthread_mutex_unlock(&m->lock);
	rc = agent_exec(c, &o, &x);
	pthread_mutex_lock(&m->lock);
	m->ended = true;
	m->ctl_w = -1;
	pthread_mutex_unlock(&m->lock);
	close(ctl[0]);
	close(ctl[1]);
	if (rc)
		snprintf(m->err, sizeof(m->err), "%s", agent_client_error(c));
	else if (x.signaled)
		m->exit_sig = x.code;
	else
		m->exit_code = x.code;
out:
	if (slave >= 0)
		close(slave);
	for (int i = 0; senv && senv[i]; i++)
		free(senv[i]);
	free(senv);
	agent_client_close(c);
	return rc;
}

/* One request per connection: "start", or "kill SIGNO"; one line back. */
static void serve_one(struct monitor *m, int fd, bool *start)
{
	char req[64] = "", reply[128] = "ok\n";
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	ssize_t n;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || (cr.uid != 0 && cr.uid != getuid()))
		return;
	n = read(fd, req, sizeof(req) - 1);
	req[n > 0 ? n : 0] = 0;
	pthread_mutex_lock(&m->lock);
	if (!strcmp(req, "start")) {
		if (m->started)
			snprintf(reply, sizeof(reply), "error the container was started already\n");
		else
			*start = m->started = true;
	} else if (!strncmp(req, "kill ", 5) && atoi(req + 5) > 0 && atoi(req + 5) <= SIGRTMAX) {
		int sig = atoi(req + 5);
		if (!m->started) {
			/* Never started: the container ends as runc's does, by the signal. */
			m->exit_sig = sig;
			*start = false;
			m->ended = true;
		} else if (m->ctl_w < 0 || agent_ctl_signal(m->ctl_w, sig) < 0)
			snprintf(reply, sizeof(reply), "error the process is not running\n");
	} else {
		snprintf(reply, sizeof(reply), "error unknown request\n");
	}
	pthread_mutex_unlock(&m->lock);
	write_all(fd, reply, strlen(reply));
}

/* Serves the next request; true when it was a start. */
static bool serve_next(struct monitor *m)
{
	int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	bool start = false;

	if (fd < 0)
		return false;
	serve_one(m, fd, &start);
	close(fd);
	return start;
}

static void *serve_thread(void *arg)
{
	for (;;)
		serve_next(arg);
	return NULL;
}

/* Waits in created state for "start" (true) or a kill (false). */
static bool wait_start(struct monitor *m)
{
	for (;;) {
		if (serve_next(m))
			return true;
		if (m->ended)
			return false;
	}
}

/* The monitor's socket, ROOT/ID/monitor.sock, named through an O_PATH
 * descriptor of the folder: Docker's root and 64-hex ids make the full
 * path longer than sun_path (108 bytes).  *dfd is closed by the caller. */
static int monitor_addr(const char *dir, struct sockaddr_un *a, int *dfd)
{
	if ((*dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	a->sun_family = AF_UNIX;
	snprintf(a->sun_path, sizeof(a->sun_path), "/proc/self/fd/%d/monitor.sock", *dfd);
	return 0;
}

static int listen_on(struct monitor *m)
{
	struct sockaddr_un a;
	int fd = -1, dfd, err = 0;

	if ((err = monitor_addr(m->dir, &a, &dfd)))
		goto out;
	unlink(a.sun_path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0)
		err = -errno;
	close(dfd);
out:
	if (err) {
		snprintf(m->err, sizeof(m->err), "monitor socket in %.300s: %s", m->dir, strerror(-err));
		if (fd >= 0)
			close(fd);
		return err;
	}
	return fd;
}

static void remove_sandbox(const char *sandbox, int log_fd)
{
	const char *argv[] = { "kosa8", "rm", "-f", sandbox, NULL };

	run_kosa8(argv, log_fd);
}

/* Dies the way the process did, so that the shim's wait sees its status. */
static _Noreturn void exit_like(int code, int sig)
{
	if (sig) {
		struct rlimit no_core = { 0, 0 };
		setrlimit(RLIMIT_CORE, &no_core);
		signal(sig, SIG_DFL);
		sigset_t s;
		sigemptyset(&s);
		sigaddset(&s, sig);
		sigprocmask(SIG_UNBLOCK, &s, NULL);
		raise(sig);
		_exit(128 + sig);
	}
	_exit(code);
}

static _Noreturn void monitor_main(struct monitor *m, const char *id, const char *bundle, int ready)
{
	char path[PATH_MAX + 16];
	pthread_t t;

	snprintf(path, sizeof(path), "%s/monitor.log", m->dir);
	m->log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	m->ctl_w = -1;
	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_init(&m->lock, NULL);
	m->slave = -1;
	if ((m->listen_fd = listen_on(m)) < 0 || prepare(m, id, bundle) || console(m) ||
	    set_status(m, OCI_CREATED, 0)) {
		dprintf(ready, "error %s\n", m->err[0] ? m->err : "could not prepare the container");
		remove_sandbox(m->sandbox, m->log_fd);
		_exit(1);
	}
	dprintf(ready, "ok\n");
	close(ready);
	if (!wait_start(m)) {
		set_status(m, OCI_STOPPED, 128 + m->exit_sig);
		remove_sandbox(m->sandbox, m->log_fd);
		exit_like(0, m->exit_sig);
	}
	set_status(m, OCI_RUNNING, 0);
	pthread_create(&t, NULL, serve_thread, m);
	if (run_process(m)) {
		say("error", "%s", m->err);
		m->exit_code = 127;
	}
	set_status(m, OCI_STOPPED, m->exit_sig ? 128 + m->exit_sig : m->exit_code);
	remove_sandbox(m->sandbox, m->log_fd);
	exit_like(m->exit_code, m->exit_sig);
}

/* ---- the commands ---- */

struct create_args {
	const char *bundle, *pid_file, *console;
};

static int parse_create(int argc, char **argv, struct create_args *a)
{
	static const struct option opts[] = {
		{"bundle", required_argument, NULL, 'b'}, {"pid-file", required_argument, NULL, 'p'},
		{"console-socket", required_argument, NULL, 'c'}, {"no-pivot", no_argument, NULL, 'n'},
		{"no-new-keyring", no_argument, NULL, 'k'}, {"preserve-fds", required_argument, NULL, 'f'},
		{NULL, 0, NULL, 0},
	};
	int c;

	memset(a, 0, sizeof(*a));
	a->bundle = ".";
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+b:", opts, NULL)) != -1) {
		switch (c) {
		case 'b': a->bundle = optarg; break;
		case 'p': a->pid_file = optarg; break;
		case 'c': a->console = optarg; break;
		case 'n': case 'k': break;  /* no pivot_root, no keyring: a VM has its own */
		case 'f':
			if (strcmp(optarg, "0"))
				return FAIL("create: --preserve-fds is not supported (the process runs in a VM)");
			break;
		default: return FAIL("create: unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return FAIL("create: usage: create [--bundle DIR] [--pid-file FILE] [--console-socket SOCK] ID");
	return 0;
}

static int load_spec(const char *bundle, struct monitor *m)
{
	char path[PATH_MAX], err[512];
	uint8_t *buf;
	size_t len;
	struct stat sb;
	int rc;

	if (snprintf(path, sizeof(path), "%s/config.json", bundle) >= (int)sizeof(path))
		return FAIL("create: bundle path too long");
	if ((rc = read_file(path, OCI_SPEC_MAX, &buf, &len)))
		return FAIL("create: %s: %s", path, rc == -EFBIG ? "larger than 1 MiB" : strerror(-rc));
	rc = oci_spec_parse((const char *)buf, len, &m->spec, err, sizeof(err));
	free(buf);
	if (rc)
		return FAIL("create: %s: %s", path, err);
	if (snprintf(m->rootfs, sizeof(m->rootfs), "%s/%s", m->spec.root[0] == '/' ? "" : bundle,
		     m->spec.root) >= (int)sizeof(m->rootfs))
		return FAIL("create: root.path too long");
	if (stat(m->rootfs, &sb) < 0 || !S_ISDIR(sb.st_mode))
		return FAIL("create: root.path %s is not a directory", m->rootfs);
	return 0;
}

static int read_ready(int fd, char *line, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	size_t got = 0;

	while (got < len - 1) {
		int r = poll(&p, 1, READY_TIMEOUT_MS);
		if (r <= 0)
			return -ETIMEDOUT;
		ssize_t n = read(fd, line + got, len - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		if (memchr(line, '\n', got))
			break;
	}
	line[got] = 0;
	line[strcspn(line, "\n")] = 0;
	return got ? 0 : -EPIPE;
}

static int write_pid_file(const char *path, pid_t pid)
{
	char text[32];

	snprintf(text, sizeof(text), "%d", (int)pid);
	return write_file_replace(path, text, 0644);
}

static int start_monitor(struct monitor *m, const char *id, const char *bundle, pid_t *pid)
{
	char line[600];
	int p[2], st;

	if (pipe2(p, O_CLOEXEC) < 0)
		return FAIL("create: pipe: %s", strerror(errno));
	if ((*pid = fork()) < 0)
		return FAIL("create: fork: %s", strerror(errno));
	if (*pid == 0) {
		close(p[0]);
		monitor_main(m, id, bundle, p[1]);
	}
	close(p[1]);
	if (read_ready(p[0], line, sizeof(line)) || strcmp(line, "ok")) {
		close(p[0]);
		if (strncmp(line, "error ", 6))
			kill(*pid, SIGKILL);
		waitpid(*pid, &st, 0);
		return FAIL("create %s: %s", id, !strncmp(line, "error ", 6) ? line + 6 : "the monitor failed");
	}
	close(p[0]);
	return 0;
}

static int oci_create(int argc, char **argv)
{
	struct create_args a;
	struct oci_state st = {0};
	static struct monitor m;
	char bundle[PATH_MAX];
	const char *id;
	pid_t pid;
	int lk, rc;

	if (parse_create(argc, argv, &a))
		return 1;
	id = argv[argc - 1];
	if (!oci_id_valid(id))
		return FAIL("create: '%s' is not a container id (1-128 of A-Z a-z 0-9 _ + - .)", id);
	if (!realpath(a.bundle, bundle))
		return FAIL("create: bundle %s: %s", a.bundle, strerror(errno));
	if (load_spec(bundle, &m))
		return 1;
	if (m.spec.terminal != !!a.console)
		return FAIL("create: %s", m.spec.terminal ? "process.terminal needs --console-socket" :
			    "--console-socket given but process.terminal is false");
	if (a.console && strlen(a.console) >= sizeof(m.console))
		return FAIL("create: console socket path too long");
	snprintf(m.console, sizeof(m.console), "%s", a.console ? a.console : "");
	if ((rc = mkdir_p(g.root, 0700)) || (rc = oci_container_dir(g.root, id, m.dir, sizeof(m.dir))))
		return FAIL("create: state root %s: %s", g.root, strerror(-rc));
	if (mkdir(m.dir, 0700) < 0)
		return FAIL("create: %s", errno == EEXIST ? "a container with this id exists already" : strerror(errno));
	sandbox_name(id, m.sandbox, sizeof(m.sandbox));
	snprintf(st.id, sizeof(st.id), "%s", id);
	snprintf(st.bundle, sizeof(st.bundle), "%s", bundle);
	snprintf(st.sandbox, sizeof(st.sandbox), "%s", m.sandbox);
	st.status = OCI_CREATING;
	st.created = time(NULL);
	st.annotations = cJSON_CreateObject();
	for (int i = 0; i < m.spec.nannotations; i++)
		cJSON_AddStringToObject(st.annotations, m.spec.annotations[i].key, m.spec.annotations[i].value);
	if ((lk = oci_lock(m.dir)) < 0 || (rc = oci_state_save(m.dir, &st))) {
		oci_state_free(&st);
		cli_remove_tree(m.dir);
		return FAIL("create: writing the state in %s failed", m.dir);
	}
	oci_state_free(&st);
	close(lk);
	if (start_monitor(&m, id, bundle, &pid)) {
		cli_remove_tree(m.dir);
		return 1;
	}
	if (a.pid_file && (rc = write_pid_file(a.pid_file, pid)))
		return FAIL("create: --pid-file %s: %s", a.pid_file, strerror(-rc));
	return 0;
}

/* One request to the container's monitor; 0 when it answered ok. */
static int ask_monitor(const char *dir, const char *req, char *reply, size_t len)
{
	struct sockaddr_un a;
	int fd, dfd, err = 0;
	ssize_t n;

	if ((err = monitor_addr(dir, &a, &dfd)))
		return err;
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
		err = -errno;
		close(dfd);
		return err;
	}
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || write_all(fd, req, strlen(req)) < 0)
		err = -errno;
	close(dfd);
	shutdown(fd, SHUT_WR);
	n = err ? 0 : read_full(fd, reply, len - 1);
	close(fd);
	if (err)
		return err;
	reply[n > 0 ? n : 0] = 0;
	reply[strcspn(reply, "\n")] = 0;
	return strcmp(reply, "ok") ? -EPROTO : 0;
}

/* The container's folder and state, the status brought up to date. */
static int open_container(const char *cmd, const char *id, char *dir, size_t len, struct oci_state *st)
{
	int rc;

	if (!oci_id_valid(id))
		return FAIL("%s: '%s' is not a container id", cmd, id);
	if ((rc = oci_container_dir(g.root, id, dir, len)) || (rc = oci_state_load(dir, st)))
		return FAIL("%s: container %s %s", cmd, id, rc == -ENOENT ? "does not exist" : "has a bad state file");
	st->status = oci_state_now(st);
	return 0;
}

static int oci_start(int argc, char **argv)
{
	struct oci_state st;
	char dir[PATH_MAX], why[200], reply[200];
	int lk, rc;

	if (argc != 2)
		return FAIL("start: usage: start ID");
	if (open_container("start", argv[1], dir, sizeof(dir), &st))
		return 1;
	oci_state_free(&st);
	if ((lk = oci_lock(dir)) < 0)
		return FAIL("start: lock: %s", strerror(-lk));
	if (oci_state_load(dir, &st) == 0) {
		st.status = oci_state_now(&st);
		rc = oci_check_op(st.status, OCI_OP_START, why, sizeof(why));
		oci_state_free(&st);
		if (!rc && (rc = ask_monitor(dir, "start", reply, sizeof(reply))))
			snprintf(why, sizeof(why), "%s", rc == -EPROTO ? reply + 6 : "the monitor did not answer");
	} else {
		rc = -EINVAL;
		snprintf(why, sizeof(why), "bad state file");
	}
	close(lk);
	return rc ? FAIL("start %s: %s", argv[1], why) : 0;
}

/* ---- exec: another process in a running container ---- */

/* The signals a shim sends an exec'd process (it signals the pid it was
 * given, not through kill): passed on to the process in the guest. */
static const int forwarded[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM };

static void *forward_thread(void *arg)
{
	struct monitor *m = arg;
	sigset_t set;
	int sig;

	sigemptyset(&set);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(&set, forwarded[i]);
	for (;;) {
		if (sigwait(&set, &sig))
			continue;
		pthread_mutex_lock(&m->lock);
		if (m->ctl_w >= 0)
			agent_ctl_signal(m->ctl_w, sig);
		pthread_mutex_unlock(&m->lock);
	}
	return NULL;
}

/* The exec'd process's stand-in on the host: it runs the process in the
 * guest with its own stdio, passes the signals it gets on, and ends as the
 * process did.  ready (or -1) hears "ok" once the console went out. */
static _Noreturn void exec_main(struct monitor *m, int ready)
{
	sigset_t set;
	pthread_t t;

	m->ctl_w = m->slave = -1;
	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_init(&m->lock, NULL);
	if (console(m)) {
		if (ready >= 0)
			dprintf(ready, "error %s\n", m->err);
		else
			say("error", "exec: %s", m->err);
		_exit(1);
	}
	sigemptyset(&set);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(&set, forwarded[i]);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	pthread_create(&t, NULL, forward_thread, m);
	if (ready >= 0) {
		dprintf(ready, "ok\n");
		close(ready);
	}
	if (run_process(m)) {
		say("error", "exec: %s", m->err);
		m->exit_code = 127;
	}
	exit_like(m->exit_code, m->exit_sig);
}

struct exec_args {
	const char *process, *pid_file, *console;
	bool detach;
};

static int parse_exec(int argc, char **argv, struct exec_args *a)
{
	static const struct option opts[] = {
		{"process", required_argument, NULL, 'p'}, {"detach", no_argument, NULL, 'd'},
		{"pid-file", required_argument, NULL, 'P'}, {"console-socket", required_argument, NULL, 'c'},
		{NULL, 0, NULL, 0},
	};
	int c;

	memset(a, 0, sizeof(*a));
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+p:d", opts, NULL)) != -1) {
		switch (c) {
		case 'p': a->process = optarg; break;
		case 'd': a->detach = true; break;
		case 'P': a->pid_file = optarg; break;
		case 'c': a->console = optarg; break;
		default: return FAIL("exec: unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1 || !a->process)
		return FAIL("exec: usage: exec --process FILE [--detach] [--pid-file FILE] [--console-socket SOCK] ID");
	return 0;
}

static void audit_exec(struct monitor *m, const char *id)
{
	cJSON *d = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(d, "argv");
	char *text;

	cJSON_AddStringToObject(d, "container", id);
	for (int i = 0; i < m->spec.nargs; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(m->spec.args[i]));
	if ((text = cJSON_PrintUnformatted(d))) {
		const char *argv[] = { "kosa8", "audit", "append", "--type", "oci.exec", "--sandbox", m->sandbox,
				       "--actor", "oci", "--details", text, NULL };
		run_kosa8(argv, -1);
	}
	free(text);
	cJSON_Delete(d);
}

static int oci_exec(int argc, char **argv)
{
	static struct monitor m;
	struct exec_args a;
	struct oci_state st;
	char dir[PATH_MAX], why[200], err[512], line[600] = "";
	const char *id;
	uint8_t *buf;
	size_t len;
	int p[2], rc;
	pid_t pid;

	if (parse_exec(argc, argv, &a))
		return 1;
	id = argv[argc - 1];
	if (open_container("exec", id, dir, sizeof(dir), &st))
		return 1;
	rc = oci_check_op(st.status, OCI_OP_EXEC, why, sizeof(why));
	snprintf(m.sandbox, sizeof(m.sandbox), "%s", st.sandbox);
	oci_state_free(&st);
	if (rc)
		return FAIL("exec %s: %s", id, why);
	if ((rc = read_file(a.process, OCI_SPEC_MAX, &buf, &len)))
		return FAIL("exec: %s: %s", a.process, rc == -EFBIG ? "larger than 1 MiB" : strerror(-rc));
	rc = oci_process_parse((const char *)buf, len, &m.spec, err, sizeof(err));
	free(buf);
	if (rc)
		return FAIL("exec: %s: %s", a.process, err);
	if (m.spec.terminal != !!a.console)
		return FAIL("exec: %s", m.spec.terminal ? "process.terminal needs --console-socket" :
			    "--console-socket given but process.terminal is false");
	if (a.console && strlen(a.console) >= sizeof(m.console))
		return FAIL("exec: console socket path too long");
	snprintf(m.console, sizeof(m.console), "%s", a.console ? a.console : "");
	audit_exec(&m, id);
	if (!a.detach) {
		if (a.pid_file && (rc = write_pid_file(a.pid_file, getpid())))
			return FAIL("exec: --pid-file %s: %s", a.pid_file, strerror(-rc));
		exec_main(&m, -1);
	}
	/* Detached: the stand-in is a child the shim (a subreaper) adopts. */
	if (pipe2(p, O_CLOEXEC) < 0 || (pid = fork()) < 0)
		return FAIL("exec: %s", strerror(errno));
	if (pid == 0) {
		close(p[0]);
		exec_main(&m, p[1]);
	}
	close(p[1]);
	rc = read_ready(p[0], line, sizeof(line));
	close(p[0]);
	if (rc || strcmp(line, "ok")) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return FAIL("exec %s: %s", id, !strncmp(line, "error ", 6) ? line + 6 : "the process did not start");
	}
	if (a.pid_file && (rc = write_pid_file(a.pid_file, pid)))
		return FAIL("exec: --pid-file %s: %s", a.pid_file, strerror(-rc));
	return 0;
}

static int oci_state_cmd(int argc, char **argv)
{
	struct oci_state st;
	char dir[PATH_MAX], *text;
	cJSON *o;

	if (argc != 2)
		return FAIL("state: usage: state ID");
	if (open_container("state", argv[1], dir, sizeof(dir), &st))
		return 1;
	o = oci_state_json(&st);
	text = cJSON_Print(o);
	if (text)
		printf("%s\n", text);
	free(text);
	cJSON_Delete(o);
	oci_state_free(&st);
	return 0;
}

static int oci_kill(int argc, char **argv)
{
	struct oci_state st;
	char dir[PATH_MAX], why[200], req[32], reply[200];
	int i = 1, sig = SIGTERM, rc;

	for (; i < argc && argv[i][0] == '-'; i++)
		if (strcmp(argv[i], "--all") && strcmp(argv[i], "-a"))
			return FAIL("kill: unknown option '%s'", argv[i]);
	if (argc - i < 1 || argc - i > 2)
		return FAIL("kill: usage: kill [--all] ID [SIGNAL]");
	if (argc - i == 2 && (sig = oci_signal_parse(argv[i + 1])) < 0)
		return FAIL("kill: '%s' is not a signal", argv[i + 1]);
	if (open_container("kill", argv[i], dir, sizeof(dir), &st))
		return 1;
	rc = oci_check_op(st.status, OCI_OP_KILL, why, sizeof(why));
	oci_state_free(&st);
	if (rc)
		return FAIL("kill %s: %s", argv[i], why);
	snprintf(req, sizeof(req), "kill %d", sig);
	if ((rc = ask_monitor(dir, req, reply, sizeof(reply))))
		return FAIL("kill %s: %s", argv[i], rc == -EPROTO ? reply + 6 : "the monitor did not answer");
	return 0;
}

/* Ends a live container for delete: its monitor killed, then waited on
 * (it is not our child: poll its /proc entry). */
static void end_monitor(const struct oci_state *st, const char *dir)
{
	char reply[200];

	if (ask_monitor(dir, "kill 9", reply, sizeof(reply)) < 0 && st->pid &&
	    oci_pid_start(st->pid) == st->pid_start)
		kill(st->pid, SIGKILL);
	for (int i = 0; i < DELETE_WAIT_MS / 100 && oci_pid_start(st->pid) == st->pid_start; i++)
		usleep(100 * 1000);
}

static int oci_delete(int argc, char **argv)
{
	struct oci_state st;
	char dir[PATH_MAX], why[200];
	bool force = false;
	int i = 1, lk, rc;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--force") && strcmp(argv[i], "-f"))
			return FAIL("delete: unknown option '%s'", argv[i]);
		force = true;
	}
	if (argc - i != 1)
		return FAIL("delete: usage: delete [--force] ID");
	if (open_container("delete", argv[i], dir, sizeof(dir), &st))
		return 1;
	if ((lk = oci_lock(dir)) < 0) {
		oci_state_free(&st);
		return FAIL("delete: lock: %s", strerror(-lk));
	}
	if ((rc = oci_check_op(st.status, force ? OCI_OP_DELETE_FORCE : OCI_OP_DELETE, why, sizeof(why)))) {
		close(lk);
		oci_state_free(&st);
		return FAIL("delete %s: %s", argv[i], why);
	}
	if (st.status != OCI_STOPPED)
		end_monitor(&st, dir);
	/* The monitor removes its sandbox as it ends; one that was killed did not. */
	remove_sandbox(st.sandbox, -1);
	oci_state_free(&st);
	close(lk);
	if ((rc = cli_remove_tree(dir)))
		return FAIL("delete %s: removing %s: %s", argv[i], dir, strerror(-rc));
	return 0;
}

static int oci_features(int argc, char **argv)
{
	static const char *const mount_opts[] = { "ro", "rw", "nosuid", "nodev", "noexec", "relatime",
						  "strictatime", "mode", "size", "gid", "uid", "newinstance",
						  "ptmxmode" };
	cJSON *o, *l, *a, *cg;
	char *text;

	if (argc != 1)
		return FAIL("features: takes no arguments");
	o = cJSON_CreateObject();
	l = cJSON_CreateObject();
	a = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "ociVersionMin", "1.0.0");
	cJSON_AddStringToObject(o, "ociVersionMax", "1.1.0");
	cJSON_AddItemToObject(o, "hooks", cJSON_CreateArray());
	cJSON_AddItemToObject(o, "mountOptions", cJSON_CreateStringArray(mount_opts, sizeof(mount_opts) /
									     sizeof(mount_opts[0])));
	cJSON_AddItemToObject(l, "namespaces", cJSON_CreateArray());
	cJSON_AddItemToObject(l, "capabilities", cJSON_CreateArray());
	cg = cJSON_AddObjectToObject(l, "cgroup");
	cJSON_AddBoolToObject(cg, "v1", false);
	cJSON_AddBoolToObject(cg, "v2", false);
	cJSON_AddBoolToObject(cg, "systemd", false);
	cJSON_AddBoolToObject(cg, "systemdUser", false);
	cJSON_AddBoolToObject(cJSON_AddObjectToObject(l, "seccomp"), "enabled", false);
	cJSON_AddBoolToObject(cJSON_AddObjectToObject(l, "apparmor"), "enabled", false);
	cJSON_AddBoolToObject(cJSON_AddObjectToObject(l, "selinux"), "enabled", false);
	cJSON_AddItemToObject(o, "linux", l);
	cJSON_AddStringToObject(a, "io.kosa8.allow", "comma-separated egress allow rules");
	cJSON_AddStringToObject(a, "io.kosa8.secret", "comma-separated secret names");
	cJSON_AddStringToObject(a, "io.kosa8.policy", "a policy name under /etc/kosa8/policies");
	cJSON_AddItemToObject(o, "annotations", a);
	text = cJSON_Print(o);
	if (text)
		printf("%s\n", text);
	free(text);
	cJSON_Delete(o);
	return 0;
}

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} oci_cmds[] = {
	{"create", oci_create}, {"start", oci_start}, {"state", oci_state_cmd},
	{"kill", oci_kill}, {"delete", oci_delete}, {"features", oci_features}, {"exec", oci_exec},
};

static int parse_global(int argc, char **argv)
{
	static const struct option opts[] = {
		{"root", required_argument, NULL, 'r'}, {"log", required_argument, NULL, 'l'},
		{"log-format", required_argument, NULL, 'f'}, {"debug", no_argument, NULL, 'd'},
		{"systemd-cgroup", no_argument, NULL, 's'}, {"rootless", required_argument, NULL, 'R'},
		{"criu", required_argument, NULL, 'c'}, {NULL, 0, NULL, 0},
	};
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'r': g.root = optarg; break;
		case 'l': g.log = optarg; break;
		case 'f':
			if (strcmp(optarg, "json") && strcmp(optarg, "text"))
				return FAIL("--log-format takes json or text (got '%s')", optarg);
			g.json = !strcmp(optarg, "json");
			break;
		case 'd': case 'R': case 'c': break;  /* debug output, rootless and CRIU mean nothing here */
		case 's':
			/* The VMM's cgroup is kosa8's own; the container's processes are in a VM. */
			say("warning", "--systemd-cgroup ignored: a kosa8 container's limits are its VM's size");
			break;
		default: return -FAIL("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (g.root[0] != '/')
		return -FAIL("--root must be an absolute path");
	return optind;
}

int cmd_oci(int argc, char **argv)
{
	int i = parse_global(argc, argv);

	if (i < 0)
		return 1;
	if (i >= argc)
		return FAIL("usage: kosa8 oci [--root DIR] [--log FILE] [--log-format json|text] "
			    "create|start|state|exec|kill|delete|features ...");
	for (size_t k = 0; k < sizeof(oci_cmds) / sizeof(oci_cmds[0]); k++)
		if (!strcmp(argv[i], oci_cmds[k].name))
			return oci_cmds[k].run(argc - i, argv + i);
	return FAIL("unknown command '%s'", argv[i]);
}
