/* Another local user against a user's sandboxes (issue 23 item 8), for
 * real: this test runs as root and plays both users, the victim as
 * nobody (a forked child that drops to uid 65534 and runs the kosa8
 * binary), the other user as root.
 *   - without XDG_RUNTIME_DIR the run directory is /tmp/kosa8-UID, which
 *     another user can make first: the supervisor refuses it;
 *   - a control socket served by another user: the client refuses it
 *     (SO_PEERCRED) and sends nothing; the supervisor refuses a client of
 *     another user;
 *   - a state directory another user made or opened: create refuses it;
 *   - private_dir's own cases (link, mode, owner). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/util.h"
#include "sandbox/owner.h"
#include "supervisor/control.h"
#include "sandbox/sandbox.h"

#define NOBODY 65534

static char kosa8[PATH_MAX + 16], dir[64], rundir[64];
static int serial_fd = -1;

static int setup(void **state)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return -1;
	self[n] = '\0';
	/* /tmp/kosa8-65534 is one path for the whole machine: the release and
	 * sanitizer builds of this test run side by side in `make unit`, so
	 * each takes this lock for its whole run (it goes when the process
	 * ends, however it ends). */
	serial_fd = open("/tmp/kosa8-test-local-user.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (serial_fd < 0 || flock(serial_fd, LOCK_EX))
		return -1;
	/* <build>/tests/test_local_user -> <build>/kosa8 */
	*strrchr(self, '/') = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(kosa8, sizeof(kosa8), "%s/kosa8", self);
	snprintf(dir, sizeof(dir), "/tmp/k8local-XXXXXX");
	if (!mkdtemp(dir) || chmod(dir, 0755))
		return -1;
	snprintf(rundir, sizeof(rundir), "/tmp/kosa8-%d", NOBODY);
	return 0;
}

static int teardown(void **state)
{
	char cmd[200];

	snprintf(cmd, sizeof(cmd), "rm -rf %s %s", dir, rundir);
	return system(cmd) == 0 ? 0 : -1;
}

static void become_nobody(void)
{
	if (setgroups(0, NULL) || setresgid(NOBODY, NOBODY, NOBODY) || setresuid(NOBODY, NOBODY, NOBODY))
		_exit(120);
}

/* Runs `kosa8 ARGS` as nobody, with nobody's own state and config under
 * dir/nb and no XDG_RUNTIME_DIR; its output in out.  Exit status. */
