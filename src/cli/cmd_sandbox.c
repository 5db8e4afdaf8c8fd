/* The sandbox commands people use, docker/podman style: run, create, start,
 * stop, rm, ps, exec, shell, cp, logs.  The work happens in the sandbox's
 * supervisor (src/supervisor/); these commands talk to it. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "agentproto/client.h"
#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/termsafe.h"
#include "common/util.h"
#include "disk/disk.h"
#include "proxy/policy.h"
#include "proxy/secrets.h"
#include "sandbox/owner.h"
#include "supervisor/ckpt_ops.h"
#include "supervisor/console_log.h"
#include "supervisor/control.h"
#include "sandbox/sandbox.h"
#include "supervisor/supervisor.h"

#define DEFAULT_MEM CLI_SANDBOX_MEM
#define START_TIMEOUT_MS (SUPERVISOR_BOOT_TIMEOUT_MS + 60 * 1000)
/* A supervisor asked to stop has its VMM power off, then at worst killed. */
#define STOP_WAIT_MS (60 * 1000)
/* `ps`, and the busy part of a refusal: a supervisor answers `status`
 * at once even while it runs a checkpoint; one this slow is stuck. */
#define PS_STATUS_MS 1000

/* Errors quote what a guest named (files, link targets, the agent's own
 * messages), so they reach the terminal escaped like its console. */


/* ---- where things are ---- */

static int control_path(const char *name, char *buf, size_t len)
{
	char dir[PATH_MAX];
	int err = sandbox_run_dir(name, dir, sizeof(dir));

	return err ? err : sandbox_path(buf, len, dir, "control.sock");
}

/* Whether the sandbox is owned (sandbox/owner.h): the held lock says so,
 * however long its supervisor takes to answer.  why gets what to tell. */
static bool sandbox_owned(const char *name, char *why, size_t len)
{
	struct sandbox_owner who;
	char dir[PATH_MAX];

	if (sandbox_state_dir(name, dir, sizeof(dir)) || sandbox_owner_probe(dir, &who) != 1)
		return false;
	sandbox_owner_describe(name, &who, why, len);
	return true;
}

int cli_unanswered(const char *cmd, const char *name, int err)
{
	char why[320];

	if (sandbox_owned(name, why, sizeof(why)))
		return cli_fail(cmd, "%s but did not answer (%s): it is busy, try again", why,
				strerror(-err));
	return cli_fail(cmd, "sandbox '%s' is not running (%s)", name, strerror(-err));
}

/* The owner's `status` reply within ms, or NULL. */
static cJSON *sandbox_status(const char *name, int ms)
{
	char path[PATH_MAX];
	cJSON *req, *reply = NULL;

	if (control_path(name, path, sizeof(path)))
		return NULL;
	req = cJSON_CreateObject();
	cJSON_AddStringToObject(req, "op", "status");
	if (control_call(path, req, &reply, NULL, ms) ||
	    !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok"))) {
		cJSON_Delete(reply);
		reply = NULL;
	}
	cJSON_Delete(req);
	return reply;
}

/* " and busy: checkpoint c3 running for 41 s" appended to why when the
 * owner says a long operation runs (sup_op.h), so that a refusal names it. */
static void owner_busy(const char *name, char *why, size_t len)
{
	cJSON *st = sandbox_status(name, PS_STATUS_MS);
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(st, "operation");
	const char *what = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(op, "what"));
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(op, "running_ms");
	size_t n = strlen(why);

	if (what && cJSON_IsNumber(ms) && n < len)
		snprintf(why + n, len - n, " and busy: %.48s running for %.0f s", what,
			 ms->valuedouble / 1000);
	cJSON_Delete(st);
}

/* ---- create ---- */

struct create_opts {
	const char *name, *image, *workspace, *policy;
	const char *allow[SANDBOX_ALLOW_MAX], *secrets[SANDBOX_SECRETS_MAX];
	int nallow, nsecrets;
	uint64_t mem;
	int cpus;
	bool rm, cold;
};

static int parse_create_opts(const char *cmd, int argc, char **argv, struct create_opts *o)
{
	static const struct option opts[] = {
		{"name", required_argument, NULL, 'n'}, {"image", required_argument, NULL, 'i'},
		{"workspace", required_argument, NULL, 'w'}, {"mem", required_argument, NULL, 'm'},
		{"cpus", required_argument, NULL, 'c'}, {"rm", no_argument, NULL, 'r'},
		{"allow", required_argument, NULL, 'a'}, {"policy", required_argument, NULL, 'p'},
		{"secret", required_argument, NULL, 's'}, {"cold", no_argument, NULL, 'C'},
		{NULL, 0, NULL, 0},
	};
	int c;

	memset(o, 0, sizeof(*o));
	o->mem = DEFAULT_MEM;
	o->cpus = CLI_SANDBOX_CPUS;
	o->image = "default";
	/* KOSA8_COLD=1: every new sandbox boots, as with --cold. */
	o->cold = getenv("KOSA8_COLD") && strcmp(getenv("KOSA8_COLD"), "0");
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'n': o->name = optarg; break;
		case 'i': o->image = optarg; break;
		case 'w': o->workspace = optarg; break;
		case 'r': o->rm = true; break;
		case 'C': o->cold = true; break;
		case 'p': o->policy = optarg; break;
		case 'a':
			if (o->nallow == SANDBOX_ALLOW_MAX)
				return cli_fail(cmd, "at most %d --allow rules (put more in a --policy file)", SANDBOX_ALLOW_MAX);
			o->allow[o->nallow++] = optarg;
			break;
		case 's':
			if (o->nsecrets == SANDBOX_SECRETS_MAX)
				return cli_fail(cmd, "at most %d --secret names", SANDBOX_SECRETS_MAX);
			o->secrets[o->nsecrets++] = optarg;
			break;
		case 'm':
			if (parse_size(optarg, &o->mem) < 0 || o->mem < 64 * MiB)
				return cli_fail(cmd, "--mem takes a size of at least 64M, such as 1G (got '%s')", optarg);
			break;
		case 'c':
			o->cpus = atoi(optarg);
			if (o->cpus < 1 || o->cpus > 64)
				return cli_fail(cmd, "--cpus takes a number from 1 to 64 (got '%s')", optarg);
			break;
		default:
			return cli_fail(cmd, "unknown option '%s' (see 'kosa8 --help')", argv[optind - 1]);
		}
	}
	return 0;
}

