#include "supervisor/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentproto/client.h"
#include "audit/audit.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "sandbox/owner.h"
#include "supervisor/template.h"
#include "supervisor/cgroup.h"
#include "supervisor/console_log.h"
#include "supervisor/ckpt_ops.h"
#include "supervisor/control.h"
#include "supervisor/ctl_server.h"
#include "supervisor/egress.h"
#include "sandbox/sandbox.h"
#include "supervisor/sup_op.h"
#include "supervisor/vmm_clone.h"
#include "supervisor/vmm_files.h"
#include "vmm/jail.h"
#include "vmm/seccomp.h"
#include "vmm/vm.h"

/* How long the host waits for the VMM once it asked it to stop (control
 * "stop", then SIGKILL): the VMM is host code, this is only its exit. */
#define VMM_CTL_STOP_MS 3000
#define VMM_EXIT_WAIT_MS 5000
#define STOP_WAITERS_MAX 8

/* What the loop checked of a long operation's request, for the worker. */
struct op_args {
	char id[CKPT_ID_LEN];   /* rewind, checkpoint rm */
	char msg[CKPT_MSG_MAX]; /* checkpoint */
	bool live;              /* checkpoint for a live fork */
};

/* The loop's thread owns everything here, except while an operation runs
 * (ops): then the worker reads op_args, and a rewind (owns_vmm) also owns
 * vmm and console until it has finished. */
struct supervisor {
	struct sandbox_cfg cfg;
	char state_dir[PATH_MAX], run_dir[PATH_MAX];
	char log_path[PATH_MAX];   /* supervisor.log, our stdout and stderr */
	bool log_unbounded;        /* rotating it failed (said once) */
	char vm_dir[PATH_MAX];  /* run_dir/vm: all the jailed VMM sees of the host */
	char vsock_path[PATH_MAX], control_path[PATH_MAX];
	char vm_ctl[PATH_MAX];     /* the VMM's control socket, in vm/ */
	char ckpt_dir[PATH_MAX];   /* state_dir/checkpoints: the VMM's --checkpoint-dir */
	const char *self;          /* the kosa8 binary */
	/* Making a template (supervisor/template.h): its directory, else NULL. */
	const char *template_dir;
	struct audit_log *audit;
	struct sup_egress *egress;
	struct console_log *console; /* the running VMM's output (console_log.h) */
	struct vmm_cgroup cgroup;  /* the VMM's limits (cgroup.h) */
	char cgroup_why[PATH_MAX + 128]; /* limits missing, for status and log */
	char why[512];             /* a start-up failure, for `kosa8 start` */
	pid_t vmm;
	int owner_fd;              /* the sandbox's lock, held for life (sandbox/owner.h) */
	/* A live fork's first start: the parent's frozen memory (-1: none). */
	int restore_memfd;
	/* A live fork froze RAM in this cgroup: its forks may still map it,
	 * charged here, so later forks wait for a file (op_take). */
	bool ram_frozen;
	int listen_fd;
	struct ctl_server srv;     /* the control socket's clients */
	struct ctl_handler handler;
	struct sup_op_runner ops;  /* checkpoint, rewind, checkpoint rm */
	struct op_args op_args;
	int op_client;             /* held for the operation's reply, or -1 */
	bool op_progress;          /* it asked for progress lines */
	uint64_t op_progress_ms;   /* the last one sent */
	int sigchld_pipe[2];
	/* A stop: asked of the guest at stop_ms; past stop_deadline (or
	 * once the agent is known not to answer) the host ends the VM. */
	bool stopping, forced;
	uint64_t stop_ms, stop_deadline;
	int stop_waiters[STOP_WAITERS_MAX]; /* held clients told how it ended */
	int nstop_waiters;
	/* Where the start went, in ms since the supervisor began (status's
	 * "startup_ms", and the log): what `kosa8 run`'s time is made of. */
	struct {
		uint64_t t0, audit, egress, setup, vmm, vsock, agent, identity, ca, workspace;
	} start;
};

static int sigchld_wfd = -1;
/* Set by the thread that asks the agent to power off when it could not
 * (not in struct supervisor: that thread may outlive supervisor_main). */
static atomic_bool agent_refused;

static void on_sigchld(int sig)
{
	char b = 1;

	if (write(sigchld_wfd, &b, 1) < 0) {
		/* full: a wake-up is pending already */
	}
}

/* Each step's end, relative to the supervisor's start. */
static void startup_mark(struct supervisor *s, uint64_t *step)
{
	*step = mono_ms() - s->start.t0;
}

static cJSON *startup_json(const struct supervisor *s)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddNumberToObject(o, "audit_open", (double)s->start.audit);
	cJSON_AddNumberToObject(o, "egress", (double)s->start.egress);
	cJSON_AddNumberToObject(o, "setup", (double)s->start.setup);
	cJSON_AddNumberToObject(o, "vmm_started", (double)s->start.vmm);
	cJSON_AddNumberToObject(o, "vmm_listening", (double)s->start.vsock);
	cJSON_AddNumberToObject(o, "agent_answered", (double)s->start.agent);
	cJSON_AddNumberToObject(o, "identity", (double)s->start.identity);
	cJSON_AddNumberToObject(o, "ca_installed", (double)s->start.ca);
	cJSON_AddNumberToObject(o, "ready", (double)s->start.workspace);
	return o;
}

/* Writes one audit record; a failure is logged, never fatal to the guest. */
static void audit(struct supervisor *s, const char *actor, const char *type, cJSON *details)
{
	char *d = details ? cJSON_PrintUnformatted(details) : NULL;
	struct audit_event ev = {.sandbox = s->cfg.name, .actor = actor, .type = type, .details = d};
	int err;

	if (s->audit && (err = audit_log_append(s->audit, &ev, NULL)))
		log_err("audit: %s", audit_strerror(err));
	free(d);
	cJSON_Delete(details);
}

/* A VMM stopped by its seccomp filter said which call in its last words
 * (console.log); the supervisor repeats them in its log and the audit's
 * details (when given). */
static void report_seccomp(struct supervisor *s, int status, cJSON *details)
{
	static const char mark[] = "killed by seccomp: ";
	char path[PATH_MAX], line[256], last[256] = "";
	FILE *f;

	if (!(WIFEXITED(status) && WEXITSTATUS(status) == VMM_SECCOMP_EXIT) &&
	    !(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS))
		return;
	sandbox_path(path, sizeof(path), s->state_dir, "console.log");
	if ((f = fopen(path, "re"))) {
		while (fgets(line, sizeof(line), f))
			if (strstr(line, mark))
				snprintf(last, sizeof(last), "%s", strstr(line, mark) + strlen(mark));
		fclose(f);
	}
	last[strcspn(last, "\r\n")] = 0;
	log_err("VMM killed by seccomp: %s", last[0] ? last : "(no report: the call refused was write?)");
	if (details)
		cJSON_AddStringToObject(details, "vmm_seccomp", last[0] ? last : "unknown");
}

/* Arguments of the jailed VMM: a new boot of the sandbox's current disk, or
 * (restore) a run from a checkpoint on the delta made for it. */
