#include "supervisor/sup_op.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/thread.h"
#include "common/util.h"

static void *worker(void *arg)
{
	struct sup_op_runner *r = arg;
	sigset_t all;

	/* Signals are the loop's (SIGCHLD wakes it). */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&r->lock);
	for (;;) {
		while (!r->quit && !(r->running && r->fn))
			pthread_cond_wait(&r->wake, &r->lock);
		if (!r->running)
			break;
		sup_op_fn fn = r->fn;
		void *fa = r->arg;
		int pass = -1;
		pthread_mutex_unlock(&r->lock);
		cJSON *reply = fn(r, fa, &pass);
		pthread_mutex_lock(&r->lock);
		r->fn = NULL;
		r->reply = reply ? reply : sup_op_fail("out of memory");
		r->pass_fd = pass;
		r->running = false;
		r->finished = true;
		if (write(r->done_pipe[1], "d", 1) < 0) {
			/* full: the loop has a wake-up pending already */
		}
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int sup_op_init(struct sup_op_runner *r)
{
	int err;

	memset(r, 0, sizeof(*r));
	r->pass_fd = -1;
	atomic_init(&r->cancel, false);
	if (pipe2(r->done_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->wake, NULL);
	if ((err = thread_start(&r->thread, worker, r))) {
		close(r->done_pipe[0]);
		close(r->done_pipe[1]);
		return err;
	}
	r->started = true;
	return 0;
}

void sup_op_fini(struct sup_op_runner *r)
{
	if (!r->started)
		return;
	pthread_mutex_lock(&r->lock);
	r->quit = true;
	atomic_store(&r->cancel, true);
	pthread_cond_signal(&r->wake);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	cJSON_Delete(r->reply);
	if (r->pass_fd >= 0)
		close(r->pass_fd);
	close(r->done_pipe[0]);
	close(r->done_pipe[1]);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->wake);
	r->started = false;
}

int sup_op_submit(struct sup_op_runner *r, const char *what, bool owns_vmm, sup_op_fn fn,
		  void *arg)
{
	int err = 0;

	pthread_mutex_lock(&r->lock);
	if (r->running || r->finished || r->quit) {
		err = -EBUSY;
	} else {
		snprintf(r->what, sizeof(r->what), "%s", what);
		r->step[0] = 0;
		r->t0 = mono_ms();
		r->owns_vmm = owns_vmm;
		r->fn = fn;
		r->arg = arg;
		r->running = true;
		atomic_store(&r->cancel, false);
		pthread_cond_signal(&r->wake);
	}
	pthread_mutex_unlock(&r->lock);
	return err;
}

bool sup_op_active(struct sup_op_runner *r, bool *owns_vmm)
{
	bool active;

	pthread_mutex_lock(&r->lock);
	active = r->running || r->finished;
	if (owns_vmm)
		*owns_vmm = active && r->owns_vmm;
	pthread_mutex_unlock(&r->lock);
	return active;
}

bool sup_op_busy(struct sup_op_runner *r, const char *name, char *buf, size_t len)
{
	bool busy;

	pthread_mutex_lock(&r->lock);
	busy = r->running || r->finished;
	if (busy)
		snprintf(buf, len, "%s is busy: %s running for %llu s", name, r->what,
			 (unsigned long long)((mono_ms() - r->t0) / 1000));
	pthread_mutex_unlock(&r->lock);
	return busy;
}

cJSON *sup_op_json(struct sup_op_runner *r)
{
	cJSON *o = NULL;

	pthread_mutex_lock(&r->lock);
	if (r->running || r->finished) {
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "what", r->what);
		cJSON_AddStringToObject(o, "step", r->step);
		cJSON_AddNumberToObject(o, "running_ms", (double)(mono_ms() - r->t0));
		cJSON_AddBoolToObject(o, "cancelled", atomic_load(&r->cancel));
	}
	pthread_mutex_unlock(&r->lock);
	return o;
}

bool sup_op_cancel(struct sup_op_runner *r, char *buf, size_t len)
{
	bool running;

	pthread_mutex_lock(&r->lock);
	running = r->running;
	if (running) {
		atomic_store(&r->cancel, true);
		snprintf(buf, len, "%s", r->what);
	}
	pthread_mutex_unlock(&r->lock);
	return running;
}

cJSON *sup_op_collect(struct sup_op_runner *r, bool *ok, int *pass_fd)
{
	cJSON *reply = NULL;
	char b[16];

	while (read(r->done_pipe[0], b, sizeof(b)) > 0)
		;
	pthread_mutex_lock(&r->lock);
	if (r->finished) {
		reply = r->reply;
		*pass_fd = r->pass_fd;
		*ok = !cJSON_HasObjectItem(reply, "error");
		r->reply = NULL;
		r->pass_fd = -1;
		r->finished = false;
		r->what[0] = 0;
	}
	pthread_mutex_unlock(&r->lock);
	return reply;
}

void sup_op_step(struct sup_op_runner *op, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&op->lock);
	va_start(ap, fmt);
	vsnprintf(op->step, sizeof(op->step), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&op->lock);
}

bool sup_op_cancelled(struct sup_op_runner *op)
{
	return atomic_load(&op->cancel);
}

cJSON *sup_op_fail(const char *msg)
{
	cJSON *r = cJSON_CreateObject();

	cJSON_AddStringToObject(r, "error", msg);
	return r;
}