/* --allow, --policy, --secret: checked now, so that a typo fails the
 * create rather than the start; kept in the sandbox's config (allow,
 * secrets) and state folder (policy). */
static int check_egress(const char *cmd, const struct create_opts *o, struct sandbox_cfg *cfg)
{
	struct policy *p = NULL;
	struct policy_error pe;
	int err = 0;

	if (policy_new(&p) < 0)
		return cli_fail(cmd, "%s", "out of memory");
	if (o->policy && policy_add_file(p, o->policy, &pe) < 0) {
		err = pe.line ? cli_fail(cmd, "policy error in %s line %u: %s", pe.file, pe.line, pe.reason) :
				cli_fail(cmd, "policy error in %s: %s", pe.file, pe.reason);
	}
	for (int i = 0; !err && i < o->nallow; i++) {
		if (strlen(o->allow[i]) >= SANDBOX_ALLOW_LEN || policy_add_allow(p, o->allow[i], &pe) < 0)
			err = cli_fail(cmd, "--allow %s: %s", o->allow[i],
				   strlen(o->allow[i]) >= SANDBOX_ALLOW_LEN ? "too long" : pe.reason);
		else
			snprintf(cfg->allow[cfg->nallow++], SANDBOX_ALLOW_LEN, "%s", o->allow[i]);
	}
	policy_free(p);
	for (int i = 0; !err && i < o->nsecrets; i++) {
		struct secret sec;
		if (!secret_name_valid(o->secrets[i]))
			return cli_fail(cmd, "--secret %s: not a secret name (letters, digits, _)", o->secrets[i]);
		if (secret_read(o->secrets[i], false, &sec) < 0)
			return cli_fail(cmd, "--secret %s: no such secret (add it with 'kosa8 secret add')", o->secrets[i]);
		snprintf(cfg->secrets[cfg->nsecrets++], SANDBOX_SECRET_LEN, "%s", o->secrets[i]);
	}
	return err;
}

/* The --policy file, as it is now, becomes the sandbox's own policy. */
int cli_copy_policy(const char *from, const char *dir)
{
	char path[PATH_MAX + 16];
	uint8_t *buf = NULL;
	size_t len = 0;
	int fd, err;

	if ((err = read_file(from, 1 * MiB, &buf, &len)))
		return err;
	snprintf(path, sizeof(path), "%s/policy", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, buf, len) < 0)
		err = -errno;
	if (fd >= 0 && close(fd) < 0 && !err)
		err = -errno;
	free(buf);
	return err;
}

static void random_name(char *buf, size_t len)
{
	uint8_t r[4] = {0};

	if (getrandom(r, sizeof(r), 0) < 0)
		memset(r, 0x42, sizeof(r));
	snprintf(buf, len, "sb-%02x%02x%02x%02x", r[0], r[1], r[2], r[3]);
}

/* The kernel, image, memory and vCPUs a new sandbox (or template) boots
 * with. $KOSA8_KERNEL picks another guest kernel; --image takes a name or
 * a file. */
static int guest_inputs(const char *cmd, const struct create_opts *o, struct sandbox_cfg *cfg)
{
	const char *kenv = getenv("KOSA8_KERNEL");
	struct stat st;

	if (kenv && *kenv) {
		if (!realpath(kenv, cfg->kernel))
			return cli_fail(cmd, "KOSA8_KERNEL=%s: no such file", kenv);
	} else if (kosa8_guest_kernel(cfg->kernel, sizeof(cfg->kernel)) < 0) {
		return cli_fail(cmd, "%s", "the guest kernel is not built: run 'make kernel' (or guest/kernel/build.sh)");
	}
	if (strchr(o->image, '/') && stat(o->image, &st) == 0 && S_ISREG(st.st_mode)) {
		if (!realpath(o->image, cfg->image))
			return cli_fail(cmd, "image '%s' cannot be resolved", o->image);
	} else if (cli_image_lookup(o->image, cfg->image, sizeof(cfg->image)) < 0) {
		int rc = strcmp(o->image, "default") ? -ENOENT :
			 cli_image_from_source(cmd, o->image, cfg->image, sizeof(cfg->image));
		if (rc == -ENOENT)
			return cli_fail(cmd, "image '%s' is not built or unknown: see 'kosa8 image ls', build it with "
				"'kosa8 image build' or import one with 'kosa8 image import' (or set KOSA8_IMAGE_SOURCE)",
				o->image);
		if (rc)
			return 1;
	}
	cfg->mem = o->mem;
	cfg->cpus = o->cpus;
	return 0;
}

/* The new sandbox's disk: a delta over the image (cold), or over the
 * template's frozen disk with fork.json saying to restore its checkpoint
 * (the fork path: ckpt_fork_prepare, which pins the template). */
