/* supervisor/ctl_server.c and sup_op.c: the supervisor's event loop parts,
 * on a real Unix socket, with a loop thread shaped like the supervisor's
 * and real worker threads.  A long operation blocks for real (on a pipe);
 * meanwhile status answers, a second operation is refused naming the
 * first, a client that sends half a request holds nobody up, and a client
 * that hangs up cancels what it asked for. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "tmp_dir.h"

#include "common/util.h"
#include "supervisor/control.h"
#include "supervisor/ctl_server.h"
#include "supervisor/sup_op.h"

/* The loop under test: "status", "work" (a long operation) and "cancel",
 * dispatched as supervisor.c does. */
struct loop {
	struct ctl_server srv;
	struct ctl_handler h;
	struct sup_op_runner ops;
	pthread_t thread;
	int quit[2];
	int op_client;
	int gone_calls;
	/* The operation: blocks until release is written, or until cancelled
	 * when it polls. */
	int release[2];
	bool poll_cancel;
	bool saw_cancel;
	char path[PATH_MAX];
};

static cJSON *work(struct sup_op_runner *op, void *arg, int *pass_fd)
{
	struct loop *l = arg;
	char b;

	sup_op_step(op, "waiting for the test");
	if (l->poll_cancel) {
		while (!sup_op_cancelled(op))
			usleep(1000);
		l->saw_cancel = true;
		return sup_op_fail("cancelled");
	}
	if (read(l->release[0], &b, 1) != 1)
		return sup_op_fail("no release");
	cJSON *r = cJSON_CreateObject();
	cJSON_AddStringToObject(r, "id", "c3");
	return r;
}

static int on_request(void *arg, int fd, const cJSON *req)
{
	struct loop *l = arg;
	const char *op = cJSON_GetStringValue(cJSON_GetObjectItem(req, "op"));
	char msg[256];

	if (op && !strcmp(op, "status")) {
		cJSON *r = cJSON_CreateObject(), *o = sup_op_json(&l->ops);
		if (o)
			cJSON_AddItemToObject(r, "operation", o);
		ctl_reply_ok(fd, r, -1);
	} else if (op && !strcmp(op, "work")) {
		if (sup_op_busy(&l->ops, "sb", msg, sizeof(msg))) {
			ctl_reply_error(fd, msg);
			return CTL_DONE;
		}
		assert_int_equal(sup_op_submit(&l->ops, "checkpoint c3", false, work, l), 0);
		l->op_client = fd;
		return CTL_HOLD;
	} else if (op && !strcmp(op, "cancel")) {
		if (sup_op_cancel(&l->ops, msg, sizeof(msg)))
			ctl_reply_ok(fd, NULL, -1);
		else
			ctl_reply_error(fd, "nothing to cancel");
	} else {
		ctl_reply_error(fd, "unknown op");
	}
	return CTL_DONE;
}

static void on_gone(void *arg, int fd)
{
	struct loop *l = arg;
	char what[64];

	l->gone_calls++;
	if (fd == l->op_client) {
		l->op_client = -1;
		sup_op_cancel(&l->ops, what, sizeof(what));
	}
}


static void finished(struct loop *l)
{
	int pass = -1;
	bool ok;
	cJSON *r = sup_op_collect(&l->ops, &ok, &pass);

	if (!r)
		return;
	if (l->op_client >= 0) {
		if (ok)
			ctl_reply_ok(l->op_client, cJSON_Duplicate(r, true), pass);
		else
			ctl_reply_error(l->op_client, cJSON_GetStringValue(cJSON_GetObjectItem(r, "error")));
		ctl_server_release(&l->srv, l->op_client);
		l->op_client = -1;
	}
	cJSON_Delete(r);
}

static void *loop_thread(void *arg)
{
	struct loop *l = arg;
	struct pollfd p[CTL_POLLFDS + 2];

	for (;;) {
		int n = ctl_server_pollfds(&l->srv, p);
		p[n++] = (struct pollfd){.fd = l->quit[0], .events = POLLIN};
		p[n++] = (struct pollfd){.fd = sup_op_done_fd(&l->ops), .events = POLLIN};
		poll(p, (nfds_t)n, ctl_server_timeout(&l->srv, 1000));
		if (p[n - 2].revents)
			break;
		if (p[n - 1].revents)
			finished(l);
		ctl_server_serve(&l->srv, p, n - 2);
	}
	return NULL;
}

static struct loop *loop_start(void)
{
	struct loop *l = calloc(1, sizeof(*l));
	int fd;

	assert_non_null(l);
	snprintf(l->path, sizeof(l->path), "%s/control.sock", tmp);
	fd = control_listen(l->path);
	assert_true(fd >= 0);
	assert_int_equal(pipe(l->quit), 0);
	assert_int_equal(pipe(l->release), 0);
	l->op_client = -1;
	l->h = (struct ctl_handler){.request = on_request, .gone = on_gone, .arg = l};
	ctl_server_init(&l->srv, fd, &l->h);
	assert_int_equal(sup_op_init(&l->ops), 0);
	assert_int_equal(pthread_create(&l->thread, NULL, loop_thread, l), 0);
	return l;
}