static int vmm_argv(struct supervisor *s, const char *restore, const char *top, const char **argv,
		    char (*buf)[PATH_MAX])
{
	struct ckpt_meta cur;
	char err[256], host[AP_HOSTNAME_MAX + 1];
	int n = 0, rc;

	if (!top) {
		if ((rc = ckpt_current(s->state_dir, &cur, err, sizeof(err)))) {
			log_err("%s", err);
			return rc;
		}
		snprintf(buf[0], PATH_MAX, "%s", cur.top);
		ckpt_meta_free(&cur);
		top = buf[0];
	}
	snprintf(buf[1], PATH_MAX, "%lluK", (unsigned long long)(s->cfg.mem / 1024));
	snprintf(buf[2], PATH_MAX, "%d", s->cfg.cpus);
	snprintf(buf[4], PATH_MAX, "%u", s->cfg.cid);
	ap_hostname_from(s->cfg.name, host);
	snprintf(buf[3], PATH_MAX, SANDBOX_CMDLINE_FMT, host);
	/* The VMM's own executable, which maps no more than a VMM needs. */
	if ((rc = kosa8_vmm_path(s->self, buf[7], PATH_MAX))) {
		log_err("cannot find the VMM: no executable " KOSA8_VMM_FILE " next to %s or in ../lib/kosa8 "
			"(reinstall kosa8, or 'make' in a build tree)", s->self);
		return rc;
	}
	argv[n++] = buf[7];
	argv[n++] = "--no-emulate";
	/* Jailed: the VMM sees the kernel, the disk's layers, the vm/
	 * directory of its sockets and the checkpoint directory, nothing else
	 * (vmm/jail.h). */
	argv[n++] = "--jail";
	argv[n++] = "--checkpoint-dir";
	argv[n++] = s->ckpt_dir;
	argv[n++] = "--control";
	argv[n++] = s->vm_ctl;
	argv[n++] = "--disk";
	argv[n++] = top;
	argv[n++] = "--vsock";
	argv[n++] = s->vsock_path;
	argv[n++] = "--cid";
	argv[n++] = buf[4];
	if (geteuid() == 0) {
		/* A uid of its own, not root's (vmm/jail.h). */
		snprintf(buf[5], PATH_MAX, "%u:%u", (unsigned)jail_vmm_uid(s->cfg.cid),
			 (unsigned)JAIL_VMM_GID);
		argv[n++] = "--jail-user";
		argv[n++] = buf[5];
	}
	if (restore) {
		argv[n++] = "--restore";
		argv[n++] = restore;
		if (s->restore_memfd >= 0) {
			snprintf(buf[6], PATH_MAX, "%d", s->restore_memfd);
			argv[n++] = "--restore-memfd";
			argv[n++] = buf[6];
		}
	} else {
		const char *rest[] = {"--kernel", s->cfg.kernel, "--mem", buf[1], "--cpus", buf[2],
				      "--cmdline", buf[3]};
		memcpy(argv + n, rest, sizeof(rest));
		n += (int)ARRAY_SIZE(rest);
	}
	argv[n] = NULL;
	return 0;
}

/* After the VMM has exited: everything it wrote is in console.log. */
static void console_done(struct supervisor *s)
{
	console_log_stop(s->console);
	s->console = NULL;
}

/* As root: what the VMM will write becomes its uid's (vmm_files.h). */
static int hand_over_files(struct supervisor *s, const char *top)
{
	char first[PATH_MAX], why[512];
	struct vmm_files f = {.vm_dir = s->vm_dir, .ckpt_dir = s->ckpt_dir, .first_disk = first,
			      .top = top, .uid = jail_vmm_uid(s->cfg.cid), .gid = JAIL_VMM_GID};
	int rc;

	if (geteuid() != 0)
		return 0;
	if ((rc = sandbox_path(first, sizeof(first), s->state_dir, "disk.k8d")))
		return rc;
	if ((rc = vmm_files_hand_over(&f, why, sizeof(why))))
		log_err("%s", why);
	return rc;
}

