/* Serving a listening socket with threads that accept for themselves.
 *
 * A thread that accepts and hands each connection to a new thread costs,
 * per connection, a thread creation and two wake-ups (the acceptor, then
 * the new thread) before the first byte is read: the largest cost of a
 * short egress connection measured on a loaded machine (issue 28).  Here
 * up to max_idle threads wait in accept() themselves; the one the kernel
 * wakes serves the connection, and starts another acceptor first only if
 * it was the last one waiting.  After serving it goes back to accept,
 * unless more than max_idle others already wait.  At most max_busy connections (a
 * counter that pools may share) are served at once; one more is closed at
 * once and reported through refused(). */
#ifndef KOSA8_ACCEPTPOOL_H
#define KOSA8_ACCEPTPOOL_H

#include <stdatomic.h>
#include <stddef.h>

struct accept_pool_opts {
	int fd;                         /* listening socket, the caller's */
	atomic_int *busy;               /* connections being served (shared) */
	int max_busy;
	int max_idle;                   /* acceptors kept waiting (+1), >= 1 */
	size_t stack;                   /* thread stack size, 0: default */
	void (*serve)(void *arg, int fd);   /* serves fd and closes it */
	void (*refused)(void *arg);         /* one closed at the limit */
	void *arg;
};

struct accept_pool;

/* Starts the first acceptor.  0 or -errno. */
int accept_pool_start(const struct accept_pool_opts *o, struct accept_pool **out);

/* Stops accepting: shuts the socket down and waits until no thread is in
 * accept() (the caller may close the socket then).  Threads serving a
 * connection finish it. */
void accept_pool_stop(struct accept_pool *p);

/* Frees the pool once its last thread has ended, waiting up to wait_ms:
 * 0, or -EBUSY with the pool left allocated (a thread still serves and
 * will touch it).  NULL is fine. */
int accept_pool_free(struct accept_pool *p, int wait_ms);

#endif