static int first_disk(const struct sandbox_cfg *cfg, const struct cli_template *tpl,
		      const char *dir, char *err, size_t errlen)
{
	char disk[PATH_MAX];

	if (tpl->lock >= 0)
		return ckpt_fork_prepare(tpl->dir, tpl->name, TEMPLATE_CKPT, dir, cfg->name, err, errlen);
	if (sandbox_path(disk, sizeof(disk), dir, "disk.k8d") < 0)
		return snprintf(err, errlen, "path too long"), -ENAMETOOLONG;
	return disk_create(disk, cfg->image, NULL, err, errlen);
}

static int create_in(const char *cmd, const struct create_opts *o, char *name, size_t nlen,
		     struct cli_template *tpl)
{
	struct sandbox_cfg cfg;
	char dir[PATH_MAX], err_msg[DISK_ERR_LEN + 600], why[PATH_MAX + 128];
	struct stat st;
	int lk, rc;

	memset(&cfg, 0, sizeof(cfg));
	if (o->name)
		snprintf(name, nlen, "%s", o->name);
	else
		random_name(name, nlen);
	if (!sandbox_name_valid(name))
		return cli_fail(cmd, "bad name '%s': use 1-63 of a-z 0-9 . _ -, starting with a letter or digit", name);
	if (sandbox_state_dir(name, dir, sizeof(dir)) < 0)
		return cli_fail(cmd, "cannot find the state directory for '%s'", name);
	if (stat(dir, &st) == 0)
		return cli_fail(cmd, "a sandbox named '%s' exists already (kosa8 rm it, or pick another --name)", name);
	if (o->workspace) {
		if (!realpath(o->workspace, cfg.workspace) || stat(cfg.workspace, &st) < 0 ||
		    !S_ISDIR(st.st_mode))
			return cli_fail(cmd, "workspace '%s' is not an existing directory", o->workspace);
	}
	if (guest_inputs(cmd, o, &cfg) || check_egress(cmd, o, &cfg))
		return 1;
	snprintf(cfg.name, sizeof(cfg.name), "%s", name);
	cfg.created = (int64_t)time(NULL);
	/* The state directories must be the user's alone before anything is
	 * made in them (sandboxes/ may not exist yet: the lock makes it). */
	if ((rc = sandbox_state_dir_private(name, false, dir, sizeof(dir), why, sizeof(why))) &&
	    rc != -ENOENT)
		return cli_fail(cmd, "%s", why);
	/* Before the sandboxes' lock: making a template boots a guest. */
	if (!o->cold && cli_template_ensure(cmd, &cfg, tpl))
		return 1;
	/* The CID is the sandbox's own once its sandbox.json is written. */
	if ((lk = sandbox_create_lock()) < 0)
		return cli_fail(cmd, "cannot lock the sandboxes' directory: %s", strerror(-lk));
	if (!(cfg.cid = sandbox_cid_pick())) {
		close(lk);
		return cli_fail(cmd, "no vsock CID left: there are %u sandboxes (kosa8 rm some)",
				SANDBOX_MAX_SANDBOXES);
	}
	if (mkdir(dir, 0700) < 0) {
		rc = errno;
		close(lk);
		return cli_fail(cmd, rc == EEXIST ? "a sandbox named '%s' exists already" :
				"cannot create the sandbox '%s'", name);
	}
	if (sandbox_state_dir_private(name, false, dir, sizeof(dir), why, sizeof(why)) < 0) {
		rmdir(dir);
		close(lk);
		return cli_fail(cmd, "%s", why);
	}
	if ((rc = first_disk(&cfg, tpl, dir, err_msg, sizeof(err_msg))) < 0 ||
	    sandbox_cfg_save(dir, &cfg) < 0) {
		cli_remove_tree(dir);
		close(lk);
		return cli_fail(cmd, "cannot create the sandbox's disk: %s", rc < 0 ? err_msg : "cannot write sandbox.json");
	}
	close(lk);
	if (o->policy && cli_copy_policy(o->policy, dir) < 0) {
		cli_remove_tree(dir);
		return cli_fail(cmd, "cannot copy the policy %s into the sandbox", o->policy);
	}
	return 0;
}

/* tpl (may be NULL): which template the sandbox restores, if any. */
static int create_sandbox(const char *cmd, const struct create_opts *o, char *name, size_t nlen,
			  struct cli_template *tpl)
{
	struct cli_template own;
	int rc;

	if (!tpl)
		tpl = &own;
	tpl->lock = -1;
	rc = create_in(cmd, o, name, nlen, tpl);
	if (tpl->lock >= 0)
		close(tpl->lock);
	return rc;
}

int cmd_create(int argc, char **argv)
{
	struct create_opts o;
	char name[SANDBOX_NAME_MAX + 1];

	if (parse_create_opts("create", argc, argv, &o) || optind != argc)
		return 2;
	if (create_sandbox("create", &o, name, sizeof(name), NULL))
		return 1;
	printf("%s\n", name);
	return 0;
}

/* ---- start / stop ---- */

/* The supervisor's last line ("ok" or "error: ..."), within
 * START_TIMEOUT_MS: its length, or -ETIMEDOUT.  "warning: ..." lines
 * before it go to stderr as they come. */
static int read_ready(const char *cmd, int fd, char *line, size_t len)
{
	uint64_t deadline = mono_ms() + START_TIMEOUT_MS;
	size_t n = 0;

	line[0] = 0;
	while (n + 1 < len) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		uint64_t now = mono_ms();
		int r = now < deadline ? poll(&pf, 1, (int)(deadline - now)) : 0;

		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || read(fd, line + n, 1) != 1)
			break;
		if (line[n] != '\n') {
			n++;
			continue;
		}
		line[n] = 0;
		if (strncmp(line, "warning: ", 9) != 0)
			break;
		(void)cli_fail(cmd, "%s", line); /* the message says warning */
		n = 0;
	}
	line[n] = 0;
	return (int)n;
}