static int spawn_vmm(struct supervisor *s, const char *restore, const char *top)
{
	char console[PATH_MAX], buf[8][PATH_MAX];
	const char *argv[36];
	int out, rc, gate[2], cgfd;
	bool userns, in_cgroup;

	if ((rc = vmm_argv(s, restore, top, argv, buf)) || (rc = hand_over_files(s, top ? top : buf[0])))
		return rc;
	sandbox_path(console, sizeof(console), s->state_dir, "console.log");
	console_done(s);
	if ((rc = console_log_start(console, 0, &s->console, &out)))
		return rc;
	if (pipe2(gate, O_CLOEXEC) < 0) {
		rc = -errno;
		close(out);
		console_done(s);
		return rc;
	}
	/* A VMM killed hard leaves its sockets behind; the next one binds them. */
	unlink(s->vm_ctl);
	unlink(s->vsock_path);
	cgfd = vmm_cgroup_open(&s->cgroup);
	s->vmm = vmm_clone(&userns, cgfd, &in_cgroup);
	if (cgfd >= 0)
		close(cgfd);
	if (s->vmm < 0) {
		rc = -errno;
		close(out);
		close(gate[0]);
		close(gate[1]);
		console_done(s);
		return rc;
	}
	if (s->vmm == 0) {
		int null = open("/dev/null", O_RDONLY);
		char go;
		dup2(null, 0);
		dup2(out, 1);
		dup2(out, 2);
		/* Wait until the parent has mapped its user (userns) and, when
		 * it did not start there, put it in its cgroup. */
		close(gate[1]);
		if (read(gate[0], &go, 1) != 1)
			_exit(127);
		if (restore && s->restore_memfd >= 0)
			fcntl(s->restore_memfd, F_SETFD, 0);
		/* The VMM holds the sandbox's lock too: one that outlives us
		 * keeps the disk owned.  It dies with us (its jail keeps the
		 * signal across its uid change). */
		fcntl(s->owner_fd, F_SETFD, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(out);
	close(gate[0]);
	if (userns && (rc = vmm_clone_map_user(s->vmm))) {
		/* Unmapped, it would run as the overflow user: not at all. */
		log_err("cannot map the user into the VMM's user namespace: %s", strerror(-rc));
		close(gate[1]);
		kill(s->vmm, SIGKILL);
		waitpid(s->vmm, NULL, 0);
		s->vmm = -1;
		console_done(s);
		return rc;
	}
	if (!in_cgroup && (rc = vmm_cgroup_add(&s->cgroup, s->vmm)))
		log_warn("the VMM runs without its cgroup limits: cannot join %s: %s", s->cgroup.path,
			 strerror(-rc));
	rc = write(gate[1], "g", 1) == 1 ? 0 : -errno;
	close(gate[1]);
	return rc;
}

/* The VMM's cgroup, once per supervisor (restarts reuse it); without one
 * the sandbox still runs, and the log says which limits are missing.  A
 * VMM without its memory ceiling is also said to the CLI that starts it
 * (ready_fd: a "warning: " line before "ok"), which shows it to the user:
 * never silently. */
static void setup_cgroup(struct supervisor *s, int ready_fd)
{
	struct vmm_cgroup_limits lim = {.mem = s->cfg.mem, .cpus = s->cfg.cpus};
	char *why = s->cgroup_why;
	int err = vmm_cgroup_create(&s->cgroup, s->cfg.name, &lim, why, sizeof(s->cgroup_why));

	if (err && !why[0])
		snprintf(why, sizeof(s->cgroup_why), "%s", strerror(-err));
	if (err)
		log_warn("no cgroup limits for the VMM: %s", why);
	else if (why[0])
		log_warn("cgroup limits incomplete: %s", why);
	if (ready_fd >= 0 && !strstr(s->cgroup.limits, "memory.max=")) {
		/* One line, within the readers' 512 bytes (a cut one would end
		 * the start as its error). */
		char line[512];
		snprintf(line, sizeof(line), "warning: the VMM runs without a memory limit (%.400s)\n",
			 why[0] ? why : "no memory.max");
		write_all(ready_fd, line, strlen(line));
	}
}

int supervisor_boot_timeout_ms(void)
{
	const char *v = getenv("KOSA8_BOOT_TIMEOUT");
	char *end;
	long n = v ? strtol(v, &end, 10) : 0;

	if (!v || *end || n < 10 || n > 7200)
		return 300 * 1000;
	return (int)n * 1000;
}

/* Says how the VMM ended (its exit status or signal and what that means)
 * into what, and in the supervisor log unless it was a power-off or a stop
 * the host asked for (those are the audit's to record). */
static void vmm_ended(int status, const char *when, char *what, size_t len)
{
	vm_exit_describe(status, what, len);
	if (!WIFEXITED(status) || (WEXITSTATUS(status) != VM_EXIT_POWEROFF &&
				   WEXITSTATUS(status) != VM_EXIT_HOST_STOP))
		log_err("VMM stopped %s: %s", when, what);
}

/* Polls the agent until it answers a ping or the VMM dies; *out gets
 * that session: the start's next requests (fix-up, CA) go on it rather
 * than on new connections, each a vsock handshake and a fork in the guest. */
static int wait_for_agent(struct supervisor *s, struct agent_client **out)
{
	uint64_t deadline = mono_ms() + SUPERVISOR_BOOT_TIMEOUT_MS;

	*out = NULL;
	while (mono_ms() < deadline) {
		struct agent_client *c = NULL;
		struct agent_ping p;
		int status;

		if (waitpid(s->vmm, &status, WNOHANG) == s->vmm) {
			char what[160];
			console_done(s);
			vmm_ended(status, "while booting", what, sizeof(what));
			report_seccomp(s, status, NULL);
			snprintf(s->why, sizeof(s->why), "the VM stopped while booting (%s; see 'kosa8 logs')",
				 what);
			s->vmm = -1;
			return -ECHILD;
		}
		/* The VMM binds its socket once it has made its devices; until
		 * then there is none (spawn_vmm unlinked it), and a connect
		 * fails at once.  Checked before the connect, which waits for
		 * the guest's answer. */
		if (!s->start.vsock && access(s->vsock_path, F_OK) == 0)
			startup_mark(s, &s->start.vsock);
		if (agent_client_connect_vsock_uds(s->vsock_path, AGENT_VSOCK_PORT, &c) == 0 &&
		    agent_ping(c, &p) == 0) {
			*out = c;
			return 0;
		}
		if (c)
			agent_client_close(c);
		/* A refused connection costs a round trip through the VMM: on
		 * a host with KVM the whole boot takes little more than this.
		 * Before the VMM's socket is there, its bind (or its end)
		 * wakes us: a nap here cost the start up to 20 ms after it. */
		if (s->start.vsock)
			usleep(20 * 1000);
		else
			wait_created_ms(s->vsock_path, s->vmm, 20);
	}
	return -ETIMEDOUT;
}

/* After a run from a checkpoint the guest's clock, RNG and (for a fork)
 * identity are the checkpoint's: two forks would draw the same random
 * numbers and share a host name and machine-id.  The agent puts them right
 * in its own code (AP_FIXUP: host entropy credited and the CRNG reseeded,
 * the clock set from the host's, for a fork the sandbox's name and a new
 * machine-id), running no guest program: guest root may have replaced
 * them all.  The call has a deadline: a guest that stalls it fails the
 * fix-up, never the supervisor.  Processes keep what they drew before (a
 * userspace RNG seeded earlier stays the same in every fork). */
#define FIXUP_TIMEOUT_MS 10000

static int guest_fixup(struct supervisor *s, struct agent_client *c, bool new_identity)
{
	struct ap_fixup_req q = {.seed_len = 64, .identity = new_identity};
	struct timespec now;
	uint32_t done = 0;
	int err;

	clock_gettime(CLOCK_REALTIME, &now);
	q.time_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	if (new_identity)
		ap_hostname_from(s->cfg.name, q.hostname);
	if (getrandom(q.seed, q.seed_len, 0) != (ssize_t)q.seed_len ||
	    getrandom(q.machine_id, sizeof(q.machine_id), 0) != (ssize_t)sizeof(q.machine_id))
		return -EIO;
	/* The bound stays on the session: what the start asks next on it
	 * (the CA) is as small. */
	agent_client_set_timeout(c, FIXUP_TIMEOUT_MS);
	if ((err = agent_fixup(c, &q, &done)))
		log_err("setting the guest's clock, RNG and identity after the restore: %s",
			agent_client_error(c));
	explicit_bzero(&q, sizeof(q));
	return err;
}

static int copy_workspace(struct supervisor *s)
{
	struct agent_client *c = NULL;
	struct ap_tree_stats st;
	int err;

	if (!s->cfg.workspace[0] || s->cfg.workspace_copied)
		return 0;
	if ((err = agent_client_connect_vsock_uds(s->vsock_path, AGENT_VSOCK_PORT, &c)))
		return err;
	memset(&st, 0, sizeof(st));
	err = agent_put_tree(c, s->cfg.workspace, "/workspace", NULL, &st);
	if (err)
		log_err("copying the workspace in: %s", agent_client_error(c));
	agent_client_close(c);
	if (err)
		return err;
	s->cfg.workspace_copied = true;
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "from", s->cfg.workspace);
	audit(s, "supervisor", "workspace.copy_in", d);
	return sandbox_cfg_save(s->state_dir, &s->cfg);
}

/* The proxy's records (net.dns, net.connect, secret.use, approval.*),
 * from its connection threads: the audit log takes concurrent appends. */
static void egress_audit(void *arg, const char *type, cJSON *details)
{
	audit(arg, "egress", type, details);
}

static int start_egress(struct supervisor *s)
{
	const char *allow[SANDBOX_ALLOW_MAX], *secrets[SANDBOX_SECRETS_MAX];
	struct sup_egress_opts o = {
		.sandbox = s->cfg.name, .state_dir = s->state_dir, .vsock_path = s->vsock_path,
		.allow = allow, .nallow = (size_t)s->cfg.nallow,
		.secrets = secrets, .nsecrets = (size_t)s->cfg.nsecrets,
		.audit = egress_audit, .audit_arg = s,
	};

	for (int i = 0; i < s->cfg.nallow; i++)
		allow[i] = s->cfg.allow[i];
	for (int i = 0; i < s->cfg.nsecrets; i++)
		secrets[i] = s->cfg.secrets[i];
	return sup_egress_start(&o, &s->egress, s->why, sizeof(s->why));
}

/* Hands the sandbox CA's certificate to the agent, which adds it to the
 * guest's trust store itself (AP_TRUST): the host never reads, nor writes
 * into, the guest's files for it.  A guest that broke its own trust store
 * only loses TLS interception (its clients then refuse the proxy: no secret
 * is sent), so a failure is logged and audited, and the sandbox starts:
 * the user can still get the workspace out. */
static void install_guest_ca(struct supervisor *s, struct agent_client *c, const char *pem)
{
	int err = agent_trust_ca(c, pem);

	if (err) {
		const char *why = agent_client_error(c);
		log_warn("the sandbox CA is not trusted in the guest (%s): connections to a "
			 "secret's host will fail there", why);
		cJSON *d = cJSON_CreateObject();
		cJSON_AddStringToObject(d, "error", why);
		audit(s, "supervisor", "sandbox.ca_not_installed", d);
	}
}

/* Agent connections being made for clients (each a thread, bounded). */
#define AGENT_CONNECTS_MAX 16
static atomic_int agent_connects;

struct agent_connect {
	char vsock_path[PATH_MAX];
	int client;   /* a duplicate of the client's connection: its own */
	cJSON *reply; /* the reply, sent with the agent's descriptor */
};

/* The handshake with the VMM's vsock device waits on the VMM (for as long
 * as it writes a checkpoint, the guest paused): here, never in the loop. */
static void *agent_connect_thread(void *arg)
{
	struct agent_connect *a = arg;
	int afd = agent_vsock_uds_connect(a->vsock_path, AGENT_VSOCK_PORT);

	if (afd < 0) {
		ctl_reply_error(a->client, afd == -ECONNREFUSED ? "the guest agent is not listening" :
					   "the sandbox's vsock device is not answering");
		cJSON_Delete(a->reply);
	} else {
		ctl_reply_ok(a->client, a->reply, afd);
		close(afd);
	}
	close(a->client);
	free(a);
	atomic_fetch_sub(&agent_connects, 1);
	return NULL;
}

/* Audits what the client says the session is for (exec argv, cp paths)
 * and connects it to the agent, off the loop. */
static void handle_agent(struct supervisor *s, int fd, const cJSON *req)
{
	const cJSON *what = cJSON_GetObjectItemCaseSensitive(req, "what");
	struct agent_connect *a;
	cJSON *env;

	if (atomic_fetch_add(&agent_connects, 1) >= AGENT_CONNECTS_MAX || !(a = calloc(1, sizeof(*a)))) {
		atomic_fetch_sub(&agent_connects, 1);
		ctl_reply_error(fd, "too many agent sessions starting at once: try again");
		return;
	}
	snprintf(a->vsock_path, sizeof(a->vsock_path), "%s", s->vsock_path);
	/* Every command gets the secrets' placeholders, never their values. */
	a->reply = cJSON_CreateObject();
	env = cJSON_AddArrayToObject(a->reply, "env");
	for (const char *const *e = sup_egress_guest_env(s->egress); *e; e++)
		cJSON_AddItemToArray(env, cJSON_CreateString(*e));
	a->client = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (a->client < 0 || thread_detached(agent_connect_thread, a, 0)) {
		if (a->client >= 0)
			close(a->client);
		cJSON_Delete(a->reply);
		free(a);
		atomic_fetch_sub(&agent_connects, 1);
		ctl_reply_error(fd, "cannot start the agent session");
		return;
	}
	audit(s, "user", "agent.session", cJSON_IsObject(what) ? cJSON_Duplicate(what, true) : NULL);
}

struct stop_ask {
	char vsock_path[PATH_MAX];
};

/* Asks the guest to power off cleanly (it syncs its disks first).  On a
 * thread of its own: a guest that accepts the connection and never answers
 * holds this thread, never the supervisor; the host's deadline stands. */
static void *stop_ask_thread(void *arg)
{
	struct stop_ask *a = arg;
	struct agent_client *c = NULL;

	if (agent_client_connect_vsock_uds(a->vsock_path, AGENT_VSOCK_PORT, &c) != 0 ||
	    agent_shutdown(c) != 0)
		atomic_store(&agent_refused, true);
	if (c)
		agent_client_close(c);
	free(a);
	return NULL;
}

/* Starts a stop: the guest has grace_ms to power off, then the event loop
 * ends the VM from the host (force_end).  A second stop may only shorten
 * the wait. */
static void request_stop(struct supervisor *s, uint64_t grace_ms)
{
	uint64_t now = mono_ms();
	struct stop_ask *a;

	if (s->vmm <= 0)
		return;
	if (s->stopping) {
		if (now + grace_ms < s->stop_deadline)
			s->stop_deadline = now + grace_ms;
		return;
	}
	s->stopping = true;
	s->stop_ms = now;
	s->stop_deadline = now + grace_ms;
	if (!grace_ms || !(a = calloc(1, sizeof(*a)))) {
		atomic_store(&agent_refused, true);
		return;
	}
	snprintf(a->vsock_path, sizeof(a->vsock_path), "%s", s->vsock_path);
	if (thread_detached(stop_ask_thread, a, 0)) {
		free(a);
		atomic_store(&agent_refused, true);
	}
}

/* Ends the VMM from the host, whatever the guest does: the VMM's control
 * "stop" (it flushes its disk and exits), then SIGKILL.  Returns its wait
 * status. */
static int end_vmm(struct supervisor *s)
{
	static const struct vm_control_req stop = {.op = VMCTL_STOP};
	struct vm_control_reply rep;
	int status = 0;

	/* kill(0) or kill(-1) would hit the supervisor's group or every
	 * process of the user: only ever a VMM that was started. */
	if (s->vmm <= 0)
		return 0;
	/* Reaped as it exits: a 20 ms poll here cost every `rm -f` and
	 * `run --rm` up to one turn after the VMM had gone. */
	if (vm_control_call(s->vm_ctl, &stop, &rep, NULL, VMM_CTL_STOP_MS) == 0 &&
	    wait_child_ms(s->vmm, &status, VMM_EXIT_WAIT_MS) == 0)
		goto out;
	kill(s->vmm, SIGKILL);
	while (waitpid(s->vmm, &status, 0) < 0 && errno == EINTR)
		;
out:
	s->vmm = -1;
	console_done(s);
	return status;
}

/* ---- checkpoints (ckpt_ops.h) ---- */

static const char *req_str(const cJSON *req, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- long operations (sup_op.h): checkpoint, rewind, checkpoint rm ----
 * Each runs on the worker.  The request's fields were checked and copied
 * into s->op_args by the loop before it was submitted. */

static cJSON *take_reply(struct supervisor *s, const struct ckpt_meta *m, int memfd)
{
	cJSON *d = cJSON_CreateObject();

	cJSON_AddStringToObject(d, "id", m->id);
	cJSON_AddStringToObject(d, "parent", m->parent);
	cJSON_AddStringToObject(d, "message", m->message);
	cJSON_AddNumberToObject(d, "memory_bytes", (double)m->memory_bytes);
	cJSON_AddStringToObject(d, "memory", ckpt_memory_kind(s->state_dir, m->id));
	cJSON_AddNumberToObject(d, "paused_ms", m->paused_ms);
	/* A live fork: the forks map the frozen memory passed with the reply,
	 * and the file is written meanwhile (vm_checkpoint_live). */
	cJSON_AddBoolToObject(d, "live", memfd >= 0);
	return d;
}

/* A checkpoint cancelled while the VMM wrote it (the VMM cannot stop
 * half-way: the guest is paused until it is whole): removed again, its
 * disk layer kept under the running disk. */
static cJSON *take_undo(struct supervisor *s, const struct ckpt_meta *m)
{
	char err[600] = "", msg[700];
	uint64_t freed = 0;
	cJSON *d = cJSON_CreateObject();
	int rc = ckpt_remove(s->state_dir, m->id, &freed, err, sizeof(err));

	cJSON_AddStringToObject(d, "id", m->id);
	cJSON_AddBoolToObject(d, "removed", rc == 0);
	audit(s, "user", "checkpoint.cancelled", d);
	if (rc)
		snprintf(msg, sizeof(msg), "checkpoint %s was cancelled once written, but not removed: %s",
			 m->id, err);
	else
		snprintf(msg, sizeof(msg), "checkpoint %s cancelled (it was written, and is removed again)",
			 m->id);
	return sup_op_fail(msg);
}

static cJSON *op_take(struct sup_op_runner *op, void *arg, int *pass_fd)
{
	struct supervisor *s = arg;
	struct op_args *a = &s->op_args;
	struct ckpt_meta m;
	char err[600] = "";
	int memfd = -1;
	bool live;
	cJSON *d;

	if (sup_op_cancelled(op))
		return sup_op_fail("checkpoint cancelled before it began");
	sup_op_step(op, "the VMM writes the checkpoint");
	/* One frozen RAM per cgroup: a second (a VMM whose RAM is a view of
	 * its first, or rewound beside it) would be a third RAM-sized charge
	 * over the 2 x RAM limit, so later forks wait for a written file.
	 * Raised before, not after: a VMM whose RAM is a private view (a
	 * template start) copies it into a new memfd for the fork, beside its
	 * own pages until the remap frees them (vm_checkpoint_live). */
	live = a->live && !s->ram_frozen;
	if (live && vmm_cgroup_allow_frozen(&s->cgroup, s->cfg.mem))
		log_warn("cannot raise the VMM's memory.max for the frozen memory of a live fork");
	if (ckpt_take(s->state_dir, s->vm_ctl, a->msg[0] ? a->msg : NULL, &m, live ? &memfd : NULL,
		      err, sizeof(err))) {
		log_err("checkpoint: %s", err);
		return sup_op_fail(err);
	}
	/* A live one is in use already: the forks may map its memory. */
	if (sup_op_cancelled(op) && memfd < 0) {
		d = take_undo(s, &m);
		ckpt_meta_free(&m);
		return d;
	}
	if (memfd >= 0)
		s->ram_frozen = true;
	d = take_reply(s, &m, memfd);
	audit(s, "user", "checkpoint.create", cJSON_Duplicate(d, true));
	ckpt_meta_free(&m);
	*pass_fd = memfd;
	return d;
}

/* Ends the running VMM now (its state is thrown away by the rewind). */
static void kill_vmm(struct supervisor *s)
{
	end_vmm(s);
}

/* The VM did not come back from the checkpoint: the sandbox has stopped. */
static cJSON *rewind_failed(struct supervisor *s, const char *id, int rc, cJSON *d)
{
	char err[600];

	snprintf(err, sizeof(err), "the VM did not run from checkpoint %s (see 'kosa8 logs'): %s", id,
		 strerror(-rc));
	log_err("%s", err);
	cJSON_AddStringToObject(d, "error", err);
	audit(s, "user", "checkpoint.rewind_failed", d);
	if (s->vmm > 0) {
		kill(s->vmm, SIGKILL);
		waitpid(s->vmm, NULL, 0);
	}
	s->vmm = -1;
	console_done(s);
	return sup_op_fail(err);
}

static cJSON *op_rewind(struct sup_op_runner *op, void *arg, int *pass_fd)
{
	struct supervisor *s = arg;
	const char *id = s->op_args.id;
	char dir[PATH_MAX], top[PATH_MAX], err[600] = "";
	uint64_t t0 = mono_ms(), t_stopped, t_running, freed = 0;
	struct agent_client *agent;
	cJSON *d;
	int rc;

	/* Everything that can be checked is checked before the VM is touched:
	 * a damaged checkpoint leaves the sandbox running as it was. */
	sup_op_step(op, "checking checkpoint %s", id);
	if (ckpt_rewind_prepare(s->state_dir, id, dir, sizeof(dir), top, sizeof(top), err,
				sizeof(err)))
		return sup_op_fail(err);
	/* The last point where a cancel leaves the sandbox as it was; past
	 * it, a half rewind would leave it stopped. */
	if (sup_op_cancelled(op)) {
		unlink(top);
		return sup_op_fail("rewind cancelled before the VM was touched");
	}
	sup_op_step(op, "stopping the VM");
	kill_vmm(s);
	t_stopped = mono_ms();
	d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "id", id);
	sup_op_step(op, "restoring checkpoint %s, waiting for the guest agent", id);
	if ((rc = spawn_vmm(s, dir, top)) || (rc = wait_for_agent(s, &agent)))
		return rewind_failed(s, id, rc, d);
	t_running = mono_ms();
	sup_op_step(op, "setting the guest's clock and RNG");
	guest_fixup(s, agent, false); /* logged; the rewind stands without it */
	agent_client_close(agent);
	rc = ckpt_rewind_commit(s->state_dir, id, top, &freed);
	if (rc)
		log_err("rewind: cannot record the new disk: %s", strerror(-rc));
	cJSON_AddNumberToObject(d, "freed_bytes", (double)freed);
	cJSON_AddNumberToObject(d, "ms", (double)(mono_ms() - t0));
	/* Where the time went: the old VMM's stop, the restore until the
	 * agent answered, the guest's clock and RNG put right. */
	cJSON_AddNumberToObject(d, "stop_ms", (double)(t_stopped - t0));
	cJSON_AddNumberToObject(d, "restore_ms", (double)(t_running - t_stopped));
	cJSON_AddNumberToObject(d, "fixup_ms", (double)(mono_ms() - t_running));
	audit(s, "user", "checkpoint.rewind", cJSON_Duplicate(d, true));
	return d;
}

static cJSON *op_remove(struct sup_op_runner *op, void *arg, int *pass_fd)
{
	struct supervisor *s = arg;
	const char *id = s->op_args.id;
	char err[600] = "";
	uint64_t freed = 0;
	cJSON *d;

	sup_op_step(op, "removing checkpoint %s", id);
	if (ckpt_remove(s->state_dir, id, &freed, err, sizeof(err)))
		return sup_op_fail(err);
	d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "id", id);
	cJSON_AddNumberToObject(d, "freed_bytes", (double)freed);
	audit(s, "user", "checkpoint.rm", cJSON_Duplicate(d, true));
	return d;
}

