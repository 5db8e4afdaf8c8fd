/* The control hops' transport (common/fdpass.c, common/jsonl.c) and the
 * VMM's control messages (vmm/vm_control.c), over real socketpairs and a
 * real unix socket: descriptors passed and refused, lines framed, bounded
 * and versioned, the VMM's server answering what it is sent. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fdpass.h"
#include "common/jsonl.h"
#include "supervisor/control.h"
#include "vmm/vm.h"
#include "vmm/vm_control.h"

#include "tmp_dir.h"

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

/* Sends the byte first with n descriptors (copies of fd) in one
 * SCM_RIGHTS message. */
static void send_many(int sock, int fd, int n, char first)
{
	char cbuf[CMSG_SPACE(64 * sizeof(int))];
	struct iovec iov = {.iov_base = &first, .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = CMSG_SPACE(n * sizeof(int))};
	struct cmsghdr *c;

	memset(cbuf, 0, sizeof(cbuf));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(n * sizeof(int));
	for (int i = 0; i < n; i++)
		memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(int));
	assert_int_equal(sendmsg(sock, &mh, MSG_NOSIGNAL), 1);
}

static void test_fdpass_one_fd(void **state)
{
	int sv[2], p[2], got = -1;
	struct stat a, b;
	char buf[16];

	pair(sv);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(fdpass_send(sv[0], "hello", 5, p[1]), 0);
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), &got), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_true(got >= 0);
	assert_int_equal(fstat(got, &a), 0);
	assert_int_equal(fstat(p[1], &b), 0);
	assert_int_equal(a.st_ino, b.st_ino);
	assert_true(fcntl(got, F_GETFD) & FD_CLOEXEC);
	/* It is the pipe's write end: what goes in comes out. */
	assert_int_equal(write(got, "z", 1), 1);
	assert_int_equal(read(p[0], buf, 1), 1);
	assert_int_equal(buf[0], 'z');
	close(got);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

/* Two descriptors, one not asked for, one too many, a truncated control
 * message: each refused, and nothing is left open in the receiver. */
static void refused(int n, bool want, int held)
{
	int sv[2], p[2], got = held, before;
	char buf[4];

	pair(sv);
	assert_int_equal(pipe(p), 0);
	before = open_fds();
	send_many(sv[0], p[0], n, 'x');
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), want ? &got : NULL), -EPROTO);
	assert_int_equal(open_fds(), before);
	assert_int_equal(got, held);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

static void test_fdpass_refusals(void **state)
{
	refused(2, true, -1);  /* more than one in a message */
	refused(1, false, -1); /* none expected */
	refused(1, true, 0);   /* one held already (stdin stays the caller's) */
	refused(40, true, -1); /* MSG_CTRUNC: more than the receiver has room for */
}

static void test_fdpass_plain_bytes(void **state)
{
	int sv[2], got = -1;
	char buf[8];

	pair(sv);
	assert_int_equal(fdpass_send(sv[0], "abc", 3, -1), 0);
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), &got), 3);
	assert_int_equal(got, -1);
	close(sv[0]);
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), &got), 0);
	close(sv[1]);
	assert_int_equal(fdpass_send(sv[0], "abc", 3, -1), -EBADF);
}

