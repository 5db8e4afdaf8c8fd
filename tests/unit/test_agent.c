/* kosa8-agent end to end: the real agent binary (built next to this test,
 * not as PID 1) listening on a unix socket in a temporary directory, driven
 * by the host client library and, for hostile input, by raw frames. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "end_child.h"

#include "agentproto/client.h"

static char dir[64];
static char sock_path[128];
static pid_t agent_pid;
/* unshare running the PID-1 agent; its namespace dies with it on SIGKILL
 * only if we kill the agent too, so the test tracks both. */
static pid_t pid1_unshare;

/* ---- harness ---- */

static void agent_bin(char *buf, size_t n)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(len > 0);
	exe[len] = 0;
	*strrchr(exe, '/') = 0;   /* .../build/tests */
	*strrchr(exe, '/') = 0;   /* .../build */
	snprintf(buf, n, "%s/kosa8-agent", exe);
}

static pid_t start_agent(const char *sock)
{
	char bin[PATH_MAX + 32], spec[160], log[128];
	agent_bin(bin, sizeof(bin));
	snprintf(spec, sizeof(spec), "unix:%s", sock);
	snprintf(log, sizeof(log), "%s/agent.log", dir);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 2);
		/* Must not leak into commands: their environment is clean. */
		setenv("LEAKVAR", "host-secret", 1);
		execl(bin, bin, "--listen", spec, "--default-user", "root", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {   /* up to 5 s for the socket */
		struct agent_client *c;
		if (agent_client_connect_unix(sock, &c) == 0) {
			agent_client_close(c);
			return pid;
		}
		agent_client_close(c);
		usleep(10000);
	}
	end_child(pid, SIGKILL, false);
	fail_msg("agent did not start (%s)", bin);
	return -1;
}

static struct agent_client *connect_agent(void)
{
	struct agent_client *c;
	int rc = agent_client_connect_unix(sock_path, &c);
	if (rc)
		fail_msg("connect: %s (%s)", strerror(-rc), c ? agent_client_error(c) : "");
	return c;
}

static int memfd(const void *data, size_t len)
{
	int fd = memfd_create("t", MFD_CLOEXEC);
	assert_true(fd >= 0);
	if (len)
		assert_int_equal(write(fd, data, len), (ssize_t)len);
	lseek(fd, 0, SEEK_SET);
	return fd;
}

/* Reads a memfd's whole content as a string (small outputs only). */
static char *slurp(int fd)
{
	static char buf[65536];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	assert_true(n >= 0);
	buf[n] = 0;
	return buf;
}

/* Runs argv with the given options; returns the exec result, output in *out. */
static int run(struct agent_client *c, struct agent_exec_opts *o, struct agent_exit *x, char **out)
{
	int ofd = memfd(NULL, 0);
	o->stdout_fd = ofd;
	o->stderr_fd = o->pty ? -1 : ofd;
	int rc = agent_exec(c, o, x);
	if (rc)
		print_message("exec %s: %s\n", o->argv[0], agent_client_error(c));
	if (out)
		*out = slurp(ofd);
	close(ofd);
	return rc;
}

static int run_sh(const char *script, const char *user, struct agent_exit *x, char **out)
{
	struct agent_client *c = connect_agent();
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	const char *argv[] = { "sh", "-c", script, NULL };
	o.argv = argv;
	o.user = user;
	int rc = run(c, &o, x, out);
	if (rc)
		print_message("exec: %s\n", agent_client_error(c));
	agent_client_close(c);
	return rc;
}

/* ---- exec ---- */

static void test_exit_codes(void **state)
{
	struct agent_exit x;
	char *out;
	assert_int_equal(run_sh("exit 42", NULL, &x, &out), 0);
	assert_false(x.signaled);
	assert_int_equal(x.code, 42);
	assert_int_equal(run_sh("echo out; echo err >&2; true", NULL, &x, &out), 0);
	assert_int_equal(x.code, 0);
	assert_string_equal(out, "out\nerr\n");
	assert_true(x.pid > 0);
}

static void test_signal_death(void **state)
{
	struct agent_exit x;
	assert_int_equal(run_sh("kill -TERM $$", NULL, &x, NULL), 0);
	assert_true(x.signaled);
	assert_int_equal(x.code, SIGTERM);
	assert_int_equal(run_sh("ulimit -c 0; kill -SEGV $$", NULL, &x, NULL), 0);
	assert_true(x.signaled);
	assert_int_equal(x.code, SIGSEGV);
	assert_false(x.core);
	/* With core_pattern "core", a core file lands in the working directory
	 * and the status says so. */
	char pat[64] = "";
	FILE *f = fopen("/proc/sys/kernel/core_pattern", "r");
	if (f && fgets(pat, sizeof(pat), f) && !strcmp(pat, "core\n")) {
		struct agent_client *cc = connect_agent();
		struct agent_exec_opts co = AGENT_EXEC_OPTS_INIT;
		const char *cargv[] = { "sh", "-c", "ulimit -c unlimited; kill -ABRT $$", NULL };
		co.argv = cargv;
		co.cwd = dir;
		assert_int_equal(run(cc, &co, &x, NULL), 0);
		assert_true(x.signaled);
		assert_int_equal(x.code, SIGABRT);
		assert_true(x.core);
		agent_client_close(cc);
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -f %s/core*", dir);
		assert_int_equal(system(cmd), 0);
	} else {
		print_message("core_pattern is not \"core\": core flag not checked\n");
	}
	if (f)
		fclose(f);

	/* A signal sent from the host reaches the process group. */
	struct agent_client *c = connect_agent();
	int ctl[2];
	assert_int_equal(pipe(ctl), 0);
	assert_int_equal(agent_ctl_signal(ctl[1], SIGKILL), 0);
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	const char *argv[] = { "sh", "-c", "sleep 30; exit 3", NULL };
	o.argv = argv;
	o.ctl_fd = ctl[0];
	assert_int_equal(run(c, &o, &x, NULL), 0);
	/* Killed, not "exit 3" after the sleep. */
	assert_true(x.signaled);
	assert_int_equal(x.code, SIGKILL);
	close(ctl[0]);
	close(ctl[1]);
	agent_client_close(c);
}