/* ---- the control socket (ctl_server.h) ---- */

/* {"ok":false,"error":"NAME is busy: ...","busy":{...}}: what runs. */
static bool refuse_if_busy(struct supervisor *s, int fd)
{
	char msg[256];
	cJSON *r;

	if (!sup_op_busy(&s->ops, s->cfg.name, msg, sizeof(msg)))
		return false;
	r = cJSON_CreateObject();
	cJSON_AddBoolToObject(r, "ok", false);
	cJSON_AddStringToObject(r, "error", msg);
	cJSON_AddItemToObject(r, "busy", sup_op_json(&s->ops));
	control_send(fd, r, -1);
	cJSON_Delete(r);
	return true;
}

/* Checks a checkpoint request and keeps its fields for the worker: the
 * operation's name ("checkpoint c3"), or NULL after an error was sent. */
static sup_op_fn checkpoint_request(struct supervisor *s, int fd, const char *op, const cJSON *req,
				    char *what, size_t len)
{
	const char *msg = req_str(req, "message"), *id = req_str(req, "id");
	struct op_args *a = &s->op_args;
	struct ckpt_meta cur;
	char err[256];

	memset(a, 0, sizeof(*a));
	if (!strcmp(op, "checkpoint")) {
		if (msg && !ckpt_message_valid(msg))
			return ctl_reply_error(fd, "the message is too long (511 bytes) or has control characters"), NULL;
		snprintf(a->msg, sizeof(a->msg), "%s", msg ? msg : "");
		a->live = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "live"));
		if (ckpt_current(s->state_dir, &cur, err, sizeof(err)))
			return ctl_reply_error(fd, err), NULL;
		snprintf(what, len, "checkpoint c%u", cur.next);
		ckpt_meta_free(&cur);
		return op_take;
	}
	if (!id || !ckpt_id_valid(id)) {
		ctl_reply_error(fd, !strcmp(op, "rewind") ? "rewind needs a checkpoint id" :
			       "checkpoint rm needs an id");
		return NULL;
	}
	snprintf(a->id, sizeof(a->id), "%s", id);
	snprintf(what, len, "%s %s", !strcmp(op, "rewind") ? "rewind to" : "checkpoint rm", id);
	return !strcmp(op, "rewind") ? op_rewind : op_remove;
}