int cli_start_sandbox(const char *cmd, const char *name, int memfd)
{
	char self[PATH_MAX], line[512], dir[PATH_MAX], memstr[16], why[PATH_MAX + 128];
	struct sandbox_cfg cfg;
	int p[2], n = 0, err;
	pid_t pid;

	/* The supervisor's log is opened here, in the state directory. */
	if ((err = sandbox_state_dir_private(name, false, dir, sizeof(dir), why, sizeof(why))) && err != -ENOENT)
		return cli_fail(cmd, "%s", why);
	if (err || sandbox_cfg_load(dir, &cfg) < 0)
		return cli_fail(cmd, "no sandbox named '%s' (see 'kosa8 ps')", name);
	if (sandbox_owned(name, line, sizeof(line))) {
		owner_busy(name, line, sizeof(line));
		return cli_fail(cmd, "%s", line);
	}
	if (!realpath("/proc/self/exe", self) || pipe2(p, O_CLOEXEC) < 0)
		return cli_fail(cmd, "%s", strerror(errno));
	pid = fork();
	if (pid < 0)
		return cli_fail(cmd, "%s", strerror(errno));
	if (pid == 0) {
		/* The supervisor: its own session, so it outlives this CLI. */
		char fdstr[16];
		close(p[0]);
		setsid();
		cli_child_stdio_to_log(dir);
		fcntl(p[1], F_SETFD, 0);
		snprintf(fdstr, sizeof(fdstr), "%d", p[1]);
		if (memfd >= 0) {
			fcntl(memfd, F_SETFD, 0);
			snprintf(memstr, sizeof(memstr), "%d", memfd);
		}
		execl(self, self, "__supervise", name, fdstr, memfd >= 0 ? memstr : (char *)NULL,
		      (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	n = read_ready(cmd, p[0], line, sizeof(line));
	close(p[0]);
	waitpid(pid, NULL, WNOHANG);
	if (n == -ETIMEDOUT)
		return cli_fail(cmd, "the supervisor (pid %d) did not say it was ready within %d s (see %s/" SUPERVISOR_LOG_FILE ")",
				(int)pid, START_TIMEOUT_MS / 1000, dir);
	if (strcmp(line, "ok") != 0)
		return cli_fail(cmd, "%s", n > 0 ? line : "the supervisor died while starting (see its log)");
	return 0;
}

int cmd_start(int argc, char **argv)
{
	if (argc != 2)
		return cli_usage_error("start", NULL);
	return cli_start_sandbox("start", argv[1], -1);
}

/* Exit status of a stop the host had to force (the guest did not power
 * off within the grace period, or its agent did not take the request). */
#define STOP_FORCED_STATUS 3

/* Asks the owner to stop: the guest gets grace_ms to power off, then the
 * supervisor ends the VM from the host; the reply says which way it ended
 * (*status: 0 the guest shut down, STOP_FORCED_STATUS forced).  Then waits
 * for the sandbox's lock: the returned descriptor holds it (for rm), or -1
 * after a failure said why. */
static int stop_and_own(const char *cmd, const char *name, const char *role, uint64_t grace_ms,
			int *status)
{
	char path[PATH_MAX], dir[PATH_MAX], why[320];
	struct sandbox_owner who;
	cJSON *req, *reply = NULL;
	const cJSON *ended;
	int err, fd;

	*status = 0;
	if (control_path(name, path, sizeof(path)) < 0 || sandbox_state_dir(name, dir, sizeof(dir)) < 0)
		return cli_fail(cmd, "bad name '%s'", name), -1;
	if (!sandbox_owned(name, why, sizeof(why)))
		return cli_fail(cmd, "sandbox '%s' is not running", name), -1;
	req = cJSON_CreateObject();
	cJSON_AddStringToObject(req, "op", "stop");
	cJSON_AddNumberToObject(req, "grace_ms", (double)grace_ms);
	cJSON_AddBoolToObject(req, "wait", true);
	err = control_call(path, req, &reply, NULL, (int)(grace_ms + SUPERVISOR_STOP_END_MS));
	cJSON_Delete(req);
	ended = cJSON_GetObjectItemCaseSensitive(reply, "ended");
	if (err == -ETIMEDOUT)
		fd = cli_fail(cmd, "%s: its supervisor did not report the VM's end in %llu s", why,
			      (unsigned long long)(grace_ms + SUPERVISOR_STOP_END_MS) / 1000);
	else if (err)
		fd = cli_fail(cmd, "%s, and its supervisor did not answer the stop: %s", why, strerror(-err));
	else if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok")) || !cJSON_IsString(ended))
		fd = cli_fail(cmd, "sandbox '%s': the supervisor refused the stop: %s", name,
			      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(reply, "error")) ?: "no reason given");
	else
		fd = 0;
	/* No grace (rm -f, run --rm) asked for the forced end: not news. */
	if (!fd && grace_ms && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "forced"))) {
		fprintf(stderr, "kosa8 %s: sandbox '%s' did not power off within %llu s: ended by the host (forced)\n",
			cmd, name, (unsigned long long)grace_ms / 1000);
		*status = STOP_FORCED_STATUS;
	}
	cJSON_Delete(reply);
	if (fd)
		return -1;
	/* The lock goes when the supervisor and its VMM have ended. */
	fd = sandbox_owner_wait(dir, role, STOP_WAIT_MS, &who);
	if (fd == -ETIMEDOUT)
		return cli_fail(cmd, "%s: still so %d s after the stop", why, STOP_WAIT_MS / 1000), -1;
	if (fd < 0)
		return cli_fail(cmd, "sandbox '%s': %s", name, strerror(-fd)), -1;
	return fd;
}

