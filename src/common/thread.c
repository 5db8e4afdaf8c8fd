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

int thread_detached(void *(*fn)(void *), void *arg, size_t stack)
{
	pthread_attr_t at;
	pthread_t t;
	int err;

	if ((err = pthread_attr_init(&at)))
		return -err;
	err = pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (!err && stack)
		err = pthread_attr_setstacksize(&at, stack);
	if (!err)
		err = pthread_create(&t, &at, fn, arg);
	pthread_attr_destroy(&at);
	return -err;
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