/* checkpoint, rewind, checkpoint.rm: one at a time, off the loop; the
 * client is held for the reply (and progress, with "progress":true). */
static int start_op(struct supervisor *s, int fd, const char *op, const cJSON *req)
{
	char what[SUP_OP_NAME_MAX];
	sup_op_fn fn;
	int err;

	if (refuse_if_busy(s, fd))
		return CTL_DONE;
	if (s->stopping || s->vmm <= 0) {
		ctl_reply_error(fd, s->stopping ? "the sandbox is stopping" : "the sandbox's VM has ended");
		return CTL_DONE;
	}
	if (strcmp(op, "checkpoint") && strcmp(op, "rewind") && strcmp(op, "checkpoint.rm")) {
		ctl_reply_error(fd, "unknown op");
		return CTL_DONE;
	}
	if (!(fn = checkpoint_request(s, fd, op, req, what, sizeof(what))))
		return CTL_DONE;
	if ((err = sup_op_submit(&s->ops, what, fn == op_rewind, fn, s))) {
		ctl_reply_error(fd, strerror(-err));
		return CTL_DONE;
	}
	log_info("%s: started", what);
	s->op_client = fd;
	s->op_progress = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "progress"));
	s->op_progress_ms = mono_ms();
	return CTL_HOLD;
}

/* The operation's reply to its client, if it is still there. */
static void op_finished(struct supervisor *s)
{
	int pass_fd = -1;
	bool ok;
	cJSON *r = sup_op_collect(&s->ops, &ok, &pass_fd);

	if (!r)
		return;
	if (s->op_client >= 0) {
		if (ok)
			ctl_reply_ok(s->op_client, r, pass_fd);
		else
			ctl_reply_error(s->op_client, cJSON_GetStringValue(cJSON_GetObjectItem(r, "error")));
		ctl_server_release(&s->srv, s->op_client);
		s->op_client = -1;
		if (ok)
			r = NULL; /* ctl_reply_ok freed it */
	}
	cJSON_Delete(r);
	if (pass_fd >= 0)
		close(pass_fd);
}