/* 0: the guest shut down; STOP_FORCED_STATUS: forced; 1: an error. */
static int stop_sandbox(const char *cmd, const char *name, uint64_t grace_ms)
{
	int status, fd = stop_and_own(cmd, name, "stop", grace_ms, &status);

	if (fd < 0)
		return 1;
	close(fd);
	return status;
}

static int parse_grace(const char *cmd, const char *arg, uint64_t *ms)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(arg, &end, 10);
	if (errno || end == arg || *end || n < 0 || n > SUPERVISOR_STOP_GRACE_MAX_MS / 1000)
		return cli_fail(cmd, "--time takes whole seconds from 0 to %d (got '%s')",
				SUPERVISOR_STOP_GRACE_MAX_MS / 1000, arg);
	*ms = (uint64_t)n * 1000;
	return 0;
}

int cmd_stop(int argc, char **argv)
{
	uint64_t grace = SUPERVISOR_STOP_GRACE_MS;
	int i = 1;

	if (i + 1 < argc && (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--time"))) {
		if (parse_grace("stop", argv[i + 1], &grace))
			return 2;
		i += 2;
	}
	if (argc - i != 1 || argv[i][0] == '-')
		return cli_usage_error("stop", NULL);
	return stop_sandbox("stop", argv[i], grace);
}

/* ---- rm / ps / logs ---- */


/* rm -rf of a sandbox's state directory (depth first, links not followed). */

/* The sandbox's directory moved out of its name (to ".rm-NAME-PID" beside
 * it, which no command lists or finds) while rm holds its lock: no start
 * can take a new lock in it while the tree is removed.  The directory to
 * remove: the new name, or dir itself if it could not be moved. */
static const char *unnamed_dir(const char *dir, const char *name, char *buf, size_t len)
{
	const char *slash = strrchr(dir, '/');
	int n;

	if (!slash)
		return dir;
	n = snprintf(buf, len, "%.*s/.rm-%s-%d", (int)(slash - dir), dir, name, (int)getpid());
	if (n < 0 || (size_t)n >= len || renameat2(AT_FDCWD, dir, AT_FDCWD, buf, RENAME_NOREPLACE) < 0)
		return dir;
	return buf;
}

int cmd_rm(int argc, char **argv)
{
	bool force = argc == 3 && !strcmp(argv[1], "-f");
	const char *name = argv[argc - 1];
	char dir[PATH_MAX], gone[PATH_MAX + 80], child[SANDBOX_NAME_MAX + 1], why[320];
	struct sandbox_owner who;
	struct sandbox_cfg cfg;
	int fd, err;

	if (argc < 2 || argc > 3 || (argc == 3 && !force))
		return cli_usage_error("rm", NULL);
	if (sandbox_state_dir(name, dir, sizeof(dir)) < 0 || sandbox_cfg_load(dir, &cfg) < 0)
		return cli_fail("rm", "no sandbox named '%s'", name);
	/* The tree is walked and deleted by path: nobody else may write in it. */
	if (sandbox_state_dir_private(name, false, dir, sizeof(dir), why, sizeof(why)))
		return cli_fail("rm", "%s", why);
	/* Forks read this sandbox's checkpoint files. */
	if (ckpt_live_fork(dir, NULL, child, sizeof(child)))
		return cli_fail("rm", "sandbox '%s' has forks that run from its checkpoints ('%s'): kosa8 rm them first",
				name, child);
	/* Removed under its lock: no supervisor starts on it meanwhile. */
	fd = sandbox_owner_take(dir, "rm", &who);
	if (fd == -EBUSY && !force) {
		sandbox_owner_describe(name, &who, why, sizeof(why));
		owner_busy(name, why, sizeof(why));
		return cli_fail("rm", "%s: stop it first, or use rm -f", why);
	}
	if (fd == -EBUSY)
		fd = stop_and_own("rm", name, "rm", 0, &err); /* removed anyway: no grace */
	else if (fd < 0)
		return cli_fail("rm", "cannot lock sandbox '%s': %s", name, strerror(-fd));
	if (fd < 0)
		return 1;
	err = cli_remove_tree(unnamed_dir(dir, name, gone, sizeof(gone)));
	close(fd);
	if (err < 0)
		return cli_fail("rm", "cannot remove %s: %s", dir, strerror(-err));
	return 0;
}

struct ps_ctx { bool json, quiet; cJSON *arr; };

/* "running", "stopped", "running (busy)" when the owner does not answer,
 * or "running (checkpoint c3, 41 s)" while it runs a long operation. */
static void ps_state(const cJSON *st, bool owned, char *buf, size_t len)
{
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(st, "operation");
	const char *what = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(op, "what"));
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(op, "running_ms");

	if (!owned)
		snprintf(buf, len, "stopped");
	else if (!st)
		snprintf(buf, len, "running (busy)");
	else if (what && cJSON_IsNumber(ms))
		snprintf(buf, len, "running (%.48s, %.0f s)", what, ms->valuedouble / 1000);
	else
		snprintf(buf, len, "running");
}