static void test_env_cwd(void **state)
{
	struct agent_client *c = connect_agent();
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	struct agent_exit x;
	char *out;
	const char *argv[] = { "sh", "-c", "echo \"$FOO|$HOME|$(pwd)|${LEAKVAR:-clean}|$PATH\"", NULL };
	const char *env[] = { "FOO=bar baz", NULL };
	o.argv = argv;
	o.env = env;
	o.cwd = "/usr";
	assert_int_equal(run(c, &o, &x, &out), 0);
	assert_int_equal(x.code, 0);
	assert_string_equal(out, "bar baz|/root|/usr|clean|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n");
	agent_client_close(c);
}

static void test_start_errors(void **state)
{
	struct agent_client *c = connect_agent();
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	struct agent_exit x;
	const char *argv[] = { "true", NULL };
	const char *missing[] = { "no-such-program-kosa8", NULL };
	o.argv = argv;
	o.cwd = "/no/such/dir";
	assert_int_equal(run(c, &o, &x, NULL), -ENOENT);
	assert_non_null(strstr(agent_client_error(c), "working directory /no/such/dir"));
	o.cwd = NULL;
	o.user = "no-such-user-kosa8";
	assert_int_equal(run(c, &o, &x, NULL), -ENOENT);
	assert_non_null(strstr(agent_client_error(c), "does not exist"));
	o.user = NULL;
	o.argv = missing;
	assert_int_equal(run(c, &o, &x, NULL), -ENOENT);
	assert_non_null(strstr(agent_client_error(c), "executing no-such-program-kosa8"));
	/* The session goes on after errors. */
	o.argv = argv;
	assert_int_equal(run(c, &o, &x, NULL), 0);
	assert_int_equal(x.code, 0);
	agent_client_close(c);
}

static void test_users(void **state)
{
	struct agent_exit x;
	char *out;
	assert_int_equal(run_sh("id -u", NULL, &x, &out), 0);
	assert_string_equal(out, "0\n");
	if (geteuid() != 0) {
		print_message("not root: skipping the switch to nobody\n");
		return;
	}
	assert_int_equal(run_sh("id -u; id -g; echo $USER $HOME", "nobody", &x, &out), 0);
	assert_string_equal(out, "65534\n65534\nnobody /nonexistent\n");
	assert_int_equal(run_sh("id -u", "12345", &x, &out), 0);
	assert_string_equal(out, "12345\n");
}

static void test_stdin_roundtrip(void **state)
{
	size_t n = 3 * 1024 * 1024 + 17;   /* several windows' worth */
	uint8_t *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (uint8_t)(i * 2654435761u >> 13);
	struct agent_client *c = connect_agent();
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	struct agent_exit x;
	const char *argv[] = { "cat", NULL };
	int in = memfd(data, n), out = memfd(NULL, 0);
	o.argv = argv;
	o.stdin_fd = in;
	o.stdout_fd = out;
	assert_int_equal(agent_exec(c, &o, &x), 0);
	assert_int_equal(x.code, 0);
	struct stat sb;
	fstat(out, &sb);
	assert_int_equal(sb.st_size, n);
	uint8_t *back = mmap(NULL, n, PROT_READ, MAP_SHARED, out, 0);
	assert_true(back != MAP_FAILED);
	assert_memory_equal(back, data, n);
	munmap(back, n);
	close(in);
	close(out);
	free(data);
	agent_client_close(c);
}

static void test_pty(void **state)
{
	struct agent_client *c = connect_agent();
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	struct agent_exit x;
	char *out;
	const char *argv[] = { "sh", "-c", "test -t 0 && test -t 1 && test -t 2 && echo TTY $TERM; stty size", NULL };
	o.argv = argv;
	o.pty = true;
	o.rows = 33;
	o.cols = 101;
	assert_int_equal(run(c, &o, &x, &out), 0);
	assert_int_equal(x.code, 0);
	assert_string_equal(out, "TTY xterm-256color\r\n33 101\r\n");

	/* A resize while it runs is what stty sees afterwards. */
	int ctl[2];
	assert_int_equal(pipe(ctl), 0);
	assert_int_equal(agent_ctl_resize(ctl[1], 50, 132), 0);
	const char *argv2[] = { "sh", "-c", "sleep 0.5; stty size", NULL };
	o.argv = argv2;
	o.ctl_fd = ctl[0];
	o.term = "vt100";
	assert_int_equal(run(c, &o, &x, &out), 0);
	assert_string_equal(out, "50 132\r\n");

	/* stdin through the terminal, and EOF ends the reader. */
	const char *argv3[] = { "sh", "-c", "read l; echo got:$l; cat; echo end", NULL };
	int in = memfd("hello\nmore\n", 11);
	o.argv = argv3;
	o.ctl_fd = -1;
	o.stdin_fd = in;
	assert_int_equal(run(c, &o, &x, &out), 0);
	assert_int_equal(x.code, 0);
	assert_non_null(strstr(out, "got:hello\r\n"));
	assert_non_null(strstr(out, "end\r\n"));
	close(in);
	close(ctl[0]);
	close(ctl[1]);
	agent_client_close(c);
}