static int kosa8_as_nobody(char *out, size_t outlen, const char *const *args)
{
	char env[3][128], *argv[16];
	int p[2], status, n = 0;
	size_t got = 0;
	ssize_t r;
	pid_t pid;

	snprintf(env[0], sizeof(env[0]), "KOSA8_STATE_DIR=%s/nb/state", dir);
	snprintf(env[1], sizeof(env[1]), "KOSA8_CONFIG_DIR=%s/nb/cfg", dir);
	snprintf(env[2], sizeof(env[2]), "HOME=%s/nb", dir);
	argv[n++] = kosa8;
	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *envp[] = {env[0], env[1], env[2], "KOSA8_KERNEL=/dev/null", "PATH=/usr/bin:/bin",
				"KOSA8_MACHINE=never", NULL};
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		become_nobody();
		execve(kosa8, argv, envp);
		_exit(127);
	}
	close(p[1]);
	while (got + 1 < outlen && (r = read(p[0], out + got, outlen - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = '\0';
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* nobody's own sandbox "sb" on disk (its config only: enough for stop and
 * start to find it). */
static void nobody_sandbox(void)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct sandbox_cfg c = {.name = "sb", .kernel = "/nonexistent", .image = "/nonexistent",
					.mem = 64 << 20, .cpus = 1, .cid = 3};
		char p[PATH_MAX];
		become_nobody();
		setenv("KOSA8_STATE_DIR", "", 1);
		snprintf(p, sizeof(p), "%s/nb/state", dir);
		setenv("KOSA8_STATE_DIR", p, 1);
		if (sandbox_state_dir("sb", p, sizeof(p)) || mkdir_p(p, 0700) || sandbox_cfg_save(p, &c))
			_exit(1);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* No /tmp/kosa8-65534 left by an earlier case. */
static void no_rundir(void)
{
	char cmd[100];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", rundir);
	assert_int_equal(system(cmd), 0);
}

static void make_nobody_home(void)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/nb", dir);
	mkdir(p, 0700);
	assert_int_equal(chown(p, NOBODY, NOBODY), 0);
}

/* Root's server on path: answers one request the way a supervisor would
 * ("ok") and says whether it got one. */
struct server {
	int fd;
	pid_t pid;
	int got[2];
};

static void serve_as_root(struct server *s, const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};

	assert_true(strlen(path) < sizeof(a.sun_path));
	memcpy(a.sun_path, path, strlen(path) + 1);
	s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s->fd >= 0);
	assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(chmod(path, 0666), 0);
	assert_int_equal(listen(s->fd, 4), 0);
	assert_int_equal(pipe(s->got), 0);
	s->pid = fork();
	assert_true(s->pid >= 0);
	if (s->pid == 0) {
		char buf[256];
		close(s->got[0]);
		for (;;) {
			int c = accept(s->fd, NULL, NULL);
			if (c < 0)
				_exit(0);
			struct pollfd pf = {.fd = c, .events = POLLIN};
			if (poll(&pf, 1, 2000) == 1 && read(c, buf, sizeof(buf)) > 0) {
				(void)!write(s->got[1], "r", 1);
				const char *ok = "{\"ok\":true,\"ended\":\"guest_shutdown\",\"forced\":false}\n";
				(void)!write(c, ok, strlen(ok));
				unlink(path); /* a stop then finds the supervisor gone */
			}
			close(c);
		}
	}
	close(s->got[1]);
}

/* Whether root's server was sent a request; stops it. */
static bool server_stop(struct server *s)
{
	char b;
	bool got;
	int fl = fcntl(s->got[0], F_GETFL);

	fcntl(s->got[0], F_SETFL, fl | O_NONBLOCK);
	got = read(s->got[0], &b, 1) == 1;
	kill(s->pid, SIGKILL);
	waitpid(s->pid, NULL, 0);
	close(s->got[0]);
	close(s->fd);
	return got;
}

/* Another user made /tmp/kosa8-65534 and serves a socket where nobody's
 * supervisor would: nobody's `kosa8 stop` must not talk to it. */
