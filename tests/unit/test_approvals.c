/* The approvals queue: a request blocks its thread until another thread
 * answers; timeouts deny; "allow once" passes for a while then asks again;
 * "allow always" adds a rule; duplicate requests join; shutdown releases
 * everyone.  And the control socket's approvals requests. */
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/util.h"
#include "proxy/policy.h"
#include "supervisor/approvals.h"
#include "supervisor/control.h"

struct asker {
	struct approvals *a;
	const char *kind, *name;
	uint16_t port;
	pthread_t t;
	enum policy_action result;
	char who[64];
	int done;
};

static void *ask_thread(void *arg)
{
	struct asker *k = arg;

	k->result = approvals_ask(k->a, k->kind, k->name, k->port, k->who, sizeof(k->who));
	__atomic_store_n(&k->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void start(struct asker *k, struct approvals *a, const char *kind, const char *name,
		  uint16_t port)
{
	*k = (struct asker){.a = a, .kind = kind, .name = name, .port = port, .result = 99};
	assert_int_equal(pthread_create(&k->t, NULL, ask_thread, k), 0);
}

/* Waits until n requests are waiting; returns the list. */
static cJSON *wait_waiting(struct approvals *a, int n)
{
	for (int i = 0; i < 500; i++) {
		cJSON *l = approvals_list(a);
		if (cJSON_GetArraySize(l) == n)
			return l;
		cJSON_Delete(l);
		usleep(10000);
	}
	fail_msg("never saw %d waiting requests", n);
	return NULL;
}

static uint64_t first_id(cJSON *l)
{
	return (uint64_t)cJSON_GetObjectItem(cJSON_GetArrayItem(l, 0), "id")->valuedouble;
}

static void test_blocks_until_answered(void **state)
{
	struct approvals *a;
	struct asker k;
	cJSON *l, *r;

	assert_int_equal(approvals_new(NULL, 10000, &a), 0);
	start(&k, a, "dns", "Registry.NPMjs.org.", 0);
	l = wait_waiting(a, 1);
	r = cJSON_GetArrayItem(l, 0);
	assert_string_equal(cJSON_GetObjectItem(r, "kind")->valuestring, "dns");
	assert_string_equal(cJSON_GetObjectItem(r, "name")->valuestring, "registry.npmjs.org");
	assert_int_equal(cJSON_GetObjectItem(r, "port")->valueint, 0);
	assert_true(cJSON_GetObjectItem(r, "waiting_ms")->valuedouble >= 0);
	/* Still blocked a while later: nobody answered. */
	usleep(100000);
	assert_int_equal(__atomic_load_n(&k.done, __ATOMIC_SEQ_CST), 0);
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_ALLOW_ONCE, "alice"), 0);
	pthread_join(k.t, NULL);
	assert_int_equal(k.result, POLICY_ALLOW);
	assert_string_equal(k.who, "alice");
	/* Answered: gone from the list, cannot be answered again. */
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_DENY, "alice"), -ENOENT);
	assert_int_equal(approvals_answer(a, 12345, APPROVAL_DENY, "alice"), -ENOENT);
	cJSON_Delete(l);
	l = approvals_list(a);
	assert_int_equal(cJSON_GetArraySize(l), 0);
	cJSON_Delete(l);
	approvals_free(a);
}

static void test_timeout_denies(void **state)
{
	struct approvals *a;
	char who[64];

	assert_int_equal(approvals_new(NULL, 200, &a), 0);
	assert_int_equal(approvals_ask(a, "connect", "slow.example", 443, who, sizeof(who)), POLICY_DENY);
	assert_string_equal(who, "timeout");
	assert_int_equal(approvals_answer(a, 1, APPROVAL_ALLOW_ONCE, "late"), -ENOENT);
	approvals_free(a);
}

static void test_once_expires(void **state)
{
	struct approvals *a;
	struct asker k;
	cJSON *l;
	char who[64];

	assert_int_equal(approvals_new(NULL, 300, &a), 0);
	approvals_set_once_ms(a, 2000);
	start(&k, a, "dns", "pypi.org", 0);
	l = wait_waiting(a, 1);
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_ALLOW_ONCE, "alice"), 0);
	cJSON_Delete(l);
	pthread_join(k.t, NULL);
	assert_int_equal(k.result, POLICY_ALLOW);
	/* The connection that follows the DNS answer does not ask again. */
	memset(who, 0, sizeof(who));
	assert_int_equal(approvals_ask(a, "connect", "pypi.org", 443, who, sizeof(who)), POLICY_ALLOW);
	assert_string_equal(who, "alice");
	/* Another name is not covered. */
	assert_int_equal(approvals_ask(a, "connect", "other.org", 443, who, sizeof(who)), POLICY_DENY);
	assert_string_equal(who, "timeout");
	/* After the window, pypi.org waits again (and times out here). */
	usleep(2100000);
	assert_int_equal(approvals_ask(a, "connect", "pypi.org", 443, who, sizeof(who)), POLICY_DENY);
	assert_string_equal(who, "timeout");
	approvals_free(a);
}