static void test_jsonl_round_trip(void **state)
{
	cJSON *m = cJSON_CreateObject(), *r = NULL;
	const char *why = NULL;
	int sv[2], p[2], got;

	pair(sv);
	assert_int_equal(pipe(p), 0);
	cJSON_AddStringToObject(m, "op", "status");
	cJSON_AddNumberToObject(m, "v", 99); /* replaced by the version, not duplicated */
	assert_int_equal(jsonl_send(sv[0], m, p[0]), 0);
	assert_int_equal(jsonl_recv(sv[1], 1024, 1000, &r, &got, &why), 0);
	assert_string_equal(cJSON_GetObjectItem(r, "op")->valuestring, "status");
	assert_int_equal(cJSON_GetObjectItem(r, "v")->valueint, JSONL_VERSION);
	assert_int_equal(cJSON_GetArraySize(r), 2);
	assert_true(got >= 0);
	/* msg itself is unchanged. */
	assert_int_equal(cJSON_GetObjectItem(m, "v")->valueint, 99);
	close(got);
	cJSON_Delete(r);
	cJSON_Delete(m);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

/* A stream carries lines (a long operation's progress before its reply):
 * two lines in one write are two messages, the second left in the socket
 * for the next call. */
static void test_jsonl_two_lines(void **state)
{
	static const char two[] = "{\"v\":1,\"progress\":\"a\"}\n{\"v\":1,\"ok\":true}\n";
	const char *why = NULL;
	cJSON *r = NULL;
	int sv[2];

	pair(sv);
	assert_int_equal(write(sv[0], two, sizeof(two) - 1), (ssize_t)(sizeof(two) - 1));
	assert_int_equal(jsonl_recv(sv[1], 1024, 1000, &r, NULL, &why), 0);
	assert_string_equal(cJSON_GetObjectItem(r, "progress")->valuestring, "a");
	cJSON_Delete(r);
	assert_int_equal(jsonl_recv(sv[1], 1024, 1000, &r, NULL, &why), 0);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	cJSON_Delete(r);
	close(sv[0]);
	close(sv[1]);
}

/* raw is sent as it is; the receiver must refuse it with err. */
static void recv_refuses(const char *raw, size_t len, size_t max, int err, const char *why_has)
{
	const char *why = NULL;
	cJSON *r = (cJSON *)1;
	int sv[2], got = 7;

	pair(sv);
	if (len)
		assert_int_equal(write(sv[0], raw, len), (ssize_t)len);
	shutdown(sv[0], SHUT_WR);
	assert_int_equal(jsonl_recv(sv[1], max, 1000, &r, &got, &why), err);
	assert_null(r);
	assert_int_equal(got, -1);
	assert_non_null(why);
	assert_non_null(strstr(why, why_has));
	close(sv[0]);
	close(sv[1]);
}

static void test_jsonl_refusals(void **state)
{
	recv_refuses("{\"op\":\"status\"}\n", 16, 1024, -EPROTONOSUPPORT, "version");
	recv_refuses("{\"v\":2}\n", 8, 1024, -EPROTONOSUPPORT, "version");
	recv_refuses("{\"v\":\"1\"}\n", 10, 1024, -EPROTONOSUPPORT, "version");
	recv_refuses("[1]\n", 4, 1024, -EPROTO, "not one JSON object");
	recv_refuses("{\"v\":1} {}\n", 11, 1024, -EPROTO, "not one JSON object");
	recv_refuses("ok running\n", 11, 1024, -EPROTO, "not one JSON object");
	recv_refuses("{\"v\":1,\"a\":\"\0\"}\n", 16, 1024, -EPROTO, "NUL");
	recv_refuses("{\"v\":1", 6, 1024, -ECONNRESET, "closed");
	recv_refuses("", 0, 1024, -ECONNRESET, "closed");
	recv_refuses("{\"v\":1,\"a\":\"0123456789\"}\n", 25, 16, -EPROTO, "longer");
}

static void test_jsonl_max_line_exact(void **state)
{
	/* A line of exactly max bytes is taken; one more byte is not. */
	const char *line = "{\"v\":1,\"a\":\"xy\"}\n";
	size_t len = strlen(line) - 1;
	const char *why;
	cJSON *r;
	int sv[2];

	pair(sv);
	assert_int_equal(write(sv[0], line, len + 1), (ssize_t)len + 1);
	assert_int_equal(jsonl_recv(sv[1], len, 1000, &r, NULL, &why), 0);
	cJSON_Delete(r);
	close(sv[0]);
	close(sv[1]);
	recv_refuses(line, len + 1, len - 1, -EPROTO, "longer");
}

/* The buffer grows with what comes, up to the bound: a bound far above the
 * message (no memory could hold it) costs nothing, and a message that
 * arrives a few bytes at a time is read whole. */
static void test_jsonl_buffer_follows_message(void **state)
{
	const char *line = "{\"v\":1,\"a\":\"0123456789abcdef0123456789abcdef\"}\n";
	const char *why = NULL;
	size_t len = strlen(line);
	cJSON *r = NULL;
	int sv[2];
	pid_t pid;

	pair(sv);
	assert_int_equal(write(sv[0], line, len), (ssize_t)len);
	assert_int_equal(jsonl_recv(sv[1], SIZE_MAX - 1, 1000, &r, NULL, &why), 0);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r, "a")),
			    "0123456789abcdef0123456789abcdef");
	cJSON_Delete(r);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (size_t i = 0; i < len; i += 3) {
			usleep(2000);
			if (write(sv[0], line + i, len - i < 3 ? len - i : 3) < 0)
				_exit(1);
		}
		_exit(0);
	}
	assert_int_equal(jsonl_recv(sv[1], 1024, 5000, &r, NULL, &why), 0);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r, "a")),
			    "0123456789abcdef0123456789abcdef");
	cJSON_Delete(r);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	close(sv[0]);
	close(sv[1]);
}

