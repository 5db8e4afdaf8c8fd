/* The supervisor's long operations (checkpoint, rewind, checkpoint rm),
 * run off its event loop: one at a time, on one worker thread that lives
 * as long as the loop.  One thread for all of them, not one each: a VMM
 * started by a rewind gets PR_SET_PDEATHSIG, which fires when the thread
 * that started it ends, so that thread must outlive the VMM.
 *
 * The loop submits an operation, keeps answering `status` and the rest
 * while it runs, refuses what would conflict with it (sup_op_busy says
 * what runs and for how long), and collects its reply when done_fd turns
 * readable.  The operation reports its step (sup_op_step) for progress,
 * and checks sup_op_cancelled at its safe points. */
#ifndef KOSA8_SUPERVISOR_SUP_OP_H
#define KOSA8_SUPERVISOR_SUP_OP_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SUP_OP_NAME_MAX 48
#define SUP_OP_STEP_MAX 160

struct sup_op_runner;
/* The work: returns the reply for the client ({"ok":..} is added when it
 * is sent; a reply with "error" is a failure: sup_op_fail) and may set
 * *pass_fd to a descriptor to send with it. */
typedef cJSON *(*sup_op_fn)(struct sup_op_runner *op, void *arg, int *pass_fd);

struct sup_op_runner {
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	int done_pipe[2];       /* a byte when an operation has finished */
	bool quit;
	/* The operation (under lock); what = "" when none. */
	char what[SUP_OP_NAME_MAX]; /* "checkpoint c3", "rewind to c1" */
	char step[SUP_OP_STEP_MAX];
	uint64_t t0;            /* mono_ms() at submit */
	bool running, finished, owns_vmm;
	atomic_bool cancel;
	sup_op_fn fn;
	void *arg;
	cJSON *reply;
	int pass_fd;
};

int sup_op_init(struct sup_op_runner *r);
/* Waits for the running operation, if any, and ends the thread. */
void sup_op_fini(struct sup_op_runner *r);
/* The descriptor the loop polls for a finished operation. */
static inline int sup_op_done_fd(const struct sup_op_runner *r) { return r->done_pipe[0]; }

/* Starts fn(arg) on the worker, named what ("checkpoint c3").  owns_vmm:
 * it stops and starts the VMM (the loop leaves the VMM alone meanwhile).
 * -EBUSY while another runs (or its result is not collected). */
int sup_op_submit(struct sup_op_runner *r, const char *what, bool owns_vmm, sup_op_fn fn,
		  void *arg);
/* Whether an operation runs (or waits to be collected); *owns_vmm set. */
bool sup_op_active(struct sup_op_runner *r, bool *owns_vmm);
/* "NAME is busy: checkpoint c3 running for 41 s" into buf when an
 * operation runs: true; false (buf untouched) when none does. */
bool sup_op_busy(struct sup_op_runner *r, const char *name, char *buf, size_t len);
/* {"what","step","running_ms"} of the running operation, or NULL. */
cJSON *sup_op_json(struct sup_op_runner *r);
/* Asks the running operation to stop at its next safe point: its name
 * into buf, or false when none runs. */
bool sup_op_cancel(struct sup_op_runner *r, char *buf, size_t len);

/* After done_fd turned readable: the finished operation's reply (*ok:
 * whether it succeeded, *pass_fd: a descriptor to send and close, or -1),
 * or NULL when none has finished.  The runner is free again. */
cJSON *sup_op_collect(struct sup_op_runner *r, bool *ok, int *pass_fd);

/* For the operation itself (on the worker). */
void sup_op_step(struct sup_op_runner *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool sup_op_cancelled(struct sup_op_runner *op);
/* The reply of a failed operation: {"error": msg}. */
cJSON *sup_op_fail(const char *msg);

#endif
