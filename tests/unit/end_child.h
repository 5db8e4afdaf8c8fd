/* Ends a child process a test started, and nothing else.  kill(2) with a
 * pid of 0 signals the test's own process group (the test runner, make),
 * and -1 every process the user may signal: for root, the whole machine.
 * A setup that failed before its fork leaves such a pid behind, so a
 * teardown must never pass one through.  Include after <cmocka.h>. */
#ifndef KOSA8_TESTS_END_CHILD_H
#define KOSA8_TESTS_END_CHILD_H

#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

/* Signal pid (or, if group, its process group) and reap it. */
static inline void end_child(pid_t pid, int sig, bool group)
{
	if (pid <= 1)
		return;
	kill(group ? -pid : pid, sig);
	waitpid(pid, NULL, 0);
}

#endif