/* Every OP_PROGRESS_MS, a client that asked for it gets a line
 * {"progress":STEP,"what":..,"running_ms":N} before its reply. */
#define OP_PROGRESS_MS 2000

static void op_progress(struct supervisor *s)
{
	cJSON *o;

	if (s->op_client < 0 || !s->op_progress || mono_ms() - s->op_progress_ms < OP_PROGRESS_MS ||
	    !(o = sup_op_json(&s->ops)))
		return;
	s->op_progress_ms = mono_ms();
	cJSON_AddStringToObject(o, "progress", cJSON_GetStringValue(cJSON_GetObjectItem(o, "step")));
	cJSON_DeleteItemFromObject(o, "step");
	if (control_send(s->op_client, o, -1)) {
		/* A client that stopped reading has gone as far as we care. */
		char what[SUP_OP_NAME_MAX];
		sup_op_cancel(&s->ops, what, sizeof(what));
		ctl_server_release(&s->srv, s->op_client);
		s->op_client = -1;
	}
	cJSON_Delete(o);
}

/* {"op":"cancel"}: the running operation stops at its next safe point. */
static void handle_cancel(struct supervisor *s, int fd)
{
	char what[SUP_OP_NAME_MAX];
	cJSON *r;

	if (!sup_op_cancel(&s->ops, what, sizeof(what))) {
		ctl_reply_error(fd, "nothing to cancel: no checkpoint, rewind or checkpoint rm runs");
		return;
	}
	log_info("%s: cancel asked", what);
	r = cJSON_CreateObject();
	cJSON_AddStringToObject(r, "cancelling", what);
	ctl_reply_ok(fd, r, -1);
}

/* {"op":"stop","grace_ms":N,"wait":true}: with wait, the reply comes once
 * the VMM has ended and says how (stop_reply); CTL_HOLD when fd is kept
 * for that.  Not while an operation runs: a checkpoint being written or a
 * VM being restored is not cut off half-way. */
static int handle_stop(struct supervisor *s, int fd, const cJSON *req)
{
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(req, "grace_ms");
	bool wait = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "wait"));
	uint64_t grace = SUPERVISOR_STOP_GRACE_MS;

	if (g && (!cJSON_IsNumber(g) || g->valuedouble < 0 || g->valuedouble > SUPERVISOR_STOP_GRACE_MAX_MS)) {
		ctl_reply_error(fd, "stop: grace_ms must be 0 to 3600000");
		return CTL_DONE;
	}
	if (refuse_if_busy(s, fd))
		return CTL_DONE;
	if (g)
		grace = (uint64_t)g->valuedouble;
	request_stop(s, grace);
	if (!wait || s->nstop_waiters == STOP_WAITERS_MAX || s->vmm <= 0) {
		ctl_reply_ok(fd, NULL, -1);
		return CTL_DONE;
	}
	s->stop_waiters[s->nstop_waiters++] = fd;
	return CTL_HOLD;
}

/* Tells every client waiting on a stop how the VM ended. */
static void stop_reply(struct supervisor *s, const char *ended)
{
	for (int i = 0; i < s->nstop_waiters; i++) {
		cJSON *r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "ended", ended);
		cJSON_AddBoolToObject(r, "forced", s->forced);
		ctl_reply_ok(s->stop_waiters[i], r, -1);
		ctl_server_release(&s->srv, s->stop_waiters[i]);
	}
	s->nstop_waiters = 0;
}

static void handle_status(struct supervisor *s, int fd)
{
	cJSON *r = cJSON_CreateObject(), *op = sup_op_json(&s->ops);
	bool owns = false;

	sup_op_active(&s->ops, &owns);
	cJSON_AddStringToObject(r, "state", s->stopping ? "stopping" : "running");
	cJSON_AddNumberToObject(r, "pid", getpid());
	/* A rewind replaces the VMM on the worker: its pid is the worker's. */
	if (!owns)
		cJSON_AddNumberToObject(r, "vmm_pid", s->vmm);
	if (op)
		cJSON_AddItemToObject(r, "operation", op);
	if (s->cgroup.path[0]) {
		cJSON_AddStringToObject(r, "cgroup", s->cgroup.path);
		cJSON_AddStringToObject(r, "cgroup_limits", s->cgroup.limits);
	}
	if (s->cgroup_why[0])
		cJSON_AddStringToObject(r, "cgroup_missing", s->cgroup_why);
	cJSON_AddItemToObject(r, "startup_ms", startup_json(s));
	ctl_reply_ok(fd, r, -1);
}

static int on_request(void *arg, int fd, const cJSON *req)
{
	struct supervisor *s = arg;
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(req, "op");
	bool owns = false;

	if (!cJSON_IsString(op)) {
		ctl_reply_error(fd, "request without an op");
	} else if (!strcmp(op->valuestring, "status")) {
		handle_status(s, fd);
	} else if (!strcmp(op->valuestring, "agent")) {
		/* During a rewind the guest is being replaced: no session. */
		if (!(sup_op_active(&s->ops, &owns) && owns && refuse_if_busy(s, fd)))
			handle_agent(s, fd, req);
	} else if (!strcmp(op->valuestring, "stop")) {
		return handle_stop(s, fd, req);
	} else if (!strcmp(op->valuestring, "cancel")) {
		handle_cancel(s, fd);
	} else if (!strncmp(op->valuestring, "checkpoint", 10) ||
		   !strcmp(op->valuestring, "rewind")) {
		return start_op(s, fd, op->valuestring, req);
	} else if (control_serve_approvals(sup_egress_approvals(s->egress), fd, req)) {
		/* approvals.list / approvals.answer */
	} else {
		ctl_reply_error(fd, "unknown op");
	}
	return CTL_DONE;
}

/* A held client hung up: a stop goes on without it; an operation it
 * asked for is cancelled (at its next safe point). */
static void on_gone(void *arg, int fd)
{
	struct supervisor *s = arg;
	char what[SUP_OP_NAME_MAX];

	if (fd == s->op_client) {
		s->op_client = -1;
		if (sup_op_cancel(&s->ops, what, sizeof(what)))
			log_info("%s: its client went away: cancelled", what);
	}
	for (int i = 0; i < s->nstop_waiters; i++)
		if (s->stop_waiters[i] == fd)
			s->stop_waiters[i--] = s->stop_waiters[--s->nstop_waiters];
}

static void say_ready(int ready_fd, const char *err)
{
	char line[512];

	if (ready_fd < 0)
		return;
	snprintf(line, sizeof(line), err ? "error: %s\n" : "ok\n", err);
	write_all(ready_fd, line, strlen(line));
	close(ready_fd);
}

