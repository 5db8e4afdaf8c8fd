#include "supervisor/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentproto/client.h"
#include "audit/audit.h"
#include "common/log.h"
#include "common/util.h"
#include "supervisor/control.h"
#include "supervisor/egress.h"
#include "supervisor/sandbox.h"
#include "vmm/seccomp.h"

struct supervisor {
	struct sandbox_cfg cfg;
	char state_dir[PATH_MAX], run_dir[PATH_MAX];
	char vm_dir[PATH_MAX];  /* run_dir/vm: all the jailed VMM sees of the host */
	char vsock_path[PATH_MAX], control_path[PATH_MAX];
	struct audit_log *audit;
	struct sup_egress *egress;
	char why[512];             /* a start-up failure, for `kosa8 start` */
	pid_t vmm;
	int listen_fd;
	int sigchld_pipe[2];
	bool stopping;
};

static int sigchld_wfd = -1;

static void on_sigchld(int sig)
{
	char b = 1;

	if (write(sigchld_wfd, &b, 1) < 0) {
		/* full: a wake-up is pending already */
	}
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
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
 * (console.log); the supervisor repeats them in its log and the audit. */
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
	cJSON_AddStringToObject(details, "vmm_seccomp", last[0] ? last : "unknown");
}

static int spawn_vmm(struct supervisor *s, const char *self)
{
	char disk[PATH_MAX], console[PATH_MAX], mem[32], cpus[16], cmdline[256];
	int out;

	sandbox_path(disk, sizeof(disk), s->state_dir, "disk.k8d");
	sandbox_path(console, sizeof(console), s->state_dir, "console.log");
	snprintf(mem, sizeof(mem), "%lluK", (unsigned long long)(s->cfg.mem / 1024));
	snprintf(cpus, sizeof(cpus), "%d", s->cfg.cpus);
	snprintf(cmdline, sizeof(cmdline),
		 "root=/dev/vda rw rootfstype=ext4 init=/usr/sbin/kosa8-agent kosa8.hostname=%s kosa8.net=on quiet",
		 s->cfg.name);
	out = open(console, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (out < 0)
		return -errno;
	s->vmm = fork();
	if (s->vmm < 0) {
		close(out);
		return -errno;
	}
	if (s->vmm == 0) {
		int null = open("/dev/null", O_RDONLY);
		dup2(null, 0);
		dup2(out, 1);
		dup2(out, 2);
		/* Jailed: the VMM sees the kernel, the disk's layers and the
		 * vm/ directory of vsock sockets, nothing else (vmm/jail.h). */
		execl(self, self, "vm", "--no-emulate", "--jail", "--kernel", s->cfg.kernel, "--disk", disk,
		      "--vsock", s->vsock_path, "--mem", mem, "--cpus", cpus, "--cmdline", cmdline,
		      (char *)NULL);
		_exit(127);
	}
	close(out);
	return 0;
}

/* Polls the agent until it answers a ping or the VMM dies. */
static int wait_for_agent(struct supervisor *s)
{
	uint64_t deadline = now_ms() + SUPERVISOR_BOOT_TIMEOUT_MS;

	while (now_ms() < deadline) {
		struct agent_client *c = NULL;
		struct agent_ping p;
		int status;

		if (waitpid(s->vmm, &status, WNOHANG) == s->vmm) {
			s->vmm = -1;
			return -ECHILD;
		}
		if (agent_client_connect_vsock_uds(s->vsock_path, AGENT_VSOCK_PORT, &c) == 0 &&
		    agent_ping(c, &p) == 0) {
			agent_client_close(c);
			return 0;
		}
		if (c)
			agent_client_close(c);
		usleep(200 * 1000);
	}
	return -ETIMEDOUT;
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

#define GUEST_CA_DIR "/usr/local/share/ca-certificates"
#define GUEST_CA_NAME "kosa8-sandbox.crt"
#define GUEST_CA_BUNDLE_DIR "/etc/ssl/certs"
#define GUEST_CA_BUNDLE "ca-certificates.crt"

static int write_text(const char *path, const char *text, const char *mode)
{
	FILE *f = fopen(path, mode);
	int err = 0;

	if (!f)
		return -errno;
	if (fputs(text, f) == EOF)
		err = -EIO;
	if (fclose(f) == EOF && !err)
		err = -errno;
	return err;
}

/* Puts the sandbox CA's certificate where Debian keeps local CAs and into
 * the bundle curl, git, python and OpenSSL read (what update-ca-certificates
 * would do, without running it), through the agent's file API.  The bundle
 * is fetched, the certificate appended unless present, and put back. */
static int install_guest_ca(struct supervisor *s, const char *pem)
{
	char tmp[] = "/tmp/kosa8-ca-XXXXXX", ca[64], dir[64], bundle[96];
	struct agent_client *c = NULL;
	struct ap_tree_stats st;
	uint8_t *text = NULL;
	size_t len = 0;
	int err;

	if (!mkdtemp(tmp))
		return -errno;
	snprintf(ca, sizeof(ca), "%s/" GUEST_CA_NAME, tmp);
	snprintf(dir, sizeof(dir), "%s/b", tmp);
	snprintf(bundle, sizeof(bundle), "%s/" GUEST_CA_BUNDLE, dir);
	/* put keeps modes: every guest user reads the trust store. */
	if ((err = write_text(ca, pem, "w")) || (chmod(ca, 0644) < 0 && (err = -errno)) ||
	    (err = agent_client_connect_vsock_uds(s->vsock_path, AGENT_VSOCK_PORT, &c)) ||
	    (err = agent_put_tree(c, ca, GUEST_CA_DIR, "root", &st)) ||
	    (err = mkdir_p(dir, 0700)) ||
	    (err = agent_get_tree(c, GUEST_CA_BUNDLE_DIR "/" GUEST_CA_BUNDLE, dir, &st)) ||
	    (err = read_file(bundle, 64 * MiB, &text, &len)))
		goto out;
	/* Restarts find it there already. */
	if (!memmem(text, len, pem, strlen(pem))) {
		if ((len && text[len - 1] != '\n' && (err = write_text(bundle, "\n", "a"))) ||
		    (err = write_text(bundle, pem, "a")) || (chmod(bundle, 0644) < 0 && (err = -errno)) ||
		    (err = agent_put_tree(c, bundle, GUEST_CA_BUNDLE_DIR, "root", &st)))
			goto out;
	}
out:
	if (err)
		log_err("installing the sandbox CA in the guest: %s",
			c ? agent_client_error(c) : strerror(-err));
	if (c)
		agent_client_close(c);
	free(text);
	unlink(bundle);
	unlink(ca);
	rmdir(dir);
	rmdir(tmp);
	return err;
}

static void reply_error(int fd, const char *msg)
{
	cJSON *r = cJSON_CreateObject();

	cJSON_AddBoolToObject(r, "ok", false);
	cJSON_AddStringToObject(r, "error", msg);
	control_send(fd, r, -1);
	cJSON_Delete(r);
}

static void reply_ok(int fd, cJSON *r, int pass_fd)
{
	if (!r)
		r = cJSON_CreateObject();
	cJSON_AddBoolToObject(r, "ok", true);
	control_send(fd, r, pass_fd);
	cJSON_Delete(r);
}

/* Connects to the agent for a client and audits what it says it will do. */
static void handle_agent(struct supervisor *s, int fd, cJSON *req)
{
	const cJSON *what = cJSON_GetObjectItemCaseSensitive(req, "what");
	int afd = agent_vsock_uds_connect(s->vsock_path, AGENT_VSOCK_PORT);

	if (afd < 0) {
		reply_error(fd, afd == -ECONNREFUSED ? "the guest agent is not listening" :
						       "the sandbox's vsock device is not answering");
		return;
	}
	/* The CLI says what the session is for (exec argv, cp paths): audited. */
	audit(s, "user", "agent.session", cJSON_IsObject(what) ? cJSON_Duplicate(what, true) : NULL);
	/* Every command gets the secrets' placeholders, never their values. */
	cJSON *r = cJSON_CreateObject(), *env = cJSON_AddArrayToObject(r, "env");
	for (const char *const *e = sup_egress_guest_env(s->egress); *e; e++)
		cJSON_AddItemToArray(env, cJSON_CreateString(*e));
	reply_ok(fd, r, afd);
	close(afd);
}

static void request_stop(struct supervisor *s)
{
	struct agent_client *c = NULL;

	if (s->stopping || s->vmm <= 0)
		return;
	s->stopping = true;
	/* Ask the guest to power off cleanly (it syncs its disks first). */
	if (agent_client_connect_vsock_uds(s->vsock_path, AGENT_VSOCK_PORT, &c) == 0)
		agent_shutdown(c);
	else
		kill(s->vmm, SIGTERM);
	if (c)
		agent_client_close(c);
}

static void handle_client(struct supervisor *s, int fd)
{
	cJSON *req = NULL;
	const cJSON *op;

	if (control_recv(fd, &req, 5000) < 0)
		goto out;
	op = cJSON_GetObjectItemCaseSensitive(req, "op");
	if (!cJSON_IsString(op)) {
		reply_error(fd, "request without an op");
	} else if (!strcmp(op->valuestring, "status")) {
		cJSON *r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "state", s->stopping ? "stopping" : "running");
		cJSON_AddNumberToObject(r, "pid", getpid());
		cJSON_AddNumberToObject(r, "vmm_pid", s->vmm);
		reply_ok(fd, r, -1);
	} else if (!strcmp(op->valuestring, "agent")) {
		handle_agent(s, fd, req);
	} else if (!strcmp(op->valuestring, "stop")) {
		request_stop(s);
		reply_ok(fd, NULL, -1);
	} else if (control_serve_approvals(sup_egress_approvals(s->egress), fd, req)) {
		/* approvals.list / approvals.answer */
	} else {
		reply_error(fd, "unknown op");
	}
out:
	cJSON_Delete(req);
	close(fd);
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

	if ((err = sandbox_state_dir(name, s->state_dir, sizeof(s->state_dir))) ||
	    (err = sandbox_cfg_load(s->state_dir, &s->cfg))) {
		*why = "no such sandbox (see 'kosa8 ps')";
		return err;
	}
	if ((err = sandbox_run_dir(name, s->run_dir, sizeof(s->run_dir))) ||
	    (err = mkdir_p(s->run_dir, 0700)) ||
	    (err = sandbox_path(s->vm_dir, sizeof(s->vm_dir), s->run_dir, "vm")) ||
	    (err = mkdir_p(s->vm_dir, 0700)) ||
	    (err = sandbox_path(s->vsock_path, sizeof(s->vsock_path), s->vm_dir, "vsock.sock")) ||
	    (err = sandbox_path(s->control_path, sizeof(s->control_path), s->run_dir, "control.sock"))) {
		*why = "cannot create the sandbox's runtime directory";
		return err;
	}
	if ((err = audit_log_open(&ao, &s->audit))) {
		*why = "cannot open the audit log (see 'kosa8 audit verify')";
		return err;
	}
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
	return 0;
}

static void event_loop(struct supervisor *s)
{
	int status = 0;
	char buf[64];

	while (s->vmm > 0) {
		struct pollfd p[2] = {{.fd = s->listen_fd, .events = POLLIN},
				      {.fd = s->sigchld_pipe[0], .events = POLLIN}};
		if (poll(p, 2, 1000) < 0 && errno != EINTR)
			break;
		if (p[1].revents & POLLIN)
			while (read(s->sigchld_pipe[0], buf, sizeof(buf)) > 0)
				;
		if (waitpid(s->vmm, &status, WNOHANG) == s->vmm) {
			cJSON *d = cJSON_CreateObject();
			cJSON_AddNumberToObject(d, "vmm_exit", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
			if (WIFSIGNALED(status))
				cJSON_AddNumberToObject(d, "vmm_signal", WTERMSIG(status));
			report_seccomp(s, status, d);
			audit(s, "supervisor", "sandbox.stop", d);
			s->vmm = -1;
			break;
		}
		if (p[0].revents & POLLIN) {
			int fd = control_accept(s->listen_fd);
			if (fd >= 0)
				handle_client(s, fd);
		}
		if (s->audit)
			audit_log_tick(s->audit);
	}
}

int supervisor_main(const char *self, const char *name, int ready_fd)
{
	struct supervisor s;
	const char *why = NULL;
	struct sigaction sa;
	int err;

	memset(&s, 0, sizeof(s));
	s.listen_fd = -1;
	s.vmm = -1;
	if (pipe2(s.sigchld_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	sigchld_wfd = s.sigchld_pipe[1];
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	if ((err = setup(&s, name, &why)))
		goto fail;
	audit(&s, "supervisor", "sandbox.start", NULL);
	if ((err = spawn_vmm(&s, self))) {
		why = "cannot start the VMM";
		goto fail;
	}
	err = wait_for_agent(&s);
	if (err) {
		why = err == -ECHILD ? "the VM stopped while booting (see 'kosa8 logs')" :
				       "the guest agent did not answer in time (see 'kosa8 logs')";
		goto fail;
	}
	if ((err = install_guest_ca(&s, sup_egress_ca_pem(s.egress)))) {
		why = "installing the sandbox's CA certificate in the guest failed (see the supervisor log)";
		goto fail;
	}
	if ((err = copy_workspace(&s))) {
		why = "copying the workspace into the sandbox failed";
		goto fail;
	}
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
		cJSON *d = cJSON_CreateObject();
		cJSON_AddStringToObject(d, "error", why);
		audit(&s, "supervisor", "sandbox.start_failed", d);
	}
	/* After the VMM: no guest connection is left to start. */
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
	return err;
}