static void loop_stop(struct loop *l)
{
	assert_int_equal(write(l->quit[1], "q", 1), 1);
	pthread_join(l->thread, NULL);
	if (write(l->release[1], "r", 1) != 1)
		fail();
	sup_op_fini(&l->ops);
	ctl_server_close(&l->srv);
	close(l->srv.listen_fd);
	unlink(l->path);
	close(l->quit[0]);
	close(l->quit[1]);
	close(l->release[0]);
	close(l->release[1]);
	free(l);
}

/* A client connection that sent line (without waiting for a reply). */
static int client_send(const char *path, const char *line)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	if (line[0])
		assert_int_equal(write_all(fd, line, strlen(line)), 0);
	return fd;
}

/* The one reply line on fd within ms, or NULL. */
static cJSON *client_reply(int fd, int ms)
{
	cJSON *r = NULL;

	return control_recv(fd, &r, ms) == 0 ? r : NULL;
}

static cJSON *call(struct loop *l, const char *op)
{
	cJSON *req = cJSON_CreateObject(), *r = NULL;

	cJSON_AddStringToObject(req, "op", op);
	assert_int_equal(control_call(l->path, req, &r, NULL, 5000), 0);
	cJSON_Delete(req);
	return r;
}

static const char *str(const cJSON *o, const char *k)
{
	return cJSON_GetStringValue(cJSON_GetObjectItem(o, k));
}

static void test_status_answers_while_an_operation_runs(void **state)
{
	struct loop *l = loop_start();
	int a = client_send(l->path, "{\"v\":1,\"op\":\"work\"}\n");
	cJSON *st = NULL, *r;

	/* Until the operation has reached its wait: status names it. */
	for (int i = 0; i < 500; i++) {
		const char *step;
		cJSON_Delete(st);
		st = call(l, "status");
		step = str(cJSON_GetObjectItem(st, "operation"), "step");
		if (step && step[0])
			break;
		usleep(2000);
	}
	assert_string_equal(str(cJSON_GetObjectItem(st, "operation"), "what"), "checkpoint c3");
	assert_string_equal(str(cJSON_GetObjectItem(st, "operation"), "step"), "waiting for the test");
	cJSON_Delete(st);
	/* The operation's own client has no reply yet. */
	assert_null(client_reply(a, 50));
	/* A second one is refused, naming the first and its age. */
	r = call(l, "work");
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	/* (the age is whole seconds; on a loaded machine it may be past 0) */
	unsigned age;
	char unit[4];
	assert_int_equal(sscanf(str(r, "error"), "sb is busy: checkpoint c3 running for %u %3s", &age, unit), 2);
	assert_string_equal(unit, "s");
	assert_true(age < 60);
	cJSON_Delete(r);
	/* Released: its client gets the result, and the runner is free. */
	assert_int_equal(write(l->release[1], "r", 1), 1);
	r = client_reply(a, 5000);
	assert_non_null(r);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	assert_string_equal(str(r, "id"), "c3");
	cJSON_Delete(r);
	close(a);
	for (int i = 0; i < 500 && sup_op_active(&l->ops, NULL); i++)
		usleep(2000);
	assert_false(sup_op_active(&l->ops, NULL));
	loop_stop(l);
}

static void test_half_a_request_holds_nobody_up(void **state)
{
	struct loop *l = loop_start();
	int slow = client_send(l->path, "{\"op\":"), silent = client_send(l->path, "");
	uint64_t t0 = mono_ms();
	cJSON *r = call(l, "status");

	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	cJSON_Delete(r);
	assert_true(mono_ms() - t0 < CTL_REQUEST_MS);
	/* Past their deadline both are dropped: end of file, no reply. */
	char b;
	struct pollfd p = {.fd = slow, .events = POLLIN};
	assert_int_equal(poll(&p, 1, CTL_REQUEST_MS + 2000), 1);
	assert_int_equal(read(slow, &b, 1), 0);
	p.fd = silent;
	assert_int_equal(poll(&p, 1, 2000), 1);
	assert_int_equal(read(silent, &b, 1), 0);
	close(slow);
	close(silent);
	loop_stop(l);
}

static void test_hang_up_cancels_the_operation(void **state)
{
	struct loop *l = loop_start();
	int a;

	l->poll_cancel = true;
	a = client_send(l->path, "{\"v\":1,\"op\":\"work\"}\n");
	for (int i = 0; i < 500 && !sup_op_active(&l->ops, NULL); i++)
		usleep(2000);
	assert_true(sup_op_active(&l->ops, NULL));
	close(a);
	for (int i = 0; i < 2500 && sup_op_active(&l->ops, NULL); i++)
		usleep(2000);
	assert_false(sup_op_active(&l->ops, NULL));
	assert_true(l->saw_cancel);
	assert_int_equal(l->gone_calls, 1);
	loop_stop(l);
}