static void ps_one(const char *name, void *arg)
{
	struct ps_ctx *ctx = arg;
	char dir[PATH_MAX], why[320], state[96];
	struct sandbox_cfg cfg;
	cJSON *st = NULL;
	bool owned;

	if (sandbox_state_dir(name, dir, sizeof(dir)) < 0 || sandbox_cfg_load(dir, &cfg) < 0)
		return;
	if (ctx->quiet) {
		puts(name);
		return;
	}
	owned = sandbox_owned(name, why, sizeof(why));
	if (owned)
		st = sandbox_status(name, PS_STATUS_MS);
	ps_state(st, owned, state, sizeof(state));
	if (ctx->json) {
		cJSON *o = cJSON_CreateObject(), *op = cJSON_GetObjectItemCaseSensitive(st, "operation");
		cJSON_AddStringToObject(o, "name", name);
		cJSON_AddStringToObject(o, "state", owned ? "running" : "stopped");
		cJSON_AddBoolToObject(o, "busy", owned && (!st || op));
		if (op)
			cJSON_AddItemToObject(o, "operation", cJSON_Duplicate(op, true));
		cJSON_AddNumberToObject(o, "cpus", cfg.cpus);
		cJSON_AddNumberToObject(o, "cid", cfg.cid);
		cJSON_AddNumberToObject(o, "mem", (double)cfg.mem);
		cJSON_AddStringToObject(o, "workspace", cfg.workspace);
		cJSON_AddNumberToObject(o, "created", (double)cfg.created);
		cJSON_AddItemToArray(ctx->arr, o);
	} else {
		printf("%-24s %-14s %4d %6lluM  %s\n", name, state, cfg.cpus,
		       (unsigned long long)(cfg.mem / MiB), cfg.workspace);
	}
	cJSON_Delete(st);
}

int cmd_ps(int argc, char **argv)
{
	struct ps_ctx ctx = {.json = argc == 2 && !strcmp(argv[1], "--json"),
			     .quiet = argc == 2 && (!strcmp(argv[1], "-q") || !strcmp(argv[1], "--quiet"))};

	if (argc > 2 || (argc == 2 && !ctx.json && !ctx.quiet))
		return cli_usage_error("ps", NULL);
	if (ctx.json)
		ctx.arr = cJSON_CreateArray();
	else if (!ctx.quiet)
		printf("%-24s %-14s %4s %7s  %s\n", "NAME", "STATE", "CPUS", "MEM", "WORKSPACE");
	sandbox_list(ps_one, &ctx);
	if (ctx.json) {
		char *s = cJSON_Print(ctx.arr);
		printf("%s\n", s);
		free(s);
		cJSON_Delete(ctx.arr);
	}
	return 0;
}

/* Prints one console log file: the guest wrote every byte, so it is
 * escaped for the terminal unless raw. */
static int print_file(const char *path, bool raw)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), err;

	if (fd < 0)
		return -errno;
	err = term_copy_fd(fd, stdout, TERM_KEEP_LINES, raw);
	close(fd);
	return err;
}

/* The console log is kept bounded (console_log.h): the older part, if
 * any, first. */
int cmd_logs(int argc, char **argv)
{
	char dir[PATH_MAX], path[PATH_MAX], old[PATH_MAX + 8];
	bool raw = argc == 3 && (!strcmp(argv[1], "--raw") || !strcmp(argv[2], "--raw"));
	const char *name = raw && !strcmp(argv[2], "--raw") ? argv[1] : argv[argc - 1];
	int err;

	if (argc != 2 && !raw)
		return cli_usage_error("logs", NULL);
	if (sandbox_state_dir(name, dir, sizeof(dir)) < 0 ||
	    sandbox_path(path, sizeof(path), dir, "console.log") < 0)
		return cli_fail("logs", "no sandbox named '%s'", name);
	snprintf(old, sizeof(old), "%s" CONSOLE_LOG_OLD_SUFFIX, path);
	err = print_file(old, raw);
	if (print_file(path, raw) < 0 && err < 0)
		return cli_fail("logs", "no console log for '%s' (no such sandbox, or never started)", name);
	return 0;
}

/* ---- exec / shell / cp: a session with the guest agent ---- */

/* env (optional) gets what the supervisor says every command needs in its
 * environment (the secrets' placeholders): "NAME=value" strings, malloc'd,
 * NULL-terminated. */
static char **take_env(const cJSON *reply)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(reply, "env"), *v;
	int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0, i = 0;
	char **env = calloc((size_t)n + 1, sizeof(*env));

	if (!env)
		return NULL;
	cJSON_ArrayForEach(v, a)
		if (cJSON_IsString(v) && strchr(v->valuestring, '=') && i < n)
			env[i++] = strdup(v->valuestring);
	return env;
}

