/* Threads that accept for themselves (src/common/acceptpool.c), on a real
 * unix listening socket: connections one after another are served by the
 * same few threads (no thread per connection), the busy limit closes one
 * more at once and reports it, and stopping leaves a connection being
 * served to finish while the pool stays allocated until it has. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/acceptpool.h"

#define MAX_TIDS 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pid_t tids[MAX_TIDS];
static int ntids, served, refused, holding;
static bool hold;   /* serve() waits until this is cleared */

static void serve(void *arg, int fd)
{
	pid_t me = gettid();
	bool known = false;
	char c = 'k';

	pthread_mutex_lock(&lock);
	for (int i = 0; i < ntids; i++)
		known |= tids[i] == me;
	if (!known && ntids < MAX_TIDS)
		tids[ntids++] = me;
	holding++;
	pthread_cond_broadcast(&cond);
	while (hold)
		pthread_cond_wait(&cond, &lock);
	holding--;
	served++;
	pthread_mutex_unlock(&lock);
	(void)!write(fd, &c, 1);
	close(fd);
}

static void on_refused(void *arg)
{
	pthread_mutex_lock(&lock);
	refused++;
	pthread_mutex_unlock(&lock);
}

static char path[108];

static int listen_unix(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(path, sizeof(path), "/tmp/kosa8-acceptpool-%d.sock", getpid());
	unlink(path);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 64), 0);
	return fd;
}

static int dial(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* What the pool answered: 'k' when served, 0 when closed at once. */
static char answer(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char c = 0;

	assert_int_equal(poll(&p, 1, 10000), 1);
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	return c;
}

static void reset(void)
{
	ntids = served = refused = holding = 0;
	hold = false;
}

static void wait_holding(int n)
{
	pthread_mutex_lock(&lock);
	while (holding < n)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
}

static void release(void)
{
	pthread_mutex_lock(&lock);
	hold = false;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

/* 200 connections one after another: all served, by a few threads (a
 * thread per connection would show 200 thread ids). */
static void test_reuses_threads(void **state)
{
	atomic_int busy = 0;
	int lfd = listen_unix();
	struct accept_pool_opts o = {.fd = lfd, .busy = &busy, .max_busy = 8, .max_idle = 2,
				     .serve = serve, .refused = on_refused};
	struct accept_pool *p;

	reset();
	assert_int_equal(accept_pool_start(&o, &p), 0);
	for (int i = 0; i < 200; i++)
		assert_int_equal(answer(dial()), 'k');
	accept_pool_stop(p);
	assert_int_equal(accept_pool_free(p, 5000), 0);
	close(lfd);
	print_message("200 connections served by %d threads\n", ntids);
	assert_int_equal(served, 200);
	/* Usually 3; more when a thread was still finishing as the next
	 * connection came (the machine is shared).  Not one per connection. */
	assert_true(ntids <= 20);
	assert_int_equal(atomic_load(&busy), 0);
}

/* At max_busy, one more is closed at once and reported; once the held
 * ones end, a new one is served.  Stopping while one is served: the pool
 * is not freed under it. */
static void test_limit_and_stop(void **state)
{
	atomic_int busy = 0;
	int lfd = listen_unix(), held[2];
	struct accept_pool_opts o = {.fd = lfd, .busy = &busy, .max_busy = 2, .max_idle = 1,
				     .serve = serve, .refused = on_refused};
	struct accept_pool *p;

	reset();
	hold = true;
	assert_int_equal(accept_pool_start(&o, &p), 0);
	held[0] = dial();
	held[1] = dial();
	wait_holding(2);
	assert_int_equal(answer(dial()), 0);
	assert_int_equal(refused, 1);
	release();
	assert_int_equal(answer(held[0]), 'k');
	assert_int_equal(answer(held[1]), 'k');
	/* A serving thread answers, then closes and gives its slot back: on a
	 * loaded machine the next dial came first and was refused. */
	for (int i = 0; atomic_load(&busy) && i < 10000; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&busy), 0);
	assert_int_equal(answer(dial()), 'k');

	pthread_mutex_lock(&lock);
	hold = true;
	pthread_mutex_unlock(&lock);
	held[0] = dial();
	wait_holding(1);
	accept_pool_stop(p);
	assert_int_equal(accept_pool_free(p, 0), -EBUSY);
	release();
	assert_int_equal(answer(held[0]), 'k');
	assert_int_equal(accept_pool_free(p, 5000), 0);
	close(lfd);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reuses_threads),
		cmocka_unit_test(test_limit_and_stop),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