/* ---- 100 MiB through stdout ---- */

struct sink {
	int fd;
	EVP_MD_CTX *sha;
	uint64_t bytes;
	long agent_hwm_kb;   /* peak RSS of the agent's session process */
};

static long session_hwm_kb(void)
{
	char p[96], buf[256];
	snprintf(p, sizeof(p), "/proc/%d/task/%d/children", agent_pid, agent_pid);
	FILE *f = fopen(p, "r");
	long best = 0;
	int child;
	while (f && fscanf(f, "%d", &child) == 1) {
		snprintf(p, sizeof(p), "/proc/%d/status", child);
		FILE *s = fopen(p, "r");
		while (s && fgets(buf, sizeof(buf), s)) {
			long kb;
			if (sscanf(buf, "VmHWM: %ld kB", &kb) == 1 && kb > best)
				best = kb;
		}
		if (s)
			fclose(s);
	}
	if (f)
		fclose(f);
	return best;
}

static void *sink_thread(void *arg)
{
	struct sink *s = arg;
	static uint8_t buf[1 << 16];
	ssize_t n;
	uint64_t next_sample = 0;
	while ((n = read(s->fd, buf, sizeof(buf))) > 0) {
		EVP_DigestUpdate(s->sha, buf, (size_t)n);
		s->bytes += (uint64_t)n;
		if (s->bytes >= next_sample) {
			long kb = session_hwm_kb();
			if (kb > s->agent_hwm_kb)
				s->agent_hwm_kb = kb;
			next_sample += 8 << 20;
		}
	}
	return NULL;
}

static void sha_file(const char *path, uint8_t out[32])
{
	EVP_MD_CTX *sha = EVP_MD_CTX_new();
	static uint8_t buf[1 << 16];
	ssize_t n;
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	EVP_DigestInit_ex(sha, EVP_sha256(), NULL);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		EVP_DigestUpdate(sha, buf, (size_t)n);
	EVP_DigestFinal_ex(sha, out, NULL);
	EVP_MD_CTX_free(sha);
	close(fd);
}

static void test_stdout_100mib(void **state)
{
	char big[160], script[256];
	struct agent_exit x;
	snprintf(big, sizeof(big), "%s/big", dir);
	snprintf(script, sizeof(script), "head -c 104857600 /dev/urandom > %s", big);
	assert_int_equal(run_sh(script, NULL, &x, NULL), 0);
	assert_int_equal(x.code, 0);

	struct agent_client *c = connect_agent();
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	const char *argv[] = { "cat", big, NULL };
	int p[2];
	struct sink s = { 0 };
	pthread_t t;
	struct rusage ru0, ru1;
	struct timespec t0, t1;
	assert_int_equal(pipe(p), 0);
	s.fd = p[0];
	s.sha = EVP_MD_CTX_new();
	EVP_DigestInit_ex(s.sha, EVP_sha256(), NULL);
	assert_int_equal(pthread_create(&t, NULL, sink_thread, &s), 0);
	o.argv = argv;
	o.stdout_fd = p[1];
	getrusage(RUSAGE_SELF, &ru0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(agent_exec(c, &o, &x), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	close(p[1]);
	pthread_join(t, NULL);
	getrusage(RUSAGE_SELF, &ru1);
	close(p[0]);
	assert_int_equal(x.code, 0);
	assert_int_equal(s.bytes, 104857600);
	uint8_t got[32], want[32];
	EVP_DigestFinal_ex(s.sha, got, NULL);
	EVP_MD_CTX_free(s.sha);
	sha_file(big, want);
	assert_memory_equal(got, want, 32);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	print_message("100 MiB through stdout in %.2f s (%.0f MB/s); agent session peak RSS %ld KiB; "
		      "client peak RSS %ld -> %ld KiB\n", secs, 104.8576 / secs, s.agent_hwm_kb,
		      ru0.ru_maxrss, ru1.ru_maxrss);
	/* Bounded memory: far below the 100 MiB that went through. */
	assert_true(s.agent_hwm_kb > 0 && s.agent_hwm_kb < 48 * 1024);
	assert_true(ru1.ru_maxrss - ru0.ru_maxrss < 16 * 1024);
	unlink(big);
	agent_client_close(c);
}

/* ---- trees ---- */

static void write_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	if (len)
		assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void make_tree(const char *root)
{
	char p[256];
	size_t n = 3 * 1024 * 1024 + 5;
	uint8_t *big = malloc(n);
	for (size_t i = 0; i < n; i++)
		big[i] = (uint8_t)(i * 7919 >> 3);
	mkdir(root, 0755);
	snprintf(p, sizeof(p), "%s/a.txt", root);
	write_file(p, "alpha\n", 6, 0644);
	snprintf(p, sizeof(p), "%s/run.sh", root);
	write_file(p, "#!/bin/sh\necho hi\n", 18, 0755);
	snprintf(p, sizeof(p), "%s/secret", root);
	write_file(p, "s", 1, 0600);
	snprintf(p, sizeof(p), "%s/empty", root);
	write_file(p, "", 0, 0644);
	snprintf(p, sizeof(p), "%s/sub", root);
	mkdir(p, 0750);
	snprintf(p, sizeof(p), "%s/sub/deeper", root);
	mkdir(p, 0700);
	snprintf(p, sizeof(p), "%s/sub/deeper/big.bin", root);
	write_file(p, big, n, 0640);
	snprintf(p, sizeof(p), "%s/link", root);
	assert_int_equal(symlink("sub/deeper/big.bin", p), 0);
	snprintf(p, sizeof(p), "%s/sub/up", root);
	assert_int_equal(symlink("../a.txt", p), 0);
	free(big);
}

/* Compares two trees: types, modes, contents (SHA-256), link targets. */
static int compare_trees(const char *a, const char *b, int *count)
{
	char cmd[512];
	/* find lists both sides in the same order; stat gives type and mode. */
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && find . -mindepth 1 | sort | while read f; do stat -c '%%n %%F %%a' \"$f\"; "
		 "if [ -L \"$f\" ]; then readlink \"$f\"; elif [ -f \"$f\" ]; then sha256sum < \"$f\"; fi; done", a);
	FILE *pa = popen(cmd, "r");
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && find . -mindepth 1 | sort | while read f; do stat -c '%%n %%F %%a' \"$f\"; "
		 "if [ -L \"$f\" ]; then readlink \"$f\"; elif [ -f \"$f\" ]; then sha256sum < \"$f\"; fi; done", b);
	FILE *pb = popen(cmd, "r");
	char la[512], lb[512];
	int diff = 0;
	*count = 0;
	for (;;) {
		char *ra = fgets(la, sizeof(la), pa), *rb = fgets(lb, sizeof(lb), pb);
		if (!ra && !rb)
			break;
		if (!ra || !rb || strcmp(la, lb)) {
			print_message("tree differs: '%s' vs '%s'\n", ra ? la : "(end)", rb ? lb : "(end)");
			diff = 1;
			break;
		}
		(*count)++;
	}
	pclose(pa);
	pclose(pb);
	return diff;
}