static void test_once_for_a_port(void **state)
{
	struct approvals *a;
	struct asker k;
	cJSON *l;
	char who[64];

	assert_int_equal(approvals_new(NULL, 200, &a), 0);
	start(&k, a, "connect", "git.example", 22);
	l = wait_waiting(a, 1);
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_ALLOW_ONCE, "alice"), 0);
	cJSON_Delete(l);
	pthread_join(k.t, NULL);
	assert_int_equal(approvals_ask(a, "connect", "git.example", 22, who, sizeof(who)), POLICY_ALLOW);
	/* Port 22 was approved, not 25. */
	assert_int_equal(approvals_ask(a, "connect", "git.example", 25, who, sizeof(who)), POLICY_DENY);
	approvals_free(a);
}

static void test_always_adds_rule(void **state)
{
	struct policy *p;
	struct approvals *a;
	struct asker k;
	cJSON *l;
	char rule[160], dir[] = "/tmp/k8-approvals-XXXXXX", path[64];
	uint8_t *text;
	size_t len;

	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(policy_add_text(p, "ask *.npmjs.org\n", 16, "sandbox", NULL), 0);
	assert_int_equal(policy_decide(p, "registry.npmjs.org", 443, NULL, 0), POLICY_ASK);
	assert_int_equal(approvals_new(p, 10000, &a), 0);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/policy", dir);
	assert_int_equal(approvals_set_policy_file(a, path), 0);
	start(&k, a, "dns", "registry.npmjs.org", 0);
	l = wait_waiting(a, 1);
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_ALLOW_ALWAYS, "bob"), 0);
	cJSON_Delete(l);
	pthread_join(k.t, NULL);
	assert_int_equal(k.result, POLICY_ALLOW);
	assert_string_equal(k.who, "bob");
	assert_int_equal(policy_decide(p, "registry.npmjs.org", 443, rule, sizeof(rule)), POLICY_ALLOW);
	assert_string_equal(rule, "allow registry.npmjs.org (approval 1 by bob:1)");
	/* Only that name. */
	assert_int_equal(policy_decide(p, "www.npmjs.org", 443, NULL, 0), POLICY_ASK);
	/* For a connection, always is for its port. */
	start(&k, a, "connect", "www.npmjs.org", 8443);
	l = wait_waiting(a, 1);
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_ALLOW_ALWAYS, "bob"), 0);
	cJSON_Delete(l);
	pthread_join(k.t, NULL);
	assert_int_equal(policy_decide(p, "www.npmjs.org", 8443, NULL, 0), POLICY_ALLOW);
	assert_int_equal(policy_decide(p, "www.npmjs.org", 443, NULL, 0), POLICY_ASK);
	/* A name with a newline cannot write a rule of its own into the file. */
	start(&k, a, "connect", "third.npmjs.org", 443);
	l = wait_waiting(a, 1);
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_ALLOW_ALWAYS, "eve\nallow evil.example"), 0);
	cJSON_Delete(l);
	pthread_join(k.t, NULL);
	assert_string_equal(k.who, "eve?allow evil.example");
	approvals_free(a);
	policy_free(p);
	/* Both rules were written to the sandbox's file, which reads back. */
	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(policy_add_file(p, path, NULL), 0);
	assert_int_equal(policy_decide(p, "registry.npmjs.org", 443, rule, sizeof(rule)), POLICY_ALLOW);
	assert_non_null(strstr(rule, "/policy:1)"));
	assert_int_equal(policy_decide(p, "www.npmjs.org", 8443, rule, sizeof(rule)), POLICY_ALLOW);
	assert_non_null(strstr(rule, "/policy:2)"));
	assert_int_equal(policy_decide(p, "www.npmjs.org", 443, NULL, 0), POLICY_DENY);
	assert_int_equal(policy_decide(p, "evil.example", 443, NULL, 0), POLICY_DENY);
	assert_int_equal(policy_decide(p, "third.npmjs.org", 443, NULL, 0), POLICY_ALLOW);
	policy_free(p);
	assert_int_equal(read_file(path, 4096, &text, &len), 0);
	assert_non_null(strstr((char *)text, "allow registry.npmjs.org\t# approval 1 by bob, 20"));
	free(text);
	unlink(path);
	rmdir(dir);
}

