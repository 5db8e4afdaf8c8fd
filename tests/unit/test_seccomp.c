/* The VMM's seccomp filter (vmm/seccomp.h), installed for real in a child
 * process: what it allows still works, and a call outside its rules ends
 * the process with VMM_SECCOMP_EXIT and a line naming the call.  Nothing
 * here needs KVM: the filter is the same one the VMM loads. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "vmm/seccomp.h"

/* What a child under the filter did: its wait status and its stderr. */
struct outcome {
	int status;
	char err[512];
};

static int sleeper_fds[2], ready_fds[2];
static pthread_t sleeper_thread;

static void *sleeper(void *arg)
{
	char c = 0;

	(void)arg;
	/* Ready: the thread's start-up calls (set_robust_list, rseq, with all
	 * signals blocked) are behind it.  Under the filter they would trap
	 * while SIGSYS is blocked, which kills the process outright. */
	(void)!write(ready_fds[1], &c, 1);
	(void)!read(sleeper_fds[0], &c, 1); /* until the process ends */
	return NULL;
}

/* Before the filter: a second thread, as the VMM's vCPU threads are,
 * waited for until it runs its own code. */
static void start_sleeper(void)
{
	char c;

	if (pipe(sleeper_fds) != 0 || pipe(ready_fds) != 0 ||
	    pthread_create(&sleeper_thread, NULL, sleeper, NULL) != 0 || read(ready_fds[0], &c, 1) != 1)
		_exit(97);
}

/* run_filtered(fn, arg): forks; the child installs the filter and calls
 * fn(arg), then exits 0.  fn runs with nothing but the filter's calls; a
 * second thread, started before the filter, gets it too (TSYNC). */
static void run_filtered(void (*fn)(pid_t), pid_t arg, struct outcome *o)
{
	int fds[2];
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		const char *why;

		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		start_sleeper();
		if (vmm_seccomp_install(&why) < 0) {
			fprintf(stderr, "install failed: %s\n", why);
			_exit(99);
		}
		fn(arg);
		syscall(SYS_exit_group, 0);
	}
	close(fds[1]);
	/* Read to the end: a child writing into a closed pipe would die of
	 * SIGPIPE instead of reporting. */
	while ((n = read(fds[0], o->err + len, sizeof(o->err) - 1 - len)) > 0)
		len += (size_t)n;
	o->err[len] = 0;
	close(fds[0]);
	assert_int_equal(waitpid(pid, &o->status, 0), pid);
}

static void assert_exited(const struct outcome *o, int code)
{
	if (!WIFEXITED(o->status))
		fail_msg("child ended by signal %d; stderr: %s", WTERMSIG(o->status), o->err);
	assert_int_equal(WEXITSTATUS(o->status), code);
}

static void signal_own_thread(pid_t unused)
{
	(void)unused;
	/* As the VMM kicks a vCPU thread; signal 0 does the checks only. */
	if (pthread_kill(sleeper_thread, 0) != 0)
		syscall(SYS_exit_group, 98);
}

static void signal_other(pid_t other)
{
	syscall(SYS_tgkill, other, other, 0);
}

/* pthread_kill's call on the process's own threads is allowed. */
static void test_tgkill_own_thread(void **state)
{
	struct outcome o;

	(void)state;
	run_filtered(signal_own_thread, 0, &o);
	assert_exited(&o, 0);
	assert_string_equal(o.err, "");
}

/* The jail shares the host's PID namespace: tgkill aimed at another process
 * (here the test itself, the child's parent) is refused by the filter. */
static void test_tgkill_other_process_killed(void **state)
{
	struct outcome o;

	(void)state;
	run_filtered(signal_other, getpid(), &o);
	assert_exited(&o, VMM_SECCOMP_EXIT);
	assert_non_null(strstr(o.err, "killed by seccomp: syscall tgkill"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tgkill_own_thread),
		cmocka_unit_test(test_tgkill_other_process_killed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