static void test_put_get_tree(void **state)
{
	char src[128], remote[128], back[128], p[256];
	struct ap_tree_stats st, st2;
	struct stat sb;
	int lines;
	snprintf(src, sizeof(src), "%s/src", dir);
	snprintf(remote, sizeof(remote), "%s/remote/ws", dir);
	snprintf(back, sizeof(back), "%s/back", dir);
	make_tree(src);
	struct agent_client *c = connect_agent();
	const char *user = geteuid() == 0 ? "nobody" : NULL;
	int rc = agent_put_tree(c, src, remote, user, &st);
	if (rc)
		fail_msg("put: %s", agent_client_error(c));
	assert_int_equal(st.entries, 9);
	assert_int_equal(st.bytes, 6 + 18 + 1 + 3 * 1024 * 1024 + 5);
	assert_int_equal(compare_trees(src, remote, &lines), 0);
	assert_true(lines >= 9);
	if (user) {
		snprintf(p, sizeof(p), "%s/sub/deeper/big.bin", remote);
		assert_int_equal(stat(p, &sb), 0);
		assert_int_equal(sb.st_uid, 65534);
		snprintf(p, sizeof(p), "%s/link", remote);
		assert_int_equal(lstat(p, &sb), 0);
		assert_int_equal(sb.st_uid, 65534);
	}
	rc = agent_get_tree(c, remote, back, NULL, &st2);
	if (rc)
		fail_msg("get: %s", agent_client_error(c));
	assert_int_equal(st2.entries, st.entries);
	assert_int_equal(st2.bytes, st.bytes);
	assert_int_equal(compare_trees(src, back, &lines), 0);

	/* A single file. */
	snprintf(p, sizeof(p), "%s/a.txt", src);
	assert_int_equal(agent_put_tree(c, p, remote, NULL, &st), 0);
	assert_int_equal(st.entries, 1);
	snprintf(p, sizeof(p), "%s/a.txt", remote);
	assert_int_equal(agent_get_tree(c, p, back, NULL, &st), 0);
	assert_int_equal(st.bytes, 6);
	/* A local directory that cannot be made: the stream is read to its end
	 * and the session stays usable. */
	assert_true(agent_get_tree(c, remote, "/proc/kosa8-cannot-exist/x", NULL, &st) < 0);
	assert_non_null(strstr(agent_client_error(c), "cannot create"));
	/* Missing remote path: a clear error, the session goes on. */
	assert_int_equal(agent_get_tree(c, "/no/such/kosa8", back, NULL, &st), -ENOENT);
	assert_non_null(strstr(agent_client_error(c), "/no/such/kosa8"));
	struct agent_ping pg;
	assert_int_equal(agent_ping(c, &pg), 0);
	agent_client_close(c);
}

