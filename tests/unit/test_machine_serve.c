/* The helper machine's request directories, host side and machine side
 * for real (src/machine/forward.c, serve.c) on this host, without QEMU:
 * machine_serve runs in a child process on a directory, as testbed/init
 * runs it on the shared one, and machine_forward in others, as the CLI
 * does; the test holds the machine's owner lock as QEMU would.  The
 * forwarded command is this binary again (KOSA8_TEST_JOB says what it
 * does).  A command's directory goes when it ends, and when its client
 * was killed (at the next command, which also ends the orphaned command
 * at once); their number is bounded; what a command prints takes no room
 * on the host once the client has copied it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/util.h"
#include "machine/machine.h"
#include "sandbox/owner.h"

#define FLOOD_BYTES (8u * 1024 * 1024)

static char dir[64], mdir[128], reqs[160], outfile[128]; /* short: /tmp/kosa8-mserve-X */
static pid_t server;
static int owner_fd = -1;

/* The forwarded command: this binary run by the machine's server. */
static int job(const char *what)
{
	static char chunk[65536];

	if (!strcmp(what, "echo")) {
		printf("hello\n");
		return 0;
	}
	if (!strcmp(what, "count")) {
		unsigned long long total = 0;
		ssize_t n;
		while ((n = read(STDIN_FILENO, chunk, sizeof(chunk))) > 0)
			total += (unsigned long long)n;
		printf("%llu\n", total);
		return 0;
	}
	if (!strcmp(what, "sleep")) {
		printf("%d\n", (int)getpid());
		fflush(stdout);
		sleep(60);
		return 0;
	}
	memset(chunk, 'x', sizeof(chunk));
	for (unsigned i = 0; i < FLOOD_BYTES / sizeof(chunk); i++)
		fwrite(chunk, 1, sizeof(chunk), stdout);
	printf("\nEND\n");
	fflush(stdout);
	sleep(60);
	return 0;
}

static int setup(void **state)
{
	struct sandbox_owner who;
	char rundir[160];

	snprintf(dir, sizeof(dir), "/tmp/kosa8-mserve-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(mdir, sizeof(mdir), "%s/machine", dir);
	snprintf(reqs, sizeof(reqs), "%s/requests", mdir);
	snprintf(rundir, sizeof(rundir), "%s/run", dir);
	snprintf(outfile, sizeof(outfile), "%s/client.out", dir);
	if (mkdir(mdir, 0700) < 0)
		return -1;
	/* What QEMU holds while the machine runs (machine_running). */
	if ((owner_fd = sandbox_owner_take(mdir, "qemu", &who)) < 0)
		return -1;
	server = fork();
	if (server == 0)
		_exit(machine_serve(mdir, 0, 0, rundir) ? 1 : 0);
	return server < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	char path[200];

	snprintf(path, sizeof(path), "%s/stop", mdir);
	close(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
	waitpid(server, NULL, 0);
	close(owner_fd);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	return system(path) == 0 ? 0 : -1;
}

/* A client forwarding KOSA8_TEST_JOB=what, its stdout in outfile, its
 * stdin in_fd (or this process's when -1). */
static pid_t client_in(const char *what, int in_fd)
{
	pid_t pid;

	unlink(outfile);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *argv[] = {"job", NULL};
		int fd = open(outfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		dup2(fd, STDOUT_FILENO);
		if (in_fd >= 0)
			dup2(in_fd, STDIN_FILENO);
		setenv("KOSA8_TEST_JOB", what, 1);
		_exit(machine_forward(mdir, 1, argv));
	}
	return pid;
}

static pid_t client(const char *what)
{
	return client_in(what, -1);
}

static int client_status(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Request directories in requests/ (r-*, .new-*, .old-*); the first's
 * name in first. */
static int count_requests(char *first, size_t len)
{
	struct dirent *e;
	DIR *d = opendir(reqs);
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "r-", 2) || !strncmp(e->d_name, ".new-", 5) ||
		    !strncmp(e->d_name, ".old-", 5)) {
			if (!n++ && first)
				snprintf(first, len, "%s/%.64s", reqs, e->d_name);
		}
	closedir(d);
	return n;
}

static off_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Waits up to ms for outfile to hold at least n bytes. */
static void wait_output(off_t n, int ms)
{
	for (int i = 0; i < ms / 20 && file_size(outfile) < n; i++)
		usleep(20 * 1000);
	assert_true(file_size(outfile) >= n);
}

static void test_cleaned_after_a_command(void **state)
{
	char *out;
	size_t len;

	assert_int_equal(client_status(client("echo")), 0);
	assert_int_equal(read_file(outfile, 1024, (uint8_t **)&out, &len), 0);
	assert_int_equal(len, 6);
	assert_memory_equal(out, "hello\n", 6);
	free(out);
	assert_int_equal(count_requests(NULL, 0), 0);
}

/* The client killed (SIGKILL: nothing of it runs again) while its command
 * runs: the next command removes the directory, and the machine ends the
 * orphaned command at once rather than after HOST_GONE_MS (15 s). */
static void test_cleaned_after_the_client_is_killed(void **state)
{
	pid_t c = client("sleep"), jobpid;
	uint64_t t0;
	char *out;
	size_t len;

	wait_output(2, 20000);
	assert_int_equal(read_file(outfile, 64, (uint8_t **)&out, &len), 0);
	jobpid = (pid_t)atoi(out);
	free(out);
	assert_true(jobpid > 0 && kill(jobpid, 0) == 0);
	kill(c, SIGKILL);
	assert_int_equal(client_status(c), 128 + SIGKILL);
	assert_int_equal(count_requests(NULL, 0), 1);

	t0 = mono_ms();
	assert_int_equal(client_status(client("echo")), 0);
	assert_int_equal(count_requests(NULL, 0), 0);
	while (kill(jobpid, 0) == 0 && mono_ms() - t0 < 10000)
		usleep(50 * 1000);
	print_message("orphaned command ended %llu ms after the next command began\n",
		      (unsigned long long)(mono_ms() - t0));
	assert_int_equal(kill(jobpid, 0), -1);
}

/* MACHINE_MAX_REQUESTS commands whose clients live: one more is refused
 * before it makes anything; once they have gone it runs. */
static void test_count_bounded(void **state)
{
	int fds[MACHINE_MAX_REQUESTS];
	char path[256];

	for (int i = 0; i < MACHINE_MAX_REQUESTS; i++) {
		snprintf(path, sizeof(path), "%s/.new-held%02d", reqs, i);
		assert_int_equal(mkdir(path, 0700), 0);
		snprintf(path, sizeof(path), "%s/.new-held%02d/client", reqs, i);
		fds[i] = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		assert_true(fds[i] >= 0);
		assert_int_equal(flock(fds[i], LOCK_EX | LOCK_NB), 0);
	}
	assert_int_equal(client_status(client("echo")), 125);
	assert_int_equal(count_requests(NULL, 0), MACHINE_MAX_REQUESTS);
	for (int i = 0; i < MACHINE_MAX_REQUESTS; i++)
		close(fds[i]);
	assert_int_equal(client_status(client("echo")), 0);
	assert_int_equal(count_requests(NULL, 0), 0);
}

/* A command that prints 8 MiB: once the client has copied it, the
 * request's "out" keeps its size but not the space. */
static void test_output_space_bounded(void **state)
{
	char req[256], out[300];
	pid_t c = client("flood");
	struct stat st;

	wait_output(FLOOD_BYTES + 5, 60000);
	assert_int_equal(count_requests(req, sizeof(req)), 1);
	snprintf(out, sizeof(out), "%s/out", req);
	assert_int_equal(stat(out, &st), 0);
	print_message("out: %lld bytes, %lld allocated\n", (long long)st.st_size,
		      (long long)st.st_blocks * 512);
	assert_true(st.st_size >= (off_t)FLOOD_BYTES);
	assert_true((uint64_t)st.st_blocks * 512 <= 2 * MACHINE_OUT_PUNCH);
	kill(c, SIGKILL);
	client_status(c);
	assert_int_equal(machine_sweep_requests(mdir), 0);
	assert_int_equal(count_requests(NULL, 0), 0);
}

/* A child writing bytes of stdin for a client into a pipe: the read end
 * in *rd; the writer's pid. */
static pid_t writer(size_t bytes, int *rd)
{
	static char chunk[65536];
	int p[2];
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]); /* a reader that goes leaves this writer EPIPE, not a wait */
		memset(chunk, 'y', sizeof(chunk));
		for (size_t done = 0; done < bytes; done += sizeof(chunk))
			if (write_all(p[1], chunk, sizeof(chunk)))
				_exit(1);
		_exit(0);
	}
	close(p[1]);
	*rd = p[0];
	return pid;
}

