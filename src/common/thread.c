#include "common/thread.h"

#include <errno.h>
#include <semaphore.h>

struct start {
	void *(*fn)(void *);
	void *arg;
	sem_t running;
};

static void *trampoline(void *p)
{
	struct start *s = p;
	void *(*fn)(void *) = s->fn;
	void *arg = s->arg;

	/* s lives on the creator's stack: not touched after this post. */
	sem_post(&s->running);
	return fn(arg);
}

int thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	struct start s = {.fn = fn, .arg = arg};
	int err;

	if (sem_init(&s.running, 0, 0) < 0)
		return -errno;
	err = pthread_create(t, NULL, trampoline, &s);
	if (err == 0)
		while (sem_wait(&s.running) < 0 && errno == EINTR)
			;
	sem_destroy(&s.running);
	return -err;
}
