/* Runs a function in a forked child and brings back its result and
 * whether the child was dumpable after it (PR_GET_DUMPABLE): for tests of
 * what a process may become (process_hold_secrets, vmm_clone) without
 * changing the test process.  Include after <cmocka.h>. */
#ifndef KOSA8_TESTS_CHILD_REPORT_H
#define KOSA8_TESTS_CHILD_REPORT_H

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* what(arg)'s result; *dumpable: the child's PR_GET_DUMPABLE after it. */
static int run_in_child(int (*what)(void *), void *arg, int *dumpable)
{
	int p[2], r[2] = {-99, -1}, status;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		r[0] = what(arg);
		r[1] = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
		(void)!write(p[1], r, sizeof(r));
		_exit(0);
	}
	close(p[1]);
	assert_int_equal(read(p[0], r, sizeof(r)), (ssize_t)sizeof(r));
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	*dumpable = r[1];
	return r[0];
}

#endif