static void test_deny_and_ask_again(void **state)
{
	struct approvals *a;
	struct asker k;
	cJSON *l;
	uint64_t id;

	assert_int_equal(approvals_new(NULL, 10000, &a), 0);
	start(&k, a, "connect", "x.example", 443);
	l = wait_waiting(a, 1);
	id = first_id(l);
	cJSON_Delete(l);
	assert_int_equal(approvals_answer(a, id, APPROVAL_DENY, "carol"), 0);
	pthread_join(k.t, NULL);
	assert_int_equal(k.result, POLICY_DENY);
	assert_string_equal(k.who, "carol");
	/* A deny is not remembered: the next attempt is a new request. */
	start(&k, a, "connect", "x.example", 443);
	l = wait_waiting(a, 1);
	assert_true(first_id(l) > id);
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_DENY, "carol"), 0);
	cJSON_Delete(l);
	pthread_join(k.t, NULL);
	approvals_free(a);
}

static void test_duplicates_join(void **state)
{
	struct approvals *a;
	struct asker k[4];
	cJSON *l;

	assert_int_equal(approvals_new(NULL, 10000, &a), 0);
	start(&k[0], a, "connect", "dup.example", 443);
	cJSON_Delete(wait_waiting(a, 1));
	start(&k[1], a, "connect", "DUP.example.", 443);
	start(&k[2], a, "connect", "dup.example", 443);
	start(&k[3], a, "connect", "dup.example", 80); /* another port: its own request */
	/* Until the three :443 askers wait on one request (oldest first). */
	for (int i = 0; i < 1000; i++) {
		l = approvals_list(a);
		if (cJSON_GetArraySize(l) == 2 &&
		    cJSON_GetObjectItem(cJSON_GetArrayItem(l, 0), "waiters")->valueint == 3)
			break;
		cJSON_Delete(l);
		l = NULL;
		usleep(10000);
	}
	assert_non_null(l);
	assert_int_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(l, 0), "port")->valueint, 443);
	assert_int_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(l, 1), "waiters")->valueint, 1);
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_ALLOW_ONCE, "dave"), 0);
	for (int i = 0; i < 3; i++) {
		pthread_join(k[i].t, NULL);
		assert_int_equal(k[i].result, POLICY_ALLOW);
		assert_string_equal(k[i].who, "dave");
	}
	assert_int_equal(__atomic_load_n(&k[3].done, __ATOMIC_SEQ_CST), 0);
	cJSON_Delete(l);
	/* Shutdown releases the one still waiting, with a deny. */
	approvals_free(a);
	pthread_join(k[3].t, NULL);
	assert_int_equal(k[3].result, POLICY_DENY);
	assert_string_equal(k[3].who, "shutdown");
}

static void test_not_a_name(void **state)
{
	struct approvals *a;
	char who[64];

	assert_int_equal(approvals_new(NULL, 10000, &a), 0);
	/* Nothing a person could approve: denied at once, never queued. */
	assert_int_equal(approvals_ask(a, "connect", "10.0.0.1", 443, who, sizeof(who)), POLICY_DENY);
	assert_int_equal(approvals_ask(a, "connect", "", 443, who, sizeof(who)), POLICY_DENY);
	approvals_free(a);
}

static void test_queue_bounded(void **state)
{
	struct approvals *a;
	struct asker k[65];
	char names[65][32], who[64];

	assert_int_equal(approvals_new(NULL, 10000, &a), 0);
	for (int i = 0; i < 64; i++) {
		snprintf(names[i], sizeof(names[i]), "n%d.example", i);
		start(&k[i], a, "dns", names[i], 0);
	}
	cJSON_Delete(wait_waiting(a, 64));
	/* The 65th is refused at once; the 64 are still there. */
	assert_int_equal(approvals_ask(a, "dns", "one-more.example", 0, who, sizeof(who)), POLICY_DENY);
	assert_string_equal(who, "queue full");
	cJSON_Delete(wait_waiting(a, 64));
	approvals_free(a);
	for (int i = 0; i < 64; i++) {
		pthread_join(k[i].t, NULL);
		assert_int_equal(k[i].result, POLICY_DENY);
		assert_string_equal(k[i].who, "shutdown");
	}
}

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static char records[8][256];
static int nrecords;

static void record(void *arg, const char *type, cJSON *d)
{
	char *s = cJSON_PrintUnformatted(d);

	pthread_mutex_lock(&rec_lock);
	if (nrecords < 8)
		snprintf(records[nrecords++], sizeof(records[0]), "%s %s", type, s);
	pthread_mutex_unlock(&rec_lock);
	free(s);
	cJSON_Delete(d);
}