static void test_put_refuses_escapes(void **state)
{
	char src[128], remote[128], p[256];
	struct ap_tree_stats st;
	struct stat sb;
	struct agent_client *c = connect_agent();
	snprintf(src, sizeof(src), "%s/evil", dir);
	snprintf(remote, sizeof(remote), "%s/target", dir);
	mkdir(src, 0755);
	snprintf(p, sizeof(p), "%s/abs", src);
	assert_int_equal(symlink("/etc/passwd", p), 0);
	assert_int_equal(agent_put_tree(c, src, remote, NULL, &st), -EXDEV);
	assert_non_null(strstr(agent_client_error(c), "leaves the destination"));
	unlink(p);
	snprintf(p, sizeof(p), "%s/up", src);
	assert_int_equal(symlink("../../etc", p), 0);
	assert_int_equal(agent_put_tree(c, src, remote, NULL, &st), -EXDEV);
	unlink(p);
	/* A symlink already in the target is not followed. */
	snprintf(p, sizeof(p), "%s/out", remote);
	assert_int_equal(symlink(dir, p), 0);
	snprintf(p, sizeof(p), "%s/out", src);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/out/escaped", src);
	write_file(p, "x", 1, 0644);
	assert_int_equal(agent_put_tree(c, src, remote, NULL, &st), -ENOTDIR);
	snprintf(p, sizeof(p), "%s/escaped", dir);
	assert_int_equal(lstat(p, &sb), -1);
	/* Relative target refused. */
	assert_int_equal(agent_put_tree(c, src, "relative/dir", NULL, &st), -EINVAL);
	/* A local failure after the agent accepted: the stream is ended with
	 * counts that cannot match, the agent answers, the local error wins. */
	assert_int_equal(agent_put_tree(c, "/no/such/local/kosa8", remote, NULL, &st), -ENOENT);
	assert_non_null(strstr(agent_client_error(c), "/no/such/local/kosa8"));
	/* Answered, not timed out: no wall-clock limit here (a loaded CI
	 * machine is slow), the session must simply still work below. */
	/* Still usable. */
	struct agent_ping pg;
	assert_int_equal(agent_ping(c, &pg), 0);
	agent_client_close(c);
}

/* ---- raw protocol ---- */