static int setup(struct supervisor *s, const char *name, const char **why)
{
	struct audit_opts ao = {0};
	int err;

	/* Another user must not have made or opened any of these. */
	if (s->template_dir)
		err = private_dir(s->state_dir, false, s->why, sizeof(s->why));
	else
		err = sandbox_state_dir_private(name, false, s->state_dir, sizeof(s->state_dir), s->why,
						sizeof(s->why));
	if (err) {
		*why = err == -ENOENT ? "no such sandbox (see 'kosa8 ps')" : s->why;
		return err;
	}
	if ((err = sandbox_cfg_load(s->state_dir, &s->cfg))) {
		*why = "no such sandbox (see 'kosa8 ps')";
		return err;
	}
	if ((err = sandbox_run_dir_private(s->cfg.name, true, s->run_dir, sizeof(s->run_dir), s->why,
					   sizeof(s->why)))) {
		*why = s->why;
		return err;
	}
	/* vm/ and checkpoints/ live inside those: the VMM's own (vmm_files.h). */
	if ((err = sandbox_path(s->log_path, sizeof(s->log_path), s->state_dir, SUPERVISOR_LOG_FILE)) ||
	    (err = sandbox_path(s->vm_dir, sizeof(s->vm_dir), s->run_dir, "vm")) ||
	    (err = mkdir_p(s->vm_dir, 0700)) ||
	    (err = sandbox_path(s->vsock_path, sizeof(s->vsock_path), s->vm_dir, "vsock.sock")) ||
	    (err = sandbox_path(s->vm_ctl, sizeof(s->vm_ctl), s->vm_dir, "ctl.sock")) ||
	    (err = sandbox_path(s->ckpt_dir, sizeof(s->ckpt_dir), s->state_dir, CKPT_DIR)) ||
	    (err = mkdir_p(s->ckpt_dir, 0700)) ||
	    (err = sandbox_path(s->control_path, sizeof(s->control_path), s->run_dir, "control.sock"))) {
		*why = "cannot create the sandbox's runtime directory";
		return err;
	}
	if ((err = audit_log_open(&ao, &s->audit))) {
		*why = "cannot open the audit log (see 'kosa8 audit verify')";
		return err;
	}
	startup_mark(s, &s->start.audit);
	s->listen_fd = control_listen(s->control_path);
	if (s->listen_fd < 0) {
		*why = "cannot listen on the control socket";
		return s->listen_fd;
	}
	/* Before the VMM: the guest's first DNS query must find a listener.
	 * A bad policy or a missing secret stops the start here. */
	if ((err = start_egress(s))) {
		*why = s->why;
		return err;
	}
	startup_mark(s, &s->start.egress);
	return 0;
}

/* How the VM ended, for the audit record and a waiting `kosa8 stop`. */
static const char *stop_kind(const struct supervisor *s, int status)
{
	if (s->forced)
		return "forced";
	if (WIFEXITED(status) && WEXITSTATUS(status) == VM_EXIT_POWEROFF)
		return s->stopping ? "guest_shutdown" : "guest_poweroff";
	return "vmm_exit";
}

static void vmm_gone(struct supervisor *s, int status)
{
	cJSON *d = cJSON_CreateObject();
	const char *ended = stop_kind(s, status);
	char what[160];

	console_done(s);
	vmm_ended(status, "while running", what, sizeof(what));
	cJSON_AddStringToObject(d, "ended", ended);
	if (s->stopping)
		cJSON_AddNumberToObject(d, "stop_ms", (double)(mono_ms() - s->stop_ms));
	cJSON_AddNumberToObject(d, "vmm_exit", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	if (WIFSIGNALED(status))
		cJSON_AddNumberToObject(d, "vmm_signal", WTERMSIG(status));
	cJSON_AddStringToObject(d, "vmm_status", what);
	report_seccomp(s, status, d);
	audit(s, "supervisor", "sandbox.stop", d);
	s->vmm = -1;
	stop_reply(s, ended);
}

/* The guest had its chance: the host ends the VM (never the guest's
 * choice, issue 23 item 6). */
static void force_end(struct supervisor *s)
{
	bool refused = atomic_load(&agent_refused);

	s->forced = true;
	log_warn("stop: %s; ending the VM from the host",
		 refused ? "the guest agent did not take the request" :
			   "the guest did not power off within the grace period");
	vmm_gone(s, end_vmm(s));
}

static int poll_timeout(const struct supervisor *s)
{
	uint64_t now = mono_ms();

	if (!s->stopping)
		return 1000;
	return s->stop_deadline <= now ? 0 : (int)(s->stop_deadline - now < 1000 ? s->stop_deadline - now : 1000);
}

/* A guest can make us log (at a bounded rate) for as long as it runs:
 * supervisor.log is kept like console.log. */
static void bound_own_log(struct supervisor *s)
{
	int err = console_log_bound_stderr(s->log_path, 0);

	if (err < 0 && !s->log_unbounded) {
		s->log_unbounded = true;
		log_err("cannot rotate %s: %s; it is no longer bounded", s->log_path, strerror(-err));
	}
}

/* Whether the VMM has ended (not while a rewind replaces it). */
static void check_vmm(struct supervisor *s)
{
	bool owns = false, active = sup_op_active(&s->ops, &owns);
	int status = 0;

	if (owns || s->vmm <= 0)
		return;
	if (waitpid(s->vmm, &status, WNOHANG) == s->vmm)
		vmm_gone(s, status);
	else if (s->stopping && !active &&
		 (mono_ms() >= s->stop_deadline || atomic_load(&agent_refused)))
		force_end(s);
}

/* Serves every client at once until the VM has ended and no operation is
 * left: one poll over the listener, each client, SIGCHLD and the worker. */
static void event_loop(struct supervisor *s)
{
	struct pollfd p[CTL_POLLFDS + 2];
	char buf[64];

	s->srv.listen_fd = s->listen_fd;
	while (sup_op_active(&s->ops, NULL) || s->vmm > 0) {
		int n = ctl_server_pollfds(&s->srv, p);
		p[n++] = (struct pollfd){.fd = s->sigchld_pipe[0], .events = POLLIN};
		p[n++] = (struct pollfd){.fd = sup_op_done_fd(&s->ops), .events = POLLIN};
		if (poll(p, (nfds_t)n, ctl_server_timeout(&s->srv, poll_timeout(s))) < 0 && errno != EINTR)
			break;
		if (p[n - 2].revents & POLLIN)
			while (read(s->sigchld_pipe[0], buf, sizeof(buf)) > 0)
				;
		if (p[n - 1].revents & POLLIN)
			op_finished(s);
		check_vmm(s);
		ctl_server_serve(&s->srv, p, n - 2);
		op_progress(s);
		sup_egress_tick(s->egress);
		if (s->audit)
			audit_log_tick(s->audit);
		bound_own_log(s);
	}
}

/* What a fork's first record says: where it came from, and the log's
 * signed head at that moment (its parent's history up to the fork). */
static cJSON *fork_origin(struct supervisor *s, const struct ckpt_fork *f)
{
	struct audit_head head;
	char root[2 * sizeof(head.root) + 1];
	cJSON *d = cJSON_CreateObject();

	cJSON_AddStringToObject(d, "fork_of", f->parent);
	cJSON_AddStringToObject(d, "checkpoint", f->id);
	if (s->audit && audit_log_sign_head(s->audit, &head) == 0) {
		audit_hex(head.root, sizeof(head.root), root);
		cJSON_AddNumberToObject(d, "parent_head_size", (double)head.size);
		cJSON_AddStringToObject(d, "parent_head_root", root);
	}
	return d;
}

/* A fork's first start ran from its parent's checkpoint: it takes its own
 * identity; later starts boot its own disk. */
static int fork_started(struct supervisor *s, struct agent_client *c, const struct ckpt_fork *f)
{
	char host[AP_HOSTNAME_MAX + 1];
	cJSON *d;
	int err;

	if ((err = guest_fixup(s, c, true)))
		return err;
	ap_hostname_from(s->cfg.name, host);
	d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "hostname", host);
	audit(s, "supervisor", "sandbox.fork_identity", d);
	if ((err = ckpt_fork_done(s->state_dir)))
		log_err("fork.json: %s", strerror(-err));
	return 0;
}

/* A supervisor before us was killed while its VMM wrote a checkpoint
 * (ckpt_recover_top): said in the log and the audit. */
static int recover_checkpoint(struct supervisor *s)
{
	char err[600] = "";
	int rc = ckpt_recover_top(s->state_dir, err, sizeof(err));

	if (rc < 0)
		log_err("recovering from an interrupted checkpoint: %s", err);
	if (rc == 1) {
		log_warn("the last checkpoint was interrupted (its supervisor ended while the VMM "
			 "wrote it): starting on the disk as it was then, as after a power loss");
		audit(s, "supervisor", "checkpoint.recovered", NULL);
	}
	return rc;
}

/* What a VMM killed mid-checkpoint left (ckpt_sweep_tmp): ours alone to
 * remove, as we own the sandbox and start its VMM only after this. */