static void free_env(char **env)
{
	for (int i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

static int agent_session_env(const char *cmd, const char *name, cJSON *what, struct agent_client **c,
			     char ***env);

static int agent_session(const char *cmd, const char *name, cJSON *what, struct agent_client **c)
{
	return agent_session_env(cmd, name, what, c, NULL);
}

static int agent_session_env(const char *cmd, const char *name, cJSON *what, struct agent_client **c,
			     char ***env)
{
	char path[PATH_MAX];
	cJSON *req = cJSON_CreateObject(), *reply = NULL;
	int fd = -1, err;

	cJSON_AddStringToObject(req, "op", "agent");
	cJSON_AddItemToObject(req, "what", what);
	if (control_path(name, path, sizeof(path)) < 0) {
		cJSON_Delete(req);
		return cli_fail(cmd, "bad name '%s'", name);
	}
	err = control_call(path, req, &reply, &fd, 30000);
	cJSON_Delete(req);
	if (err || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok")) || fd < 0) {
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(reply, "error");
		if (err)
			cli_unanswered(cmd, name, err);
		else
			cli_fail(cmd, "%s", cJSON_IsString(e) ? e->valuestring : "the supervisor refused");
		cJSON_Delete(reply);
		if (fd >= 0)
			close(fd);
		return 1;
	}
	if (env)
		*env = take_env(reply);
	cJSON_Delete(reply);
	if (agent_client_from_fd(fd, c) < 0)
		return cli_fail(cmd, "%s", "the guest agent did not answer");
	return 0;
}

int cli_agent_session(const char *cmd, const char *name, cJSON *what, struct agent_client **c, char ***env)
{
	return agent_session_env(cmd, name, what, c, env);
}

static struct termios saved_tio;
static bool tio_saved;
static int ctl_wfd = -1;

static void restore_tty(void)
{
	if (tio_saved)
		tcsetattr(0, TCSAFLUSH, &saved_tio);
	tio_saved = false;
}

static void on_winch(int sig)
{
	struct winsize ws;

	if (ioctl(0, TIOCGWINSZ, &ws) == 0)
		agent_ctl_resize(ctl_wfd, ws.ws_row, ws.ws_col);
}

static void on_fatal(int sig)
{
	restore_tty();
	signal(sig, SIG_DFL);
	raise(sig);
}

struct exec_opts {
	const char *user, *cwd;
	const char *env[64];
	int nenv;
	int tty; /* -1 auto, 0 no, 1 yes */
};

/* A command that could not be started gives 127 (not found) or 126 (not
 * runnable), as sh(1) and docker do, so scripts can tell it from kosa8's own
 * failures (125).  The agent names the stage that failed; only a failed
 * execve is about the command itself (a missing working directory is also
 * ENOENT). */
static int start_failure_status(int err, const char *msg)
{
	if (strncmp(msg, "executing ", 10))
		return 125;
	if (err == -ENOENT)
		return 127;
	if (err == -EACCES || err == -ENOEXEC)
		return 126;
	return 125;
}

static int run_in_sandbox(const char *cmd, const char *name, const char *const *argv,
			  const struct exec_opts *eo)
{
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	struct agent_client *c = NULL;
	struct agent_exit x;
	struct winsize ws;
	int ctl[2] = {-1, -1}, err, n = 0;
	cJSON *what = cJSON_CreateObject(), *args = cJSON_CreateArray();
	char **senv = NULL;
	const char *env[SANDBOX_SECRETS_MAX + 64 + 1];

	for (int i = 0; argv[i]; i++)
		cJSON_AddItemToArray(args, cJSON_CreateString(argv[i]));
	cJSON_AddStringToObject(what, "kind", "exec");
	cJSON_AddItemToObject(what, "argv", args);
	if (agent_session_env(cmd, name, what, &c, &senv))
		return 125;
	/* The placeholders first: a -e of the same name comes later and wins. */
	for (int i = 0; senv && senv[i] && n < SANDBOX_SECRETS_MAX; i++)
		env[n++] = senv[i];
	for (int i = 0; i < eo->nenv; i++)
		env[n++] = eo->env[i];
	env[n] = NULL;
	o.argv = argv;
	o.env = n ? env : NULL;
	o.cwd = eo->cwd;
	o.user = eo->user;
	o.pty = eo->tty == 1 || (eo->tty == -1 && isatty(0) && isatty(1));
	o.stdin_fd = 0;
	o.stdout_fd = 1;
	o.stderr_fd = 2;
	if (o.pty && ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_row) {
		o.rows = ws.ws_row;
		o.cols = ws.ws_col;
	}
	if (o.pty && isatty(0) && tcgetattr(0, &saved_tio) == 0 && pipe2(ctl, O_CLOEXEC) == 0) {
		struct termios raw = saved_tio;
		tio_saved = true;
		atexit(restore_tty);
		signal(SIGSEGV, on_fatal);
		signal(SIGABRT, on_fatal);
		signal(SIGTERM, on_fatal);
		signal(SIGHUP, on_fatal);
		cfmakeraw(&raw);
		tcsetattr(0, TCSAFLUSH, &raw);
		ctl_wfd = ctl[1];
		o.ctl_fd = ctl[0];
		signal(SIGWINCH, on_winch);
	}
	err = agent_exec(c, &o, &x);
	restore_tty();
	free_env(senv);
	if (err) {
		int status = start_failure_status(err, agent_client_error(c));
		cli_fail(cmd, "%s", agent_client_error(c));
		agent_client_close(c);
		return status;
	}
	agent_client_close(c);
	return x.signaled ? 128 + x.code : x.code;
}

static int parse_exec_opts(const char *cmd, int argc, char **argv, struct exec_opts *eo)
{
	int i = 1;

	memset(eo, 0, sizeof(*eo));
	eo->tty = -1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			return i + 1;
		} else if (!strcmp(a, "-t") || !strcmp(a, "--tty")) {
			eo->tty = 1;
		} else if (!strcmp(a, "-T") || !strcmp(a, "--no-tty")) {
			eo->tty = 0;
		} else if ((!strcmp(a, "-u") || !strcmp(a, "--user")) && i + 1 < argc) {
			eo->user = argv[++i];
		} else if ((!strcmp(a, "-w") || !strcmp(a, "--workdir")) && i + 1 < argc) {
			eo->cwd = argv[++i];
		} else if ((!strcmp(a, "-e") || !strcmp(a, "--env")) && i + 1 < argc && eo->nenv < 63) {
			if (!strchr(argv[i + 1], '='))
				return cli_fail(cmd, "-e takes NAME=VALUE (got '%s')", argv[i + 1]), -1;
			eo->env[eo->nenv++] = argv[++i];
		} else {
			return cli_fail(cmd, "unknown option '%s'", a), -1;
		}
	}
	return i;
}