static int raw_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	strcpy(a.sun_path, sock_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void raw_send(int fd, uint16_t type, uint32_t chan, const void *p, uint32_t len)
{
	uint8_t h[AP_HDR_SIZE];
	ap_hdr_encode(h, type, chan, len);
	assert_int_equal(send(fd, h, sizeof(h), MSG_NOSIGNAL), sizeof(h));
	if (len)
		assert_int_equal(send(fd, p, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Reads one frame (blocking, 5 s timeout); returns its type, or 0 at EOF. */
static int raw_recv(int fd, struct ap_hdr *h, uint8_t *buf, size_t n)
{
	uint8_t hb[AP_HDR_SIZE];
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ssize_t r = recv(fd, hb, sizeof(hb), MSG_WAITALL);
	if (r == 0)
		return 0;
	assert_int_equal(r, sizeof(hb));
	assert_int_equal(ap_hdr_decode(hb, h), 0);
	assert_true(h->len <= n);
	if (h->len)
		assert_int_equal(recv(fd, buf, h->len, MSG_WAITALL), (ssize_t)h->len);
	return h->type;
}

static void raw_hello(int fd, uint16_t major)
{
	uint8_t b[4] = { (uint8_t)major, major >> 8, 0, 0 };
	raw_send(fd, AP_HELLO, 0, b, 4);
}

static int error_code(const uint8_t *buf)
{
	return buf[0] | buf[1] << 8 | buf[2] << 16 | buf[3] << 24;
}

static void test_bad_version(void **state)
{
	static uint8_t buf[AP_MAX_PAYLOAD];
	struct ap_hdr h;
	int fd = raw_connect();
	raw_hello(fd, 2);
	assert_int_equal(raw_recv(fd, &h, buf, sizeof(buf)), AP_ERROR);
	assert_int_equal(error_code(buf), EPROTONOSUPPORT);
	buf[h.len] = 0;
	assert_non_null(strstr((char *)buf + 4, "this agent speaks 1."));
	assert_int_equal(raw_recv(fd, &h, buf, sizeof(buf)), 0);   /* closed */
	close(fd);
	/* A first frame that is not a hello. */
	fd = raw_connect();
	raw_send(fd, AP_PING, 1, NULL, 0);
	assert_int_equal(raw_recv(fd, &h, buf, sizeof(buf)), AP_ERROR);
	assert_int_equal(error_code(buf), EPROTO);
	assert_int_equal(raw_recv(fd, &h, buf, sizeof(buf)), 0);
	close(fd);
}

static void expect_closed_with_error(int fd)
{
	static uint8_t buf[AP_MAX_PAYLOAD];
	struct ap_hdr h;
	assert_int_equal(raw_recv(fd, &h, buf, sizeof(buf)), AP_ERROR);
	assert_int_equal(error_code(buf), EBADMSG);
	assert_int_equal(raw_recv(fd, &h, buf, sizeof(buf)), 0);
	close(fd);
}

static int raw_session(void)
{
	static uint8_t buf[AP_MAX_PAYLOAD];
	struct ap_hdr h;
	int fd = raw_connect();
	raw_hello(fd, AP_VERSION_MAJOR);
	assert_int_equal(raw_recv(fd, &h, buf, sizeof(buf)), AP_HELLO);
	return fd;
}

static void test_malformed_frames(void **state)
{
	struct agent_client *other = connect_agent();
	struct agent_ping pg;
	uint8_t hdr[AP_HDR_SIZE];

	int fd = raw_session();   /* length beyond the maximum */
	ap_hdr_encode(hdr, AP_STDIN, 1, 0xffffffffu);
	assert_int_equal(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), sizeof(hdr));
	expect_closed_with_error(fd);

	fd = raw_session();       /* unknown type */
	ap_hdr_encode(hdr, 999, 1, 0);
	assert_int_equal(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), sizeof(hdr));
	expect_closed_with_error(fd);

	fd = raw_session();       /* well-formed frame out of place */
	raw_send(fd, AP_STDIN, 1, "x", 1);
	expect_closed_with_error(fd);

	fd = raw_session();       /* exec, then stdin beyond the granted window */
	struct ap_wr w;
	ap_wr_init(&w);
	ap_put_tlv_str(&w, AP_T_ARG, "sleep");
	ap_put_tlv_str(&w, AP_T_ARG, "5");
	raw_send(fd, AP_EXEC, 3, w.p, (uint32_t)w.len);
	ap_wr_free(&w);
	static uint8_t junk[AP_MAX_PAYLOAD];
	for (int i = 0; i < 6; i++) {   /* 384 KiB > the 256 KiB window */
		/* The agent may close before the last ones: no asserts here. */
		uint8_t jh[AP_HDR_SIZE];
		ap_hdr_encode(jh, AP_STDIN, 3, sizeof(junk));
		if (send(fd, jh, sizeof(jh), MSG_NOSIGNAL) < 0 || send(fd, junk, sizeof(junk), MSG_NOSIGNAL) < 0)
			break;
	}
	static uint8_t buf[AP_MAX_PAYLOAD];
	struct ap_hdr h;
	int t;
	while ((t = raw_recv(fd, &h, buf, sizeof(buf))) == AP_STARTED || t == AP_WINDOW)
		;
	assert_int_equal(t, AP_ERROR);
	assert_int_equal(error_code(buf), EBADMSG);
	close(fd);

	fd = raw_session();       /* a malformed entry inside a put */
	char target[128];
	snprintf(target, sizeof(target), "%s/rawput", dir);
	ap_wr_init(&w);
	ap_put_tlv_str(&w, AP_T_PATH, target);
	raw_send(fd, AP_PUT, 5, w.p, (uint32_t)w.len);
	ap_wr_free(&w);
	assert_int_equal(raw_recv(fd, &h, buf, sizeof(buf)), AP_OK);
	struct ap_entry e = { .kind = AP_E_FILE, .mode = 0644, .size = 1, .path = "../../escape", .path_len = 12,
			      .target = "" };
	ap_wr_init(&w);
	ap_entry_encode(&w, &e);
	raw_send(fd, AP_ENTRY, 5, w.p, (uint32_t)w.len);
	ap_wr_free(&w);
	raw_send(fd, AP_DATA, 5, "x", 1);
	uint8_t end[12] = { 0 };
	raw_send(fd, AP_TREE_END, 5, end, 12);
	assert_int_equal(raw_recv(fd, &h, buf, sizeof(buf)), AP_ERROR);
	assert_int_equal(error_code(buf), EBADMSG);
	close(fd);

	/* The other session never noticed. */
	assert_int_equal(agent_ping(other, &pg), 0);
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	struct agent_exit x;
	const char *argv[] = { "true", NULL };
	o.argv = argv;
	assert_int_equal(agent_exec(other, &o, &x), 0);
	assert_int_equal(x.code, 0);
	agent_client_close(other);
}

static void test_ping(void **state)
{
	struct agent_client *c = connect_agent();
	struct agent_ping p;
	assert_int_equal(agent_ping(c, &p), 0);
	assert_string_equal(p.version, AP_AGENT_VERSION);
	assert_string_equal(agent_client_agent_version(c), AP_AGENT_VERSION);
	assert_true(p.uptime_ms > 0);
	assert_true(p.agent_uptime_ms <= p.uptime_ms);
	agent_client_close(c);
}

/* ---- several sessions at once ---- */

struct job {
	int n;
	int rc;
	char out[64];
};

static void *job_thread(void *arg)
{
	struct job *j = arg;
	struct agent_client *c;
	char script[1024];
	j->rc = agent_client_connect_unix(sock_path, &c);
	if (j->rc) {
		agent_client_close(c);
		return NULL;
	}
	/* A rendezvous: each command marks its arrival, then waits until all six
	 * arrived.  Run one after another, the first would wait in vain and
	 * print "alone" instead: concurrency proved without a clock. */
	snprintf(script, sizeof(script),
		 "touch %s.j%d; i=0; while [ $(ls %s.j* | wc -l) -lt 6 ] && [ $i -lt 1200 ]; "
		 "do sleep 0.1; i=$((i+1)); done; [ $i -lt 1200 ] && echo job%d || echo alone",
		 sock_path, j->n, sock_path, j->n);
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	const char *argv[] = { "sh", "-c", script, NULL };
	struct agent_exit x;
	int out = memfd_create("j", MFD_CLOEXEC);
	o.argv = argv;
	o.stdout_fd = out;
	j->rc = agent_exec(c, &o, &x);
	ssize_t n = pread(out, j->out, sizeof(j->out) - 1, 0);
	j->out[n > 0 ? n : 0] = 0;
	close(out);
	agent_client_close(c);
	return NULL;
}

static void test_concurrent_sessions(void **state)
{
	enum { N = 6 };
	pthread_t t[N];
	struct job j[N];
	for (int i = 0; i < N; i++) {
		j[i] = (struct job){ .n = i };
		assert_int_equal(pthread_create(&t[i], NULL, job_thread, &j[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		char want[16];
		pthread_join(t[i], NULL);
		assert_int_equal(j[i].rc, 0);
		snprintf(want, sizeof(want), "job%d\n", i);
		assert_string_equal(j[i].out, want);
	}
	for (int i = 0; i < N; i++) {
		char mark[PATH_MAX];
		snprintf(mark, sizeof(mark), "%s.j%d", sock_path, i);
		unlink(mark);
	}
}

/* ---- the VMM's vsock socket: "CONNECT <port>" handshake ---- */

struct fake_vsock {
	int lfd;
	bool accept_port;   /* answer OK and relay to the agent, or just close */
	char line[64];
};

/* Plays the VMM's vsock device: reads the CONNECT line, then relays bytes
 * between the client and the agent's unix socket. */
static void *fake_vsock_thread(void *arg)
{
	struct fake_vsock *v = arg;
	int fd = accept(v->lfd, NULL, NULL);
	size_t n = 0;
	while (n + 1 < sizeof(v->line) && read(fd, v->line + n, 1) == 1 && v->line[n++] != '\n')
		;
	v->line[n] = 0;
	if (!v->accept_port) {
		close(fd);
		return NULL;
	}
	const char ok[] = "OK 1073741824\n";
	if (write(fd, ok, sizeof(ok) - 1) < 0)
		return NULL;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	strcpy(a.sun_path, sock_path);
	int up = socket(AF_UNIX, SOCK_STREAM, 0);
	if (connect(up, (struct sockaddr *)&a, sizeof(a)) < 0)
		return NULL;
	struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = up, .events = POLLIN } };
	char buf[65536];
	for (;;) {
		if (poll(p, 2, -1) < 0)
			break;
		int from = p[0].revents ? 0 : 1;
		ssize_t r = read(p[from].fd, buf, sizeof(buf));
		if (r <= 0 || write(p[!from].fd, buf, (size_t)r) != r)
			break;
	}
	close(fd);
	close(up);
	return NULL;
}

static void test_vsock_uds(void **state)
{
	char path[160];
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(path, sizeof(path), "%s/vsock.sock", dir);
	strcpy(a.sun_path, path);
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 4), 0);

	struct fake_vsock v = { .lfd = lfd, .accept_port = true };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, fake_vsock_thread, &v), 0);
	struct agent_client *c;
	assert_int_equal(agent_client_connect_vsock_uds(path, 1024, &c), 0);
	struct agent_ping pg;
	assert_int_equal(agent_ping(c, &pg), 0);
	struct agent_exit x;
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	const char *argv[] = { "sh", "-c", "echo through-vsock; exit 5", NULL };
	char *out;
	o.argv = argv;
	assert_int_equal(run(c, &o, &x, &out), 0);
	assert_int_equal(x.code, 5);
	assert_string_equal(out, "through-vsock\n");
	agent_client_close(c);
	pthread_join(t, NULL);
	assert_string_equal(v.line, "CONNECT 1024\n");

	/* Nobody listening on the guest port: the device closes. */
	v = (struct fake_vsock){ .lfd = lfd, .accept_port = false };
	assert_int_equal(pthread_create(&t, NULL, fake_vsock_thread, &v), 0);
	assert_int_equal(agent_client_connect_vsock_uds(path, 7, &c), -ECONNREFUSED);
	assert_null(c);
	pthread_join(t, NULL);
	assert_string_equal(v.line, "CONNECT 7\n");
	close(lfd);
}