static void sweep_tmp_checkpoints(struct supervisor *s)
{
	uint64_t freed;
	int n = ckpt_sweep_tmp(s->state_dir, &freed);

	if (n > 0)
		log_info("removed %d unfinished checkpoint folder%s (cN.tmp-PID) of a VMM that was "
			 "killed while writing, %.1f MiB", n, n == 1 ? "" : "s", (double)freed / MiB);
	else if (n < 0)
		log_warn("cannot sweep unfinished checkpoint folders: %s", strerror(-n));
}

/* Before anything of the sandbox is touched: one supervisor per sandbox. */
static int own_sandbox(struct supervisor *s, const char *name)
{
	struct sandbox_owner who;
	int err = s->template_dir ? snprintf(s->state_dir, sizeof(s->state_dir), "%s", s->template_dir) >=
					    (int)sizeof(s->state_dir) ? -ENAMETOOLONG : 0 :
				    sandbox_state_dir(name, s->state_dir, sizeof(s->state_dir));

	s->owner_fd = err ? err : sandbox_owner_take(s->state_dir, "supervisor", &who);
	if (s->owner_fd == -EBUSY)
		sandbox_owner_describe(name, &who, s->why, sizeof(s->why));
	else if (s->owner_fd < 0)
		snprintf(s->why, sizeof(s->why), "cannot lock sandbox '%s': %s", name,
			 s->owner_fd == -ENOENT ? "no such sandbox" : strerror(-s->owner_fd));
	return s->owner_fd < 0 ? s->owner_fd : 0;
}

/* A template's guest has booted: checkpoint c1 of it is the template
 * (the VMM writes all of its memory, supervisor/template.h), then the VMM
 * ends; the CLI that asked seals the files. */
static int make_template(struct supervisor *s, int ready_fd, const char **why)
{
	static const char line[] = "progress checkpoint\n";
	struct ckpt_meta m;
	char err[600] = "";
	int rc, status;

	if (ready_fd >= 0)
		write_all(ready_fd, line, sizeof(line) - 1);
	rc = ckpt_take(s->state_dir, s->vm_ctl, "template", &m, NULL, err, sizeof(err));
	if (rc) {
		snprintf(s->why, sizeof(s->why), "checkpointing the template: %.440s", err);
		*why = s->why;
		return rc;
	}
	ckpt_meta_free(&m);
	audit(s, "supervisor", "template.made", NULL);
	status = end_vmm(s);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != VM_EXIT_HOST_STOP)
		log_warn("the template's VMM did not end cleanly (status 0x%x)", (unsigned)status);
	return 0;
}

static int supervise(const char *self, const char *name, const char *template_dir, int ready_fd,
		     int memfd)
{
	struct supervisor s;
	struct ckpt_fork fork;
	struct agent_client *agent;
	const char *why = NULL, *restore = NULL;
	struct sigaction sa;
	int err;

	/* Secrets, the audit key and the CA key live here: before any is read. */
	if ((err = process_hold_secrets()))
		return err;
	memset(&s, 0, sizeof(s));
	s.listen_fd = -1;
	s.vmm = -1;
	s.op_client = -1;
	s.self = self;
	s.template_dir = template_dir;
	if (!name)
		name = template_dir; /* for messages only */
	s.handler = (struct ctl_handler){.request = on_request, .gone = on_gone, .arg = &s};
	ctl_server_init(&s.srv, -1, &s.handler);
	/* Only the VMM of the first start gets it (spawn_vmm). */
	s.restore_memfd = memfd >= 0 && fcntl(memfd, F_SETFD, FD_CLOEXEC) == 0 ? memfd : -1;
	s.start.t0 = mono_ms();
	if (pipe2(s.sigchld_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	sigchld_wfd = s.sigchld_pipe[1];
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	if ((err = own_sandbox(&s, name))) {
		log_err("%s", s.why);
		say_ready(ready_fd, s.why);
		return err;
	}
	if ((err = setup(&s, name, &why)))
		goto fail;
	if ((err = ckpt_fork_load(s.state_dir, &fork)) == 0) {
		restore = fork.restore;
	} else if (err != -ENOENT) {
		why = "the sandbox's fork.json is damaged";
		goto fail;
	}
	audit(&s, "supervisor", "sandbox.start", restore ? fork_origin(&s, &fork) : NULL);
	setup_cgroup(&s, ready_fd);
	startup_mark(&s, &s.start.setup);
	if ((err = sup_op_init(&s.ops))) {
		why = "cannot start the supervisor's worker thread";
		goto fail;
	}
	sweep_tmp_checkpoints(&s);
	if (!restore && (err = recover_checkpoint(&s)) < 0) {
		why = "the sandbox's disk cannot be recovered from an interrupted checkpoint";
		goto fail;
	}
	if (!restore && s.restore_memfd >= 0) {
		close(s.restore_memfd); /* not a fork's first start: nothing to map */
		s.restore_memfd = -1;
	}
	err = spawn_vmm(&s, restore, NULL);
	if (s.restore_memfd >= 0) {
		close(s.restore_memfd);
		s.restore_memfd = -1;
	}
	if (err) {
		why = "cannot start the VMM";
		goto fail;
	}
	startup_mark(&s, &s.start.vmm);
	err = wait_for_agent(&s, &agent);
	startup_mark(&s, &s.start.agent);
	if (err) {
		why = err == -ECHILD ? s.why :
				       "the guest agent did not answer in time (see 'kosa8 logs')";
		goto fail;
	}
	if (s.template_dir) {
		agent_client_close(agent);
		if (!(err = make_template(&s, ready_fd, &why))) {
			say_ready(ready_fd, NULL);
			ready_fd = -1;
		}
		goto fail;
	}
	if (restore && (err = fork_started(&s, agent, &fork))) {
		agent_client_close(agent);
		why = "the fork did not take its own identity (see the supervisor log)";
		goto fail;
	}
	startup_mark(&s, &s.start.identity);
	install_guest_ca(&s, agent, sup_egress_ca_pem(s.egress));
	agent_client_close(agent);
	startup_mark(&s, &s.start.ca);
	if ((err = copy_workspace(&s))) {
		why = "copying the workspace into the sandbox failed";
		goto fail;
	}
	startup_mark(&s, &s.start.workspace);
	log_info("ready after %llu ms: set-up %llu, VMM started %llu, agent answered %llu, "
		 "identity %llu, CA %llu, workspace %llu", (unsigned long long)s.start.workspace,
		 (unsigned long long)s.start.setup, (unsigned long long)s.start.vmm,
		 (unsigned long long)s.start.agent, (unsigned long long)s.start.identity,
		 (unsigned long long)s.start.ca, (unsigned long long)s.start.workspace);
	say_ready(ready_fd, NULL);
	ready_fd = -1;
	event_loop(&s);
	err = 0;
fail:
	if (err) {
		log_err("%s", why);
		say_ready(ready_fd, why);
		if (s.vmm > 0) {
			kill(s.vmm, SIGKILL);
			waitpid(s.vmm, NULL, 0);
		}
		console_done(&s);
		cJSON *d = cJSON_CreateObject();
		cJSON_AddStringToObject(d, "error", why);
		audit(&s, "supervisor", "sandbox.start_failed", d);
	}
	/* An operation still running has a VMM that is gone to talk to. */
	sup_op_fini(&s.ops);
	stop_reply(&s, "vmm_exit");
	ctl_server_close(&s.srv);
	/* After the VMM: no guest connection is left to start. */
	vmm_cgroup_remove(&s.cgroup);
	sup_egress_stop(s.egress);
	if (s.audit) {
		audit_log_sign_head(s.audit, NULL);
		audit_log_close(s.audit);
	}
	if (s.listen_fd >= 0) {
		close(s.listen_fd);
		unlink(s.control_path);
	}
	unlink(s.vsock_path);
	rmdir(s.vm_dir);
	rmdir(s.run_dir);
	close(s.owner_fd);
	return err;
}

int supervisor_main(const char *self, const char *name, int ready_fd, int memfd)
{
	return supervise(self, name, NULL, ready_fd, memfd);
}

int supervisor_make_template(const char *self, const char *dir, int ready_fd)
{
	return supervise(self, NULL, dir, ready_fd, -1);
}
