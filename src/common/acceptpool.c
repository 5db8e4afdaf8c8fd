/* Threads that accept for themselves (acceptpool.h). */
#include "common/acceptpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/thread.h"

struct accept_pool {
	struct accept_pool_opts o;
	pthread_mutex_t lock;
	pthread_cond_t changed;     /* idle or threads went down */
	int idle;                   /* threads waiting in (or about to enter) accept */
	int threads;                /* threads alive */
	bool stopping;
};

static void *worker(void *arg);

/* Called with the lock held: one more thread, counted as idle. */
static int spawn(struct accept_pool *p)
{
	int err;

	p->threads++;
	p->idle++;
	if ((err = thread_detached(worker, p, p->o.stack))) {
		p->threads--;
		p->idle--;
	}
	return err;
}

/* The last thing a thread does with the pool. */
static void *leave(struct accept_pool *p)
{
	p->threads--;
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void serve_one(struct accept_pool *p, int fd)
{
	if (atomic_fetch_add(p->o.busy, 1) >= p->o.max_busy) {
		atomic_fetch_sub(p->o.busy, 1);
		if (p->o.refused)
			p->o.refused(p->o.arg);
		close(fd);
		return;
	}
	p->o.serve(p->o.arg, fd);   /* closes fd */
	atomic_fetch_sub(p->o.busy, 1);
}

static void *worker(void *arg)
{
	struct accept_pool *p = arg;

	for (;;) {
		int fd = accept4(p->o.fd, NULL, NULL, SOCK_CLOEXEC);
		int e = errno;

		pthread_mutex_lock(&p->lock);
		p->idle--;
		if (p->stopping || (fd < 0 && (e == EINVAL || e == EBADF))) {
			if (fd >= 0)
				close(fd);
			return leave(p);
		}
		/* Someone must keep accepting while this one serves; if no
		 * thread can start, this one accepts again after serving. */
		if (fd >= 0 && !p->idle)
			spawn(p);
		pthread_mutex_unlock(&p->lock);
		if (fd >= 0)
			serve_one(p, fd);
		else if (e != EINTR && e != ECONNABORTED)
			usleep(50 * 1000);   /* EMFILE and the like: breathe, not spin */
		pthread_mutex_lock(&p->lock);
		if (p->stopping || p->idle > p->o.max_idle)
			return leave(p);
		p->idle++;
		pthread_mutex_unlock(&p->lock);
	}
}

int accept_pool_start(const struct accept_pool_opts *o, struct accept_pool **out)
{
	struct accept_pool *p;
	int err;

	if (o->max_idle < 1 || o->max_busy < 1 || !o->busy || !o->serve)
		return -EINVAL;
	if (!(p = calloc(1, sizeof(*p))))
		return -ENOMEM;
	p->o = *o;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->changed, NULL);
	pthread_mutex_lock(&p->lock);
	err = spawn(p);
	pthread_mutex_unlock(&p->lock);
	if (err) {
		pthread_cond_destroy(&p->changed);
		pthread_mutex_destroy(&p->lock);
		free(p);
		return err;
	}
	*out = p;
	return 0;
}

void accept_pool_stop(struct accept_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	/* accept() returns EINVAL on a shut-down listening socket. */
	shutdown(p->o.fd, SHUT_RDWR);
	while (p->idle > 0)
		pthread_cond_wait(&p->changed, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

int accept_pool_free(struct accept_pool *p, int wait_ms)
{
	struct timespec until;
	int left;

	if (!p)
		return 0;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&p->lock);
	while (p->threads > 0 && pthread_cond_timedwait(&p->changed, &p->lock, &until) == 0)
		;
	left = p->threads;
	pthread_mutex_unlock(&p->lock);
	if (left)
		return -EBUSY;
	pthread_cond_destroy(&p->changed);
	pthread_mutex_destroy(&p->lock);
	free(p);
	return 0;
}
