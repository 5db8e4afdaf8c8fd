/* kosa8 ui's request checks, first as functions, then against the real
 * server on loopback with real HTTP requests from a raw socket: a request
 * without the token, with a wrong one, with a rebinding Host, a foreign
 * Origin, or a POST without the console's Origin or CSRF token gets 403 and
 * no data; the token in the query becomes an HttpOnly SameSite=Strict
 * cookie; with it the page and the state come, and an approval waiting in
 * a served supervisor queue (tests/unit/served_approvals.h) is answered
 * through POST /api/answer and seen live on /api/events. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "served_approvals.h"

#include "common/regdomain.h"
#include "sandbox/checkpoints.h"
#include "ui/action.h"
#include "ui/checks.h"
#include "ui/ui.h"

static char dir[64];
static char resp[1 << 16];

/* ---- the checks as functions ---- */

static void test_checks(void **state)
{
	struct ui_auth a;
	char host[64], origin[80], other[64];
	struct ui_req r;

	assert_int_equal(ui_auth_init(&a, 4242), 0);
	assert_int_equal(strlen(a.token), 64);
	assert_string_not_equal(a.token, a.csrf);
	assert_string_equal(a.cookie_name, "kosa8_ui_4242");
	snprintf(host, sizeof(host), "127.0.0.1:4242");
	snprintf(origin, sizeof(origin), "http://127.0.0.1:4242");
	snprintf(other, sizeof(other), "%.63s", a.token);

	r = (struct ui_req){.method = "GET", .host = host, .cookie = a.token};
	assert_int_equal(ui_check(&a, &r, NULL), UI_ALLOW);
	r.host = "LOCALHOST:4242";
	assert_int_equal(ui_check(&a, &r, NULL), UI_ALLOW);
	r.host = "evil.example:4242";           /* DNS rebinding */
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.host = "127.0.0.1:4243";
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.host = "127.0.0.1";
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.host = NULL;
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.host = host;
	r.cookie = other;                       /* one hex digit short */
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.cookie = NULL;
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.query_token = a.token;
	assert_int_equal(ui_check(&a, &r, NULL), UI_ALLOW_LOGIN);
	r.origin = "http://evil.example";
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.origin = "null";
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r = (struct ui_req){.method = "DELETE", .host = host, .cookie = a.token};
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);

	r = (struct ui_req){.method = "POST", .host = host, .origin = origin, .cookie = a.token, .csrf = a.csrf};
	assert_int_equal(ui_check(&a, &r, NULL), UI_ALLOW);
	r.csrf = a.token;
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.csrf = NULL;
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.csrf = a.csrf;
	r.origin = NULL;
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.origin = "http://127.0.0.1:4242.evil.example";
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.origin = "https://127.0.0.1:4242";
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
	r.origin = origin;
	r.cookie = NULL;                        /* a POST needs the cookie, not the query */
	r.query_token = a.token;
	assert_int_equal(ui_check(&a, &r, NULL), UI_DENY);
}

static void test_regdomain(void **state)
{
	char d[256];

	assert_int_equal(regdomain_of("api.openai.com.evil.example", d, sizeof(d)), 0);
	assert_string_equal(d, "evil.example");
	assert_int_equal(regdomain_of("API.OpenAI.com.", d, sizeof(d)), 0);
	assert_string_equal(d, "openai.com");
	assert_int_equal(regdomain_of("www.bbc.co.uk", d, sizeof(d)), 0);
	assert_string_equal(d, "bbc.co.uk");
	assert_int_equal(regdomain_of("co.uk", d, sizeof(d)), -EINVAL);
	assert_int_equal(regdomain_of("10.0.0.1", d, sizeof(d)), -EINVAL);
	assert_int_equal(regdomain_of("", d, sizeof(d)), -EINVAL);
	assert_int_equal(regdomain_of("a b.example", d, sizeof(d)), -EINVAL);
	assert_int_equal(regdomain_of("x.openai.com", d, 4), -ENAMETOOLONG);
}

