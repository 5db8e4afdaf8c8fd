/* Starting a thread that is fully started.
 *
 * glibc's thread start-up makes system calls of its own (rseq and
 * set_robust_list registration) with every signal blocked, before the
 * thread function runs.  The VMM syncs its seccomp filter onto all threads
 * at once (TSYNC); a thread still in that start-up would trap with SIGSYS
 * blocked, and the kernel then kills the process without the report.  So
 * every VMM thread is started with thread_start, which returns only once
 * the new thread runs its own code. */
#ifndef KOSA8_THREAD_H
#define KOSA8_THREAD_H

#include <pthread.h>
#include <stddef.h>

/* pthread_create, then waits for the thread to enter fn.  0 or -errno. */
int thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

/* A thread nobody joins (it frees what it owns): fn(arg) on a stack of
 * stack bytes (0: the default).  0 or -errno; on an error fn never runs. */
int thread_detached(void *(*fn)(void *), void *arg, size_t stack);

#endif