static void test_cancel_request(void **state)
{
	struct loop *l = loop_start();
	cJSON *r;
	int a;

	r = call(l, "cancel");
	assert_string_equal(str(r, "error"), "nothing to cancel");
	cJSON_Delete(r);
	l->poll_cancel = true;
	a = client_send(l->path, "{\"v\":1,\"op\":\"work\"}\n");
	for (int i = 0; i < 500 && !sup_op_active(&l->ops, NULL); i++)
		usleep(2000);
	r = call(l, "cancel");
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	cJSON_Delete(r);
	r = client_reply(a, 5000);
	assert_non_null(r);
	assert_string_equal(str(r, "error"), "cancelled");
	cJSON_Delete(r);
	close(a);
	loop_stop(l);
}

static void test_bad_requests(void **state)
{
	struct loop *l = loop_start();
	char *big = malloc(CONTROL_MAX_LINE + 16);
	cJSON *r;
	int fd;

	fd = client_send(l->path, "not json\n");
	r = client_reply(fd, 5000);
	assert_string_equal(str(r, "error"), "the message is not one JSON object");
	cJSON_Delete(r);
	close(fd);
	/* one protocol: a request without its version is refused, not guessed */
	fd = client_send(l->path, "{\"op\":\"work\"}\n");
	r = client_reply(fd, 5000);
	assert_non_null(strstr(str(r, "error"), "another control protocol version"));
	cJSON_Delete(r);
	close(fd);
	memset(big, 'x', CONTROL_MAX_LINE + 15);
	big[CONTROL_MAX_LINE + 15] = 0;
	fd = client_send(l->path, "");
	/* The server stops reading at the bound: the rest may not be sent. */
	(void)!send(fd, big, CONTROL_MAX_LINE + 15, MSG_NOSIGNAL);
	r = client_reply(fd, 5000);
	assert_string_equal(str(r, "error"), "request line too long");
	cJSON_Delete(r);
	close(fd);
	free(big);
	loop_stop(l);
}

static void test_too_many_clients(void **state)
{
	struct loop *l = loop_start();
	int fds[CTL_CLIENTS_MAX + 1];
	cJSON *r;

	for (int i = 0; i < CTL_CLIENTS_MAX; i++)
		fds[i] = client_send(l->path, "");
	for (int i = 0; i < 500 && ctl_server_clients(&l->srv) < CTL_CLIENTS_MAX; i++)
		usleep(2000);
	/* The refusal comes at once, before the request is read: a client
	 * that has not sent, and one whose send meets the closed socket, both
	 * read it (the second is control_call, which must not die of SIGPIPE
	 * or report only "Broken pipe"). */
	fds[CTL_CLIENTS_MAX] = client_send(l->path, "");
	r = client_reply(fds[CTL_CLIENTS_MAX], 5000);
	assert_string_equal(str(r, "error"), "too many clients at once: try again");
	cJSON_Delete(r);
	for (int i = 0; i < 20; i++) {
		r = call(l, "status");
		assert_string_equal(str(r, "error"), "too many clients at once: try again");
		cJSON_Delete(r);
	}
	for (int i = 0; i <= CTL_CLIENTS_MAX; i++)
		close(fds[i]);
	loop_stop(l);
}

/* control_call_progress: progress lines before the reply go to the
 * callback; the reply is the first line without "progress". */
static void count_progress(const cJSON *line, void *arg)
{
	(*(int *)arg)++;
}

static void *progress_server(void *arg)
{
	int lfd = *(int *)arg, fd = accept(lfd, NULL, NULL);
	cJSON *req = NULL;
	static const char lines[] = "{\"v\":1,\"progress\":\"a\",\"running_ms\":1}\n"
				    "{\"v\":1,\"progress\":\"b\",\"running_ms\":2}\n"
				    "{\"v\":1,\"ok\":true,\"id\":\"c9\"}\n";

	if (fd >= 0 && control_recv(fd, &req, 5000) == 0)
		(void)!write(fd, lines, sizeof(lines) - 1);
	cJSON_Delete(req);
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void test_progress_lines(void **state)
{
	char path[PATH_MAX];
	int lfd, n = 0;
	pthread_t t;
	cJSON *req = cJSON_CreateObject(), *r = NULL;

	snprintf(path, sizeof(path), "%s/progress.sock", tmp);
	lfd = control_listen(path);
	assert_true(lfd >= 0);
	assert_int_equal(pthread_create(&t, NULL, progress_server, &lfd), 0);
	cJSON_AddStringToObject(req, "op", "checkpoint");
	assert_int_equal(control_call_progress(path, req, &r, NULL, 5000, count_progress, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(str(r, "id"), "c9");
	pthread_join(t, NULL);
	cJSON_Delete(req);
	cJSON_Delete(r);
	close(lfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_answers_while_an_operation_runs),
		cmocka_unit_test(test_half_a_request_holds_nobody_up),
		cmocka_unit_test(test_hang_up_cancels_the_operation),
		cmocka_unit_test(test_cancel_request),
		cmocka_unit_test(test_bad_requests),
		cmocka_unit_test(test_too_many_clients),
		cmocka_unit_test(test_progress_lines),
	};
	return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