static void test_jsonl_timeout(void **state)
{
	const char *why = NULL;
	cJSON *r;
	int sv[2];

	pair(sv);
	assert_int_equal(write(sv[0], "{\"v\":", 5), 5); /* and nothing more */
	assert_int_equal(jsonl_recv(sv[1], 1024, 50, &r, NULL, &why), -ETIMEDOUT);
	assert_non_null(why);
	close(sv[0]);
	close(sv[1]);
}

/* ---- the VMM's messages ---- */

static int req_from(const char *json, struct vm_control_req *req, const char **why)
{
	cJSON *m = cJSON_Parse(json);
	int err;

	assert_non_null(m);
	err = vm_control_req_decode(m, req, why);
	cJSON_Delete(m);
	return err;
}

static void test_vmctl_requests(void **state)
{
	static struct vm_control_req req, again;
	const char *why;
	char path[5000];
	cJSON *m;

	assert_int_equal(req_from("{\"v\":1,\"op\":\"status\"}", &req, &why), 0);
	assert_int_equal(req.op, VMCTL_STATUS);
	assert_int_equal(req_from("{\"v\":1,\"op\":\"checkpoint\",\"dir\":\"/c/c1\",\"top\":\"/c/d1\","
				  "\"live\":true}", &req, &why), 0);
	assert_int_equal(req.op, VMCTL_CHECKPOINT);
	assert_string_equal(req.dir, "/c/c1");
	assert_string_equal(req.top, "/c/d1");
	assert_true(req.live);
	m = vm_control_req_encode(&req);
	assert_int_equal(vm_control_req_decode(m, &again, &why), 0);
	assert_memory_equal(&req, &again, sizeof(req));
	cJSON_Delete(m);

	assert_int_equal(req_from("{\"op\":\"reboot\"}", &req, &why), -EPROTO);
	assert_non_null(strstr(why, "unknown op"));
	assert_int_equal(req_from("{\"op\":\"status\",\"dir\":\"/x\"}", &req, &why), -EPROTO);
	assert_int_equal(req_from("{\"op\":\"checkpoint\"}", &req, &why), -EPROTO);
	assert_int_equal(req_from("{\"op\":\"checkpoint\",\"dir\":\"\"}", &req, &why), -EPROTO);
	assert_int_equal(req_from("{\"op\":\"checkpoint\",\"dir\":7}", &req, &why), -EPROTO);
	assert_int_equal(req_from("{\"op\":\"checkpoint\",\"dir\":\"/a\",\"live\":1}", &req, &why),
			 -EPROTO);
	memset(path, 'a', sizeof(path));
	snprintf(path, sizeof(path), "{\"op\":\"checkpoint\",\"dir\":\"/%04095d\"}", 0);
	assert_int_equal(req_from(path, &req, &why), -EPROTO);
	snprintf(path, sizeof(path), "{\"op\":\"checkpoint\",\"dir\":\"/%04094d\"}", 0);
	assert_int_equal(req_from(path, &req, &why), 0);
}