/* ---- PID 1 duties, in a new PID and mount namespace ---- */

static void test_pid1(void **state)
{
	if (geteuid() != 0) {
		print_message("not root: cannot make the agent PID 1 of a namespace\n");
		skip();
	}
	/* Not under /tmp, /run or /dev: as PID 1 the agent mounts fresh file
	 * systems there, hiding the socket.  Not next to the binary either: a
	 * checkout may itself live under /tmp (CI clones anywhere). */
	char bin[PATH_MAX + 32], sdir[PATH_MAX + 48], sock[PATH_MAX + 64], spec[PATH_MAX + 80];
	agent_bin(bin, sizeof(bin));
	snprintf(sdir, sizeof(sdir), "/var/tmp/kosa8-pid1-XXXXXX");
	assert_non_null(mkdtemp(sdir));
	snprintf(sock, sizeof(sock), "%s/a.sock", sdir);
	if (strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		rmdir(sdir);
		print_message("build path too long for a unix socket\n");
		skip();
	}
	snprintf(spec, sizeof(spec), "unix:%s", sock);
	pid_t pid = fork();
	if (pid == 0) {
		/* Nothing of ours stays open in it (a pipe reader would wait). */
		int fd = open("/dev/null", O_RDWR);
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execlp("unshare", "unshare", "--pid", "--fork", "--mount", "--uts", "--propagation", "private",
		       bin, "--listen", spec, "--default-user", "root", (char *)NULL);
		_exit(127);
	}
	pid1_unshare = pid;
	struct agent_client *c = NULL;
	/* A bound on a hang, not a speed test: a loaded machine may be slow. */
	for (int i = 0; i < 6000; i++) {
		if (agent_client_connect_unix(sock, &c) == 0)
			break;
		agent_client_close(c);
		c = NULL;
		usleep(10000);
	}
	assert_non_null(c);
	struct agent_exit x;
	struct agent_exec_opts o = AGENT_EXEC_OPTS_INIT;
	char *out;
	/* An orphan that dies: only PID 1 can reap it. */
	const char *orphan[] = { "sh", "-c", "sleep 0.1 & exit 0", NULL };
	o.argv = orphan;
	assert_int_equal(run(c, &o, &x, NULL), 0);
	usleep(600000);
	const char *look[] = { "sh", "-c",
		"for f in /proc/[0-9]*/stat; do read -r l < $f; set -- $l; [ \"$3\" = Z ] && echo zombie $1; done; "
		"echo pid1=$(cat /proc/1/comm); "
		"for m in '/proc proc' '/sys sysfs' '/dev devtmpfs' '/dev/pts devpts' '/dev/shm tmpfs' "
		"'/tmp tmpfs' '/run tmpfs'; do grep -q \" $m \" /proc/mounts || echo missing $m; done; "
		"test -c /dev/null && test -L /dev/fd && echo devok", NULL };
	o.argv = look;
	assert_int_equal(run(c, &o, &x, &out), 0);
	assert_string_equal(out, "pid1=kosa8-agent\ndevok\n");
	/* A pty needs the devpts it mounted. */
	const char *tty[] = { "sh", "-c", "test -t 0 && echo tty", NULL };
	o.argv = tty;
	o.pty = true;
	assert_int_equal(run(c, &o, &x, &out), 0);
	assert_string_equal(out, "tty\r\n");
	/* Power-off: everything stopped, then reboot(2), which in a PID
	 * namespace ends the namespace's init. */
	assert_int_equal(agent_shutdown(c), 0);
	agent_client_close(c);
	int status = 0;
	pid_t r = 0;
	for (int i = 0; i < 1000 && (r = waitpid(pid, &status, WNOHANG)) == 0; i++)
		usleep(10000);
	if (r == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	pid1_unshare = 0;
	unlink(sock);
	rmdir(sdir);
	assert_int_equal(r, pid);
}

static void test_shutdown(void **state)
{
	char sock2[160];
	snprintf(sock2, sizeof(sock2), "%s/second.sock", dir);
	pid_t pid = start_agent(sock2);
	struct agent_client *c;
	assert_int_equal(agent_client_connect_unix(sock2, &c), 0);
	assert_int_equal(agent_shutdown(c), 0);
	agent_client_close(c);
	int status = -1;
	for (int i = 0; i < 500 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(10000);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/kosa8-agent-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	chmod(dir, 0755);   /* the nobody user must reach files under it */
	snprintf(sock_path, sizeof(sock_path), "%s/agent.sock", dir);
	agent_pid = start_agent(sock_path);
	return agent_pid > 0 ? 0 : -1;
}

/* After a failed PID-1 test: kill the namespace's init (the unshare's only
 * child), which ends the whole namespace, then the unshare itself. */
static void kill_pid1_agent(void)
{
	char p[64];
	int child;
	if (!pid1_unshare)
		return;
	snprintf(p, sizeof(p), "/proc/%d/task/%d/children", pid1_unshare, pid1_unshare);
	FILE *f = fopen(p, "r");
	while (f && fscanf(f, "%d", &child) == 1)
		kill(child, SIGKILL);
	if (f)
		fclose(f);
	end_child(pid1_unshare, SIGKILL, false);
	pid1_unshare = 0;
}

static int teardown(void **state)
{
	char cmd[256];
	int bad = 0;
	kill_pid1_agent();
	end_child(agent_pid, SIGTERM, false);
	/* The sanitizer build's agent reports into its log: any report fails
	 * the suite, even if the client side happened to cope. */
	snprintf(cmd, sizeof(cmd), "grep -E 'Sanitizer|runtime error' '%s/agent.log'", dir);
	if (system(cmd) == 0) {
		print_error("the agent logged a sanitizer report (above)\n");
		bad = 1;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 && !bad ? 0 : -1;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ping),
		cmocka_unit_test(test_exit_codes),
		cmocka_unit_test(test_signal_death),
		cmocka_unit_test(test_env_cwd),
		cmocka_unit_test(test_start_errors),
		cmocka_unit_test(test_users),
		cmocka_unit_test(test_stdin_roundtrip),
		cmocka_unit_test(test_pty),
		cmocka_unit_test(test_stdout_100mib),
		cmocka_unit_test(test_put_get_tree),
		cmocka_unit_test(test_put_refuses_escapes),
		cmocka_unit_test(test_bad_version),
		cmocka_unit_test(test_malformed_frames),
		cmocka_unit_test(test_concurrent_sessions),
		cmocka_unit_test(test_vsock_uds),
		cmocka_unit_test(test_pid1),
		cmocka_unit_test(test_shutdown),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