static void test_action(void **state)
{
	struct ui_action a;
	const char *why;
	const char *ok = "{\"sandbox\":\"sb\",\"id\":3,\"answer\":\"always\"}";

	assert_int_equal(ui_action_parse(ok, strlen(ok), &a, &why), 0);
	assert_string_equal(a.sandbox, "sb");
	assert_int_equal(a.id, 3);
	assert_string_equal(a.answer, "always");
	static const char *const bad[] = {
		"", "[]", "{\"sandbox\":\"../x\",\"id\":1,\"answer\":\"allow\"}",
		"{\"sandbox\":\"sb\",\"id\":0,\"answer\":\"allow\"}",
		"{\"sandbox\":\"sb\",\"id\":1.5,\"answer\":\"allow\"}",
		"{\"sandbox\":\"sb\",\"id\":\"1\",\"answer\":\"allow\"}",
		"{\"sandbox\":\"sb\",\"id\":1,\"answer\":\"yes\"}",
		"{\"sandbox\":\"sb\",\"id\":1e300,\"answer\":\"deny\"}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(ui_action_parse(bad[i], strlen(bad[i]), &a, &why), -EINVAL);
}

static void test_ckpt_action(void **state)
{
	struct ui_ckpt_action a;
	const char *why;
	const char *rw = "{\"sandbox\":\"sb\",\"op\":\"rewind\",\"checkpoint\":\"c12\"}";
	const char *fk = "{\"sandbox\":\"sb\",\"op\":\"fork\",\"checkpoint\":\"c3\",\"name\":\"sb-2\"}";

	static const char *const bad[] = {
		"", "{}", "{\"sandbox\":\"-sb\",\"op\":\"rewind\",\"checkpoint\":\"c1\"}",
		"{\"sandbox\":\"sb\",\"op\":\"rm\",\"checkpoint\":\"c1\"}",
		"{\"sandbox\":\"sb\",\"op\":\"rewind\",\"checkpoint\":\"c01\"}",
		"{\"sandbox\":\"sb\",\"op\":\"rewind\",\"checkpoint\":\"--help\"}",
		"{\"sandbox\":\"sb\",\"op\":\"rewind\",\"checkpoint\":1}",
		"{\"sandbox\":\"sb\",\"op\":\"rewind\",\"checkpoint\":\"c1\",\"name\":\"x\"}",
		"{\"sandbox\":\"sb\",\"op\":\"fork\",\"checkpoint\":\"c1\"}",
		"{\"sandbox\":\"sb\",\"op\":\"fork\",\"checkpoint\":\"c1\",\"name\":\"--name\"}",
		"{\"sandbox\":\"sb\",\"op\":\"fork\",\"checkpoint\":\"c1\",\"name\":\"a/b\"}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why = NULL;
		assert_int_equal(ui_ckpt_action_parse(bad[i], strlen(bad[i]), &a, &why), -EINVAL);
		assert_non_null(why);
	}
	assert_int_equal(ui_ckpt_action_parse(rw, strlen(rw), &a, &why), 0);
	assert_string_equal(a.op, "rewind");
	assert_string_equal(a.checkpoint, "c12");
	assert_string_equal(a.name, "");
	assert_int_equal(ui_ckpt_action_parse(fk, strlen(fk), &a, &why), 0);
	assert_string_equal(a.sandbox, "sb");
	assert_string_equal(a.op, "fork");
	assert_string_equal(a.name, "sb-2");
}

/* A checkpoint tree on disk as the supervisor records it: c1, c2 and c3
 * under c1, and the sandbox running from c2. */
static void make_tree(const char *name)
{
	struct ckpt_meta m = {0};
	char sdir[PATH_MAX];

	assert_int_equal(sandbox_state_dir(name, sdir, sizeof(sdir)), 0);
	for (int i = 1; i <= 3; i++) {
		memset(&m, 0, sizeof(m));
		snprintf(m.id, sizeof(m.id), "c%d", i);
		snprintf(m.parent, sizeof(m.parent), "%s", i == 1 ? "" : "c1");
		snprintf(m.message, sizeof(m.message), "step %d", i);
		m.created = 1700000000 + i;
		m.memory_bytes = 1 << 20;
		assert_int_equal(ckpt_meta_save(sdir, &m), 0);
	}
	memset(&m, 0, sizeof(m));
	snprintf(m.id, sizeof(m.id), CKPT_CURRENT);
	snprintf(m.parent, sizeof(m.parent), "c2");
	assert_true(snprintf(m.top, sizeof(m.top), "%.3000s/checkpoints/d3.k8d", sdir) > 0);
	m.next = 4;
	assert_int_equal(ckpt_meta_save(sdir, &m), 0);
}

/* ---- the real server ---- */

static int connect_to(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* Sends req (printf-style) and reads the whole response into resp until
 * the server closes or `until` appears; the status code. */
static int http(uint16_t port, const char *until, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int http(uint16_t port, const char *until, const char *fmt, ...)
{
	char req[8192];
	size_t n = 0;
	int fd = connect_to(port), code = -1;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(req, sizeof(req), fmt, ap);
	va_end(ap);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t got;
		assert_int_equal(poll(&p, 1, 10000), 1);
		got = read(fd, resp + n, sizeof(resp) - 1 - n);
		if (got <= 0)
			break;
		n += (size_t)got;
		resp[n] = '\0';
		if (until && strstr(resp, until))
			break;
	}
	resp[n] = '\0';
	close(fd);
	sscanf(resp, "HTTP/1.1 %d", &code);
	return code;
}

static const char *body_of(void)
{
	const char *b = strstr(resp, "\r\n\r\n");

	return b ? b + 4 : "";
}

struct asker {
	struct approvals *a;
	pthread_t t;
	enum policy_action result;
	char who[64];
};

static void *ask(void *arg)
{
	struct asker *k = arg;

	k->result = approvals_ask(k->a, "connect", "api.openai.com.evil.example", 443, k->who, sizeof(k->who));
	return NULL;
}

static void test_server(void **state)
{
	struct ui_opts o = {0};
	struct ui *u;
	struct served s = {0};
	struct asker k = {0};
	char why[300], cookie[128], body[256], *p;
	const struct ui_auth *a;
	uint16_t port;
	struct passwd *pw = getpwuid(getuid());

	assert_int_equal(served_start(&s, "sb"), 0);
	make_tree("sb");
	assert_int_equal(ui_start(&o, &u, why, sizeof(why)), 0);
	a = ui_auth(u);
	port = a->port;
	snprintf(cookie, sizeof(cookie), "%s=%s", a->cookie_name, a->token);

	/* No token, a wrong one, the token for another port's cookie name. */
	assert_int_equal(http(port, NULL, "GET / HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n", port), 403);
	assert_string_equal(body_of(), "");
	assert_int_equal(http(port, NULL, "GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n", port), 403);
	/* The last digit changed (to one it is not: a token may end in 0). */
	assert_int_equal(http(port, NULL, "GET /?token=%.63s%c HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n",
			      a->token, a->token[63] == '0' ? '1' : '0', port), 403);
	assert_int_equal(http(port, NULL, "GET / HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: kosa8_ui_1=%s\r\nConnection: close\r\n\r\n",
			      port, a->token), 403);
	/* The token in the query: a cookie, and off to "/". */
	assert_int_equal(http(port, NULL, "GET /?token=%s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n",
			      a->token, port), 303);
	assert_non_null(p = strstr(resp, "Set-Cookie: "));
	assert_non_null(strstr(p, cookie));
	assert_non_null(strstr(p, "HttpOnly"));
	assert_non_null(strstr(p, "SameSite=Strict"));
	assert_non_null(strstr(resp, "Location: /\r\n"));
	/* With the cookie: the page, with the CSRF token in it. */
	assert_int_equal(http(port, NULL, "GET / HTTP/1.1\r\nHost: localhost:%u\r\nCookie: %s\r\nConnection: close\r\n\r\n",
			      port, cookie), 200);
	assert_non_null(strstr(resp, a->csrf));
	assert_non_null(strstr(resp, "Content-Security-Policy: default-src 'none'"));
	/* A rebinding Host, a foreign Origin: nothing, even with the cookie. */
	assert_int_equal(http(port, NULL, "GET /api/state HTTP/1.1\r\nHost: evil.example:%u\r\nCookie: %s\r\nConnection: close\r\n\r\n",
			      port, cookie), 403);
	assert_string_equal(body_of(), "");
	assert_int_equal(http(port, NULL, "GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nOrigin: http://evil.example\r\n"
			      "Cookie: %s\r\nConnection: close\r\n\r\n", port, cookie), 403);
	assert_string_equal(body_of(), "");

	/* A real request waits in the served supervisor's queue. */
	k.a = s.a;
	assert_int_equal(pthread_create(&k.t, NULL, ask, &k), 0);
	for (int i = 0; i < 200; i++) {
		assert_int_equal(http(port, NULL, "GET /api/state HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
				      "Connection: close\r\n\r\n", port, cookie), 200);
		if (strstr(body_of(), "api.openai.com.evil.example"))
			break;
		usleep(20000);
	}
	assert_non_null(strstr(body_of(), "\"registered\":\"evil.example\""));
	assert_non_null(strstr(body_of(), "\"sandbox\":\"sb\""));
	/* The checkpoint tree, as the supervisor's records say. */
	assert_non_null(strstr(body_of(), "{\"id\":\"c1\",\"parent\":\"\",\"created\":1700000001,"
				   "\"message\":\"step 1\",\"memory_bytes\":1048576}"));
	assert_non_null(strstr(body_of(), "{\"id\":\"c3\",\"parent\":\"c1\""));
	assert_non_null(strstr(body_of(), "\"running_from\":\"c2\""));
	/* Live: the event stream carries it too. */
	assert_int_equal(http(port, "evil.example", "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n\r\n",
			      port, cookie), 200);
	assert_non_null(strstr(resp, "Content-Type: text/event-stream"));
	assert_non_null(strstr(resp, "event: state\ndata: {"));

	snprintf(body, sizeof(body), "{\"sandbox\":\"sb\",\"id\":1,\"answer\":\"deny\"}");
	/* POSTs that another site's page could make: refused, nothing done. */
	assert_int_equal(http(port, NULL, "POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
			      "X-Kosa8-CSRF: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
			      "Connection: close\r\n\r\n%s", port, cookie, a->csrf, strlen(body), body), 403);
	assert_int_equal(http(port, NULL, "POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
			      "Origin: http://evil.example\r\nX-Kosa8-CSRF: %s\r\nContent-Type: application/json\r\n"
			      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", port, cookie, a->csrf, strlen(body), body), 403);
	assert_int_equal(http(port, NULL, "POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
			      "Origin: http://127.0.0.1:%u\r\nContent-Type: application/json\r\n"
			      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", port, cookie, port, strlen(body), body), 403);
	assert_int_equal(http(port, NULL, "POST /api/answer?token=%s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n"
			      "Origin: http://127.0.0.1:%u\r\nX-Kosa8-CSRF: %s\r\nContent-Type: application/json\r\n"
			      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", a->token, port, port, a->csrf,
			      strlen(body), body), 403);
	assert_string_equal(body_of(), "");
	/* A rewind or fork: the same checks as an answer, then the body's. */
	assert_int_equal(http(port, NULL, "POST /api/checkpoint HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
			      "Origin: http://127.0.0.1:%u\r\nContent-Type: application/json\r\n"
			      "Content-Length: 48\r\nConnection: close\r\n\r\n"
			      "{\"sandbox\":\"sb\",\"op\":\"rewind\",\"checkpoint\":\"c1\"}", port, cookie, port), 403);
	assert_string_equal(body_of(), "");
	assert_int_equal(http(port, NULL, "POST /api/checkpoint HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
			      "Origin: http://evil.example\r\nX-Kosa8-CSRF: %s\r\nContent-Type: application/json\r\n"
			      "Content-Length: 48\r\nConnection: close\r\n\r\n"
			      "{\"sandbox\":\"sb\",\"op\":\"rewind\",\"checkpoint\":\"c1\"}", port, cookie, a->csrf), 403);
	assert_int_equal(http(port, NULL, "POST /api/checkpoint HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
			      "Origin: http://127.0.0.1:%u\r\nX-Kosa8-CSRF: %s\r\nContent-Type: application/json\r\n"
			      "Content-Length: 46\r\nConnection: close\r\n\r\n"
			      "{\"sandbox\":\"sb\",\"op\":\"fork\",\"checkpoint\":\"c1\"}", port, cookie, port, a->csrf), 400);
	assert_non_null(strstr(body_of(), "a fork needs a valid name"));
	/* Too large a body: refused before it is read. */
	assert_int_equal(http(port, NULL, "POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
			      "Origin: http://127.0.0.1:%u\r\nX-Kosa8-CSRF: %s\r\nContent-Type: application/json\r\n"
			      "Content-Length: 100000\r\nConnection: close\r\n\r\n", port, cookie, port, a->csrf), 413);
	/* Still waiting after all that. */
	{
		cJSON *l = approvals_list(s.a);
		assert_int_equal(cJSON_GetArraySize(l), 1);
		cJSON_Delete(l);
	}
	/* The page's own POST: answered through the supervisor's call. */
	snprintf(body, sizeof(body), "{\"sandbox\":\"sb\",\"id\":1,\"answer\":\"allow\"}");
	assert_int_equal(http(port, NULL, "POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
			      "Origin: http://127.0.0.1:%u\r\nX-Kosa8-CSRF: %s\r\nContent-Type: application/json\r\n"
			      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", port, cookie, port, a->csrf,
			      strlen(body), body), 200);
	assert_string_equal(body_of(), "{\"ok\":true}");
	pthread_join(k.t, NULL);
	assert_int_equal(k.result, POLICY_ALLOW);
	assert_string_equal(k.who, pw->pw_name);
	/* Answered already: the supervisor's refusal reaches the page. */
	assert_int_equal(http(port, NULL, "POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nCookie: %s\r\n"
			      "Origin: http://127.0.0.1:%u\r\nX-Kosa8-CSRF: %s\r\nContent-Type: application/json\r\n"
			      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", port, cookie, port, a->csrf,
			      strlen(body), body), 409);
	assert_non_null(strstr(body_of(), "no such request waiting"));

	ui_stop(u);
	served_stop(&s);
}

static void test_listen_refused(void **state)
{
	struct ui_opts o = {.listen = "0.0.0.0"};
	struct ui *u;
	char why[300];

	assert_int_equal(ui_start(&o, &u, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "no TLS"));
	o.listen = "192.168.1.1";
	assert_int_equal(ui_start(&o, &u, why, sizeof(why)), -EPERM);
}

static int setup(void **state)
{
	char sub[PATH_MAX];

	snprintf(dir, sizeof(dir), "/tmp/kosa8-ui-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(sub, sizeof(sub), "%s/state", dir);
	setenv("KOSA8_STATE_DIR", sub, 1);
	snprintf(sub, sizeof(sub), "%s/run", dir);
	setenv("XDG_RUNTIME_DIR", sub, 1);
	snprintf(sub, sizeof(sub), "%s/cfg", dir);
	setenv("KOSA8_CONFIG_DIR", sub, 1);
	return mkdir_p(sub, 0700);
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checks),
		cmocka_unit_test(test_regdomain),
		cmocka_unit_test(test_action),
		cmocka_unit_test(test_ckpt_action),
		cmocka_unit_test(test_server),
		cmocka_unit_test(test_listen_refused),
	};
	return cmocka_run_group_tests_name("ui", tests, setup, teardown);
}