/* A command that never reads its stdin while 32 MiB wait on the host:
 * "in" holds no more than MACHINE_IN_MAX of them, and the writer waits as
 * on a full pipe. */
static void test_input_bounded(void **state)
{
	char req[256], in[300];
	int rd, st;
	pid_t w = writer(32u << 20, &rd), c = client_in("sleep", rd);
	struct stat sb;

	close(rd);
	wait_output(2, 20000);
	sleep(2);
	assert_int_equal(count_requests(req, sizeof(req)), 1);
	snprintf(in, sizeof(in), "%s/in", req);
	assert_int_equal(stat(in, &sb), 0);
	print_message("in: %lld bytes while the command reads nothing\n", (long long)sb.st_size);
	assert_true(sb.st_size <= MACHINE_IN_MAX + 65536);
	assert_int_equal(waitpid(w, &st, WNOHANG), 0); /* still waiting to write */
	kill(c, SIGKILL);
	client_status(c);
	kill(w, SIGKILL);
	waitpid(w, NULL, 0);
	assert_int_equal(machine_sweep_requests(mdir), 0);
}

/* 24 MiB through a command that reads them all: every byte arrives, and
 * what the command took is punched out of "in" on the host. */
static void test_input_whole(void **state)
{
	int rd;
	pid_t w = writer(24u << 20, &rd), c = client_in("count", rd);
	char *out;
	size_t len;

	close(rd);
	assert_int_equal(client_status(c), 0);
	waitpid(w, NULL, 0);
	assert_int_equal(read_file(outfile, 64, (uint8_t **)&out, &len), 0);
	assert_int_equal(strtoull(out, NULL, 10), 24ull << 20);
	free(out);
	assert_int_equal(count_requests(NULL, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cleaned_after_a_command),
		cmocka_unit_test(test_cleaned_after_the_client_is_killed),
		cmocka_unit_test(test_count_bounded),
		cmocka_unit_test(test_output_space_bounded),
		cmocka_unit_test(test_input_bounded),
		cmocka_unit_test(test_input_whole),
	};
	const char *what = getenv("KOSA8_TEST_JOB");

	if (what)
		return job(what);
	return cmocka_run_group_tests(tests, setup, teardown);
}