int cmd_exec(int argc, char **argv)
{
	struct exec_opts eo;
	int i = parse_exec_opts("exec", argc, argv, &eo);

	if (i < 0)
		return 2;
	if (argc - i < 2)
		return cli_usage_error("exec", NULL);
	const char *name = argv[i++];
	if (i < argc && !strcmp(argv[i], "--"))
		i++;
	if (i >= argc)
		return cli_fail("exec", "%s", "no command given"), 2;
	if (!eo.cwd)
		eo.cwd = "/workspace";
	return run_in_sandbox("exec", name, (const char *const *)argv + i, &eo);
}

int cmd_shell(int argc, char **argv)
{
	static const char *const sh[] = {"bash", "-l", NULL};
	struct exec_opts eo;

	if (argc != 2)
		return cli_usage_error("shell", NULL);
	memset(&eo, 0, sizeof(eo));
	eo.tty = 1;
	eo.cwd = "/workspace";
	return run_in_sandbox("shell", argv[1], sh, &eo);
}

/* NAME:PATH names a path in a sandbox; anything else is a host path. */
static bool split_remote(char *arg, char **name, char **path)
{
	char *colon = strchr(arg, ':');

	if (!colon || colon == arg || strchr(arg, '/') < colon)
		return false;
	*colon = '\0';
	if (!sandbox_name_valid(arg)) {
		*colon = ':';
		return false;
	}
	*name = arg;
	*path = colon + 1;
	return true;
}

int cmd_cp(int argc, char **argv)
{
	char *name, *rpath, *name2, *rpath2;
	struct agent_client *c = NULL;
	struct ap_tree_stats st;
	struct gw_opts go;
	bool from, to;
	int err;

	if (argc != 3)
		return cli_usage_error("cp", NULL);
	from = split_remote(argv[1], &name, &rpath);
	to = split_remote(argv[2], &name2, &rpath2);
	if (from == to)
		return cli_fail("cp", "%s", "exactly one side must be NAME:PATH");
	if (from && cli_copy_out_opts("cp", &go))
		return 1;
	cJSON *what = cJSON_CreateObject();
	cJSON_AddStringToObject(what, "kind", from ? "copy_out" : "copy_in");
	cJSON_AddStringToObject(what, "path", from ? rpath : rpath2);
	if (agent_session("cp", from ? name : name2, what, &c))
		return 1;
	memset(&st, 0, sizeof(st));
	if (from) {
		if (mkdir_p(argv[2], 0755) < 0) {
			agent_client_close(c);
			return cli_fail("cp", "cannot create '%s'", argv[2]);
		}
		err = agent_get_tree(c, rpath, argv[2], &go, &st);
	} else {
		err = agent_put_tree(c, argv[1], rpath2, NULL, &st);
	}
	if (err)
		cli_fail("cp", "%s", agent_client_error(c));
	if (from)
		cli_copy_out_report("cp", err, &st);
	agent_client_close(c);
	return err ? 1 : 0;
}

/* ---- run: create + start + exec + stop (+ rm) ---- */

int cmd_run(int argc, char **argv)
{
	struct create_opts o;
	struct exec_opts eo;
	char name[SANDBOX_NAME_MAX + 1];
	int i, status;

	if (parse_create_opts("run", argc, argv, &o))
		return 2;
	i = optind;
	if (i < argc && !strcmp(argv[i], "--"))
		i++;
	if (i >= argc)
		return cli_usage_error("run", NULL);
	struct cli_template tpl;
	uint64_t t0 = mono_ms();

	if (create_sandbox("run", &o, name, sizeof(name), &tpl))
		return 125;
	t0 = mono_ms();
	if (cli_start_sandbox("run", name, -1)) {
		if (o.rm) {
			char *rmv[] = {"rm", name, NULL};
			cmd_rm(2, rmv);
		}
		return 125;
	}
	/* Says which way it started: the time is the start's alone. */
	if (o.cold)
		fprintf(stderr, "kosa8 run: '%s' booted (--cold) in %.1f s\n", name,
			(double)(mono_ms() - t0) / 1000);
	else
		fprintf(stderr, "kosa8 run: '%s' restored from template %s in %.1f s\n", name, tpl.name,
			(double)(mono_ms() - t0) / 1000);
	memset(&eo, 0, sizeof(eo));
	eo.tty = -1;
	eo.cwd = o.workspace ? "/workspace" : NULL;
	status = run_in_sandbox("run", name, (const char *const *)argv + i, &eo);
	if (o.rm) {
		/* Its disk is thrown away: no clean power-off to wait for. */
		char *rmv[] = {"rm", "-f", name, NULL};
		cmd_rm(3, rmv);
	} else {
		stop_sandbox("run", name, SUPERVISOR_STOP_GRACE_MS);
	}
	return status;
}

/* Hidden: the supervisor process (started by `kosa8 start`). */
int cmd_supervise(int argc, char **argv)
{
	char self[PATH_MAX];

	if ((argc != 3 && argc != 4) || !realpath("/proc/self/exe", self))
		return 2;
	return supervisor_main(self, argv[1], atoi(argv[2]), argc == 4 ? atoi(argv[3]) : -1) ? 1 : 0;
}

/* `kosa8 image warm [IMAGE] [--cpus N] [--mem SIZE]`: the template run
 * and create would make on first use, made now. */
int cli_image_warm(int argc, char **argv)
{
	struct create_opts o;
	struct cli_template tpl;
	struct sandbox_cfg cfg;

	if (parse_create_opts("image warm", argc, argv, &o) || argc - optind > 1)
		return 2;
	if (optind < argc)
		o.image = argv[optind];
	memset(&cfg, 0, sizeof(cfg));
	if (guest_inputs("image warm", &o, &cfg) || cli_template_ensure("image warm", &cfg, &tpl))
		return 1;
	close(tpl.lock);
	printf("%s %s\n", tpl.name, tpl.dir);
	return 0;
}