static void test_audited(void **state)
{
	struct approvals *a;
	struct asker k;
	cJSON *l;
	char who[64];

	nrecords = 0;
	assert_int_equal(approvals_new(NULL, 200, &a), 0);
	approvals_set_audit(a, record, NULL);
	start(&k, a, "dns", "a.example", 0);
	l = wait_waiting(a, 1);
	assert_int_equal(approvals_answer(a, first_id(l), APPROVAL_ALLOW_ALWAYS, "erin"), 0);
	cJSON_Delete(l);
	pthread_join(k.t, NULL);
	approvals_ask(a, "connect", "b.example", 443, who, sizeof(who));
	approvals_free(a);
	assert_int_equal(nrecords, 4);
	assert_non_null(strstr(records[0], "approval.request {\"id\":1,\"kind\":\"dns\",\"name\":\"a.example\",\"port\":0,"));
	assert_non_null(strstr(records[1], "approval.answer {\"id\":1,"));
	assert_non_null(strstr(records[1], "\"answer\":\"allow always\",\"who\":\"erin\""));
	assert_non_null(strstr(records[2], "approval.request {\"id\":2,\"kind\":\"connect\",\"name\":\"b.example\",\"port\":443"));
	assert_non_null(strstr(records[3], "\"answer\":\"deny\",\"who\":\"timeout\""));
}

/* ---- the control socket's side ---- */

static cJSON *call(struct approvals *a, const char *json)
{
	int sv[2];
	cJSON *req = cJSON_Parse(json), *reply = NULL;

	assert_non_null(req);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(control_serve_approvals(a, sv[0], req), 1);
	assert_int_equal(control_recv(sv[1], &reply, 2000), 0);
	close(sv[0]);
	close(sv[1]);
	cJSON_Delete(req);
	return reply;
}

static void test_control_requests(void **state)
{
	struct approvals *a;
	struct asker k;
	struct passwd *pw = getpwuid(getuid());
	cJSON *r, *req, *l;
	char json[128];

	assert_int_equal(approvals_new(NULL, 10000, &a), 0);
	/* Not an approvals op: left to the dispatcher, nothing sent. */
	req = cJSON_Parse("{\"op\":\"status\"}");
	assert_int_equal(control_serve_approvals(a, -1, req), 0);
	cJSON_Delete(req);
	start(&k, a, "connect", "ctl.example", 443);
	cJSON_Delete(wait_waiting(a, 1));
	r = call(a, "{\"op\":\"approvals.list\"}");
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	l = cJSON_GetObjectItem(r, "requests");
	assert_int_equal(cJSON_GetArraySize(l), 1);
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(l, 0), "name")->valuestring, "ctl.example");
	snprintf(json, sizeof(json), "{\"op\":\"approvals.answer\",\"id\":%llu,\"answer\":\"maybe\"}",
		 (unsigned long long)first_id(l));
	cJSON_Delete(call(a, json) /* bad answer word */);
	snprintf(json, sizeof(json), "{\"op\":\"approvals.answer\",\"id\":%llu,\"answer\":\"allow\"}",
		 (unsigned long long)first_id(l));
	cJSON_Delete(r);
	r = call(a, json);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	cJSON_Delete(r);
	pthread_join(k.t, NULL);
	assert_int_equal(k.result, POLICY_ALLOW);
	/* Who answered: the peer's user, from its credentials. */
	assert_non_null(pw);
	assert_string_equal(k.who, pw->pw_name);
	/* Again: no longer waiting. */
	r = call(a, json);
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	assert_non_null(strstr(cJSON_GetObjectItem(r, "error")->valuestring, "no such request"));
	cJSON_Delete(r);
	r = call(a, "{\"op\":\"approvals.answer\",\"id\":-1,\"answer\":\"deny\"}");
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	cJSON_Delete(r);
	r = call(a, "{\"op\":\"approvals.frobnicate\"}");
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	cJSON_Delete(r);
	approvals_free(a);
	/* A sandbox without a queue says so. */
	r = call(NULL, "{\"op\":\"approvals.list\"}");
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")));
	cJSON_Delete(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocks_until_answered),
		cmocka_unit_test(test_timeout_denies),
		cmocka_unit_test(test_once_expires),
		cmocka_unit_test(test_once_for_a_port),
		cmocka_unit_test(test_always_adds_rule),
		cmocka_unit_test(test_deny_and_ask_again),
		cmocka_unit_test(test_duplicates_join),
		cmocka_unit_test(test_not_a_name),
		cmocka_unit_test(test_queue_bounded),
		cmocka_unit_test(test_audited),
		cmocka_unit_test(test_control_requests),
	};
	return cmocka_run_group_tests_name("approvals", tests, NULL, NULL);
}