static void test_client_refuses_foreign_socket(void **state)
{
	const char *const stop[] = {"stop", "sb", NULL};
	char path[PATH_MAX + 16], sub[PATH_MAX], out[2048];
	struct server s;
	int rc, lk;

	make_nobody_home();
	nobody_sandbox();
	no_rundir();
	mkdir(rundir, 0755);
	snprintf(sub, sizeof(sub), "%s/sb", rundir);
	mkdir(sub, 0755);
	snprintf(path, sizeof(path), "%s/control.sock", sub);
	unlink(path);
	serve_as_root(&s, path);
	/* nobody's sandbox is running (its owner lock is held), so stop goes
	 * to the socket where its supervisor would be. */
	snprintf(sub, sizeof(sub), "%s/nb/state/sandboxes/sb/" SANDBOX_OWNER_FILE, dir);
	lk = open(sub, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(lk >= 0 && fchown(lk, 65534, 65534) == 0 && flock(lk, LOCK_EX) == 0);
	rc = kosa8_as_nobody(out, sizeof(out), stop);
	close(lk);
	unlink(sub);
	snprintf(sub, sizeof(sub), "%s/sb", rundir);
	print_message("kosa8 stop as nobody: %d: %s", rc, out);
	assert_false(server_stop(&s));
	assert_int_not_equal(rc, 0);
	assert_non_null(strstr(out, "served by uid 0"));
	unlink(path);
	rmdir(sub);
	rmdir(rundir);
}

/* /tmp/kosa8-65534 made by root, open to all: nobody's supervisor must
 * refuse to put its sockets there. */
static void test_supervisor_refuses_foreign_run_dir(void **state)
{
	const char *const start[] = {"start", "sb", NULL};
	char out[4096];
	int rc;

	make_nobody_home();
	nobody_sandbox();
	no_rundir();
	mkdir(rundir, 0777);
	chmod(rundir, 0777);
	rc = kosa8_as_nobody(out, sizeof(out), start);
	print_message("kosa8 start as nobody: %d: %s", rc, out);
	assert_int_not_equal(rc, 0);
	assert_non_null(strstr(out, rundir));
	assert_non_null(strstr(out, "belongs to uid 0"));
	rmdir(rundir);
}

/* nobody's state folder with a sandboxes/ another user made, open to
 * all: create refuses to put a sandbox there. */
static void test_create_refuses_foreign_state_dir(void **state)
{
	const char *const create[] = {"create", "--name", "x", "--image", "/etc/hostname", NULL};
	char p[PATH_MAX], out[4096], x[PATH_MAX + 8];
	struct stat st;
	int rc;

	make_nobody_home();
	snprintf(p, sizeof(p), "%s/nb/state", dir);
	mkdir(p, 0700);
	assert_int_equal(chown(p, NOBODY, NOBODY), 0);
	snprintf(p, sizeof(p), "%s/nb/state/sandboxes", dir);
	snprintf(x, sizeof(x), "%s/x", p);
	rmdir(x);
	if (mkdir(p, 0777) && errno == EEXIST) {
		char cmd[PATH_MAX + 16];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", p);
		assert_int_equal(system(cmd), 0);
		assert_int_equal(mkdir(p, 0777), 0);
	}
	assert_int_equal(chown(p, 0, 0), 0);
	assert_int_equal(chmod(p, 0777), 0);
	rc = kosa8_as_nobody(out, sizeof(out), create);
	print_message("kosa8 create as nobody: %d: %s", rc, out);
	assert_int_not_equal(rc, 0);
	assert_non_null(strstr(out, "belongs to uid 0"));
	assert_int_equal(stat(x, &st), -1);
}

/* The supervisor's side: a client of another user is turned away. */
static void test_supervisor_refuses_foreign_client(void **state)
{
	char path[128];
	int lfd, status;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/ctl.sock", dir);
	lfd = control_listen(path);
	assert_true(lfd >= 0);
	assert_int_equal(chmod(path, 0666), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		cJSON *req = cJSON_CreateObject(), *reply = NULL;
		become_nobody();
		cJSON_AddStringToObject(req, "op", "status");
		_exit(control_call(path, req, &reply, NULL, 3000) == 0 ? 1 : 0);
	}
	assert_int_equal(control_accept(lfd), -EPERM);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(lfd);
	unlink(path);
}

static void test_private_dir_cases(void **state)
{
	char p[128], l[128], why[512];

	snprintf(p, sizeof(p), "%s/priv", dir);
	assert_int_equal(private_dir(p, true, why, sizeof(why)), 0);
	assert_int_equal(private_dir(p, false, why, sizeof(why)), 0);
	chmod(p, 0750);
	assert_int_equal(private_dir(p, false, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "chmod 700"));
	chmod(p, 0700);
	assert_int_equal(chown(p, NOBODY, NOBODY), 0);
	assert_int_equal(private_dir(p, false, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "belongs to uid 65534"));
	snprintf(l, sizeof(l), "%s/link", dir);
	assert_int_equal(symlink(p, l), 0);
	assert_int_equal(private_dir(l, true, why, sizeof(why)), -ELOOP);
	assert_int_equal(private_dir(l, false, why, sizeof(why)), -ELOOP);
	unlink(l);
	rmdir(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_refuses_foreign_socket),
		cmocka_unit_test(test_supervisor_refuses_foreign_run_dir),
		cmocka_unit_test(test_create_refuses_foreign_state_dir),
		cmocka_unit_test(test_supervisor_refuses_foreign_client),
		cmocka_unit_test(test_private_dir_cases),
	};

	if (geteuid() != 0) {
		/* Playing two users needs root (CI runs unit tests as root). */
		print_message("test_local_user: skipped, needs root\n");
		return 0;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