static int rep_from(const char *json, struct vm_control_reply *rep)
{
	cJSON *m = cJSON_Parse(json);
	const char *why;
	int err;

	assert_non_null(m);
	err = vm_control_reply_decode(m, rep, &why);
	cJSON_Delete(m);
	return err;
}

static void test_vmctl_replies(void **state)
{
	struct vm_control_reply rep, again;
	const char *why;
	cJSON *m;

	assert_int_equal(rep_from("{\"v\":1,\"ok\":true,\"message\":\"checkpoint /c\","
				  "\"memory_bytes\":123456789012,\"paused_ms\":12.5,\"layer\":true,"
				  "\"live\":true}", &rep), 0);
	assert_true(rep.ok);
	assert_int_equal(rep.memory_bytes, 123456789012ULL);
	assert_true(rep.paused_ms == 12.5);
	assert_true(rep.layer && rep.live);
	m = vm_control_reply_encode(&rep);
	assert_int_equal(vm_control_reply_decode(m, &again, &why), 0);
	assert_memory_equal(&rep, &again, sizeof(rep));
	cJSON_Delete(m);

	assert_int_equal(rep_from("{\"ok\":false,\"error\":\"disk full\"}", &rep), 0);
	assert_false(rep.ok);
	assert_string_equal(rep.text, "disk full");
	/* The text field must match ok; numbers are bounded; states are known. */
	assert_int_equal(rep_from("{\"ok\":true,\"error\":\"x\"}", &rep), -EPROTO);
	assert_int_equal(rep_from("{\"ok\":true,\"message\":\"x\",\"memory_bytes\":-1}", &rep), -EPROTO);
	assert_int_equal(rep_from("{\"ok\":true,\"message\":\"x\",\"memory_bytes\":1e300}", &rep),
			 -EPROTO);
	assert_int_equal(rep_from("{\"ok\":true,\"message\":\"x\",\"state\":\"gone\"}", &rep), -EPROTO);
	assert_int_equal(rep_from("{\"ok\":true,\"message\":\"x\",\"extra\":1}", &rep), -EPROTO);
	assert_int_equal(rep_from("{\"ok\":1,\"message\":\"x\"}", &rep), -EPROTO);
}

/* The VMM's server side, with a VM that is not running: what a status, a
 * bad request and an endless line get. */
static struct vm vm;

static void serve_once(void)
{
	struct pollfd p = {.fd = vm.control_client, .revents = POLLIN};

	vm_control_serve(&vm, &p, 1);
}

static void test_vmm_server(void **state)
{
	struct vm_control_reply rep;
	const char *why;
	char *big;
	cJSON *m;
	int sv[2];

	/* One at a time, as the client sends them. */
	pair(sv);
	memset(&vm, 0, sizeof(vm));
	vm.control_fd = -1;
	vm.control_client = sv[1];
	const char *lines[] = {"{\"v\":1,\"op\":\"status\"}\n", "{\"op\":\"status\"}\n",
			       "{\"v\":1,\"op\":\"nap\"}\n", "{\"v\":1,\"op\":\"pause\",\"x\":1}\n"};
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(write(sv[0], lines[i], strlen(lines[i])), (ssize_t)strlen(lines[i]));
		serve_once();
		char buf[4096];
		ssize_t n = read(sv[0], buf, sizeof(buf) - 1);
		assert_true(n > 1 && buf[n - 1] == '\n');
		assert_int_equal(jsonl_parse(buf, (size_t)n - 1, 4096, &m, &why), 0);
		assert_int_equal(vm_control_reply_decode(m, &rep, &why), 0);
		cJSON_Delete(m);
		assert_int_equal(rep.ok, i == 0);
		if (i == 0)
			assert_string_equal(rep.state, "running");
		if (i == 1)
			assert_non_null(strstr(rep.text, "version"));
		if (i == 2)
			assert_non_null(strstr(rep.text, "unknown op"));
		if (i == 3)
			assert_non_null(strstr(rep.text, "does not take"));
	}
	assert_true(vm.control_client >= 0);

	/* A line longer than the protocol allows: an error, and the client is dropped. */
	big = malloc(VM_CONTROL_MAX_LINE + 1);
	memset(big, ' ', VM_CONTROL_MAX_LINE + 1);
	assert_int_equal(write(sv[0], big, VM_CONTROL_MAX_LINE + 1), VM_CONTROL_MAX_LINE + 1);
	for (int i = 0; i < 100 && vm.control_client >= 0; i++)
		serve_once();
	assert_int_equal(vm.control_client, -1);
	assert_int_equal(jsonl_recv(sv[0], 4096, 1000, &m, NULL, &why), 0);
	assert_int_equal(vm_control_reply_decode(m, &rep, &why), 0);
	assert_false(rep.ok);
	assert_non_null(strstr(rep.text, "longer"));
	cJSON_Delete(m);
	free(big);
	close(sv[0]);
}

/* A supervisor-side server for control_call: accepts one client, reads
 * its request and sends `raw` with `nfd` copies of stdin. */
struct fake {
	int listen_fd;
	const char *raw;
	int nfd;
};

static void *serve_raw(void *arg)
{
	struct fake *f = arg;
	int c = control_accept(f->listen_fd);
	cJSON *req;

	if (c < 0)
		return NULL;
	if (control_recv(c, &req, 1000) == 0)
		cJSON_Delete(req);
	if (f->nfd)
		send_many(c, 0, f->nfd, f->raw[0]);
	/* The client may be gone already: what it read is what counts. */
	(void)!send(c, f->raw + (f->nfd ? 1 : 0), strlen(f->raw) - (f->nfd ? 1 : 0), MSG_NOSIGNAL);
	close(c);
	return NULL;
}

static int call_fake(const char *raw, int nfd, cJSON **reply, int *fd)
{
	char path[128];
	struct fake f = {.raw = raw, .nfd = nfd};
	cJSON *req = cJSON_CreateObject();
	pthread_t t;
	int err;

	snprintf(path, sizeof(path), "%s/ctl", tmp);
	f.listen_fd = control_listen(path);
	assert_true(f.listen_fd >= 0);
	cJSON_AddStringToObject(req, "op", "status");
	assert_int_equal(pthread_create(&t, NULL, serve_raw, &f), 0);
	err = control_call(path, req, reply, fd, 2000);
	pthread_join(t, NULL);
	close(f.listen_fd);
	cJSON_Delete(req);
	return err;
}

/* The CLI's side of the supervisor hop: a reply with one descriptor is
 * taken, one with two is refused and leaks neither, one of another
 * version is refused. */
static void test_control_call_reply_fds(void **state)
{
	cJSON *reply = NULL;
	int fd = -1, before = open_fds();

	assert_int_equal(call_fake("{\"v\":1,\"ok\":true}\n", 1, &reply, &fd), 0);
	assert_true(fd >= 0 && cJSON_IsTrue(cJSON_GetObjectItem(reply, "ok")));
	close(fd);
	cJSON_Delete(reply);
	reply = NULL;
	assert_int_equal(call_fake("{\"v\":1,\"ok\":true}\n", 2, &reply, &fd), -EPROTO);
	assert_int_equal(fd, -1);
	assert_null(reply);
	assert_int_equal(open_fds(), before);
	assert_int_equal(call_fake("{\"ok\":true}\n", 0, &reply, &fd), -EPROTONOSUPPORT);
	assert_null(reply);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fdpass_one_fd),
		cmocka_unit_test(test_fdpass_refusals),
		cmocka_unit_test(test_fdpass_plain_bytes),
		cmocka_unit_test(test_jsonl_round_trip),
		cmocka_unit_test(test_jsonl_refusals),
		cmocka_unit_test(test_jsonl_two_lines),
		cmocka_unit_test(test_jsonl_max_line_exact),
		cmocka_unit_test(test_jsonl_buffer_follows_message),
		cmocka_unit_test(test_jsonl_timeout),
		cmocka_unit_test(test_vmctl_requests),
		cmocka_unit_test(test_vmctl_replies),
		cmocka_unit_test(test_vmm_server),
		cmocka_unit_test(test_control_call_reply_fds),
	};
	return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
