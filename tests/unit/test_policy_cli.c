/* `kosa8 policy` and `kosa8 approvals` run for real (the kosa8 binary of
 * the same build).  For approvals this process plays the sandbox's
 * supervisor: it listens on the sandbox's control socket and serves it with
 * control_serve_approvals, as the supervisor does, while a thread waits in
 * approvals_ask for the CLI's answer. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
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
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "served_approvals.h"

#include "shell_run.h"

#include "common/util.h"
#include "proxy/policy.h"
#include "supervisor/approvals.h"
#include "supervisor/control.h"
#include "sandbox/sandbox.h"

static char kosa8[PATH_MAX];
static char dir[64];

static void shell_vars(char *buf, size_t len)
{
	snprintf(buf, len, "K='%s'; D='%s'", kosa8, dir);
}

static void put(const char *rel, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	assert_non_null(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	char self[PATH_MAX - 16], sdir[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	struct sandbox_cfg cfg = {.name = "sb", .mem = 256 << 20, .cpus = 1};
	char *slash;

	if (n <= 0)
		return -1;
	self[n] = '\0';
	/* <build>/tests/test_policy_cli -> <build>/kosa8 */
	slash = strrchr(self, '/');
	*slash = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	snprintf(kosa8, sizeof(kosa8), "%s/kosa8", self);
	if (access(kosa8, X_OK))
		return -1;
	snprintf(dir, sizeof(dir), "/tmp/kosa8-policy-cli-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	shell_use_dirs(dir);
	if (mkdir_p(getenv("KOSA8_CONFIG_DIR"), 0700) || sandbox_state_dir("sb", sdir, sizeof(sdir)) ||
	    mkdir_p(sdir, 0700) || sandbox_cfg_save(sdir, &cfg))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	return run("rm -rf $D") ? -1 : 0;
}

static void test_check_exit_codes(void **state)
{
	char want[512];

	put("cfg/policy", "# the user's\ndefault ask\nallow *.github.com:443\ndeny gist.github.com\n");
	put("state/sandboxes/sb/policy", "allow pypi.org\ndeny api.github.com\n");
	assert_int_equal(run("$K policy check api.github.com:443"), 0);
	snprintf(want, sizeof(want), "allow api.github.com:443: allow *.github.com:443 (%s/cfg/policy:3)\n", dir);
	assert_string_equal(out, want);
	assert_int_equal(run("$K policy check gist.github.com:443"), 1);
	assert_int_equal(run("$K policy check api.github.com:22"), 3);
	assert_non_null(strstr(out, "ask api.github.com:22: default ask ("));
	assert_int_equal(run("$K policy check 140.82.112.3:443"), 1);
	assert_non_null(strstr(out, "not a host name"));
	assert_int_equal(run("$K policy check pypi.org:0"), 2);
	/* The sandbox's file over the user's. */
	assert_int_equal(run("$K policy check pypi.org --sandbox sb"), 0);
	assert_int_equal(run("$K policy check api.github.com:443 --sandbox sb"), 1);
	snprintf(want, sizeof(want), "deny api.github.com:443: deny api.github.com (%s/state/sandboxes/sb/policy:2)\n",
		 dir);
	assert_string_equal(out, want);
	assert_int_equal(run("$K policy check pypi.org --sandbox nosuch"), 2);
	assert_non_null(strstr(out, "no sandbox 'nosuch'"));
	assert_int_equal(run("$K policy check"), 2);
	assert_int_equal(run("$K policy frobnicate"), 2);
}

static void test_show(void **state)
{
	char want[1024];

	put("cfg/policy", "default ask\nallow a.com\n");
	put("state/sandboxes/sb/policy", "deny b.com:25\n");
	assert_int_equal(run("$K policy show --sandbox sb"), 0);
	snprintf(want, sizeof(want),
		 "# user defaults: %s/cfg/policy\n# sandbox:       %s/state/sandboxes/sb/policy\n"
		 "default ask\t# %s/cfg/policy:1\nallow a.com\t# ports 443 and 80, %s/cfg/policy:2\n"
		 "deny b.com:25\t# %s/state/sandboxes/sb/policy:1\n",
		 dir, dir, dir, dir, dir);
	assert_string_equal(out, want);
	/* What show prints reads back as the same policy. */
	assert_int_equal(run("$K policy show --sandbox sb > $D/cfg/policy.new && "
			     "rm $D/state/sandboxes/sb/policy && mv $D/cfg/policy.new $D/cfg/policy && "
			     "$K policy check b.com:25 && echo unexpected"), 1);
	assert_int_equal(run("$K policy check a.com:80"), 0);
	/* A bare allow is not port 25 (default ask here): asked, not allowed. */
	assert_int_equal(run("$K policy check a.com:25"), 3);
	/* A bad file: path, line, reason, exit 2. */
	put("cfg/policy", "allow a.com\n\nallow b..com\n");
	assert_int_equal(run("$K policy show"), 2);
	assert_non_null(strstr(out, "/cfg/policy:3: 'b..com' is not a host name: empty label"));
	unlink(strcat(strcpy(want, dir), "/cfg/policy"));
}

/* ---- approvals through a served control socket ---- */

struct asker {
	struct approvals *a;
	const char *name;
	pthread_t t;
	enum policy_action result;
	char who[64];
};

static void *ask(void *arg)
{
	struct asker *k = arg;

	k->result = approvals_ask(k->a, "connect", k->name, 443, k->who, sizeof(k->who));
	return NULL;
}

static void wait_waiting(struct approvals *a, int n)
{
	for (int i = 0; i < 500; i++) {
		cJSON *l = approvals_list(a);
		int got = cJSON_GetArraySize(l);
		cJSON_Delete(l);
		if (got == n)
			return;
		usleep(10000);
	}
	fail_msg("never saw %d waiting requests", n);
}

static void test_approvals_cli(void **state)
{
	struct served s = {0};
	struct asker k = {0};
	struct policy *p;
	char rdir[PATH_MAX], sock[PATH_MAX + 16];
	struct passwd *pw = getpwuid(getuid());

	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(approvals_new(p, 20000, &s.a), 0);
	assert_int_equal(sandbox_run_dir("sb", rdir, sizeof(rdir)), 0);
	assert_int_equal(mkdir_p(rdir, 0700), 0);
	snprintf(sock, sizeof(sock), "%s/control.sock", rdir);
	assert_true((s.listen_fd = control_listen(sock)) >= 0);
	assert_int_equal(pthread_create(&s.t, NULL, served_loop, &s), 0);

	assert_int_equal(run("$K approvals"), 0);
	assert_string_equal(out, "no requests waiting\n");
	k.a = s.a;
	k.name = "registry.npmjs.org";
	assert_int_equal(pthread_create(&k.t, NULL, ask, &k), 0);
	for (int i = 0; i < 100 && !strstr(out, "registry"); i++) {
		usleep(50000);
		run("$K approvals sb");
	}
	assert_non_null(strstr(out, "SANDBOX"));
	assert_non_null(strstr(out, "sb                        1 connect  registry.npmjs.org:443"));
	/* Who owns the name, set apart (libpsl). */
	assert_non_null(strstr(out, "REGISTERED DOMAIN"));
	assert_non_null(strstr(out, " npmjs.org\n"));
	assert_int_equal(run("$K approvals deny sb 7"), 1);
	assert_non_null(strstr(out, "request 7: no such request waiting"));
	assert_int_equal(run("$K approvals allow sb x"), 2);
	assert_int_equal(run("$K approvals always sb 1"), 0);
	assert_string_equal(out, "sb: request 1: allow always\n");
	pthread_join(k.t, NULL);
	assert_int_equal(k.result, POLICY_ALLOW);
	assert_string_equal(k.who, pw->pw_name);
	assert_int_equal(policy_decide(p, "registry.npmjs.org", 443, NULL, 0), POLICY_ALLOW);
	/* watch: each new request is put to the user, answered as typed. */
	k = (struct asker){.a = s.a, .name = "evil.example"};
	assert_int_equal(pthread_create(&k.t, NULL, ask, &k), 0);
	wait_waiting(s.a, 1);
	assert_int_equal(run("printf 'd\\n' | $K approvals watch sb --count 1"), 0);
	assert_non_null(strstr(out, "sb: request 2: connect evil.example:443 (registered domain evil.example, waiting "));
	assert_non_null(strstr(out, "sb: request 2: deny\n"));
	pthread_join(k.t, NULL);
	assert_int_equal(k.result, POLICY_DENY);
	assert_string_equal(k.who, pw->pw_name);
	/* Skipped, then the input ends: nothing answered, watch ends. */
	k = (struct asker){.a = s.a, .name = "other.example"};
	assert_int_equal(pthread_create(&k.t, NULL, ask, &k), 0);
	wait_waiting(s.a, 1);
	assert_int_equal(run("printf 's\\n' | $K approvals watch sb"), 0);
	assert_non_null(strstr(out, "request 3: connect other.example:443"));
	wait_waiting(s.a, 1);
	assert_int_equal(run("$K approvals allow sb 3"), 0);
	pthread_join(k.t, NULL);
	assert_int_equal(k.result, POLICY_ALLOW);
	/* A sandbox that is not running. */
	assert_int_equal(run("$K approvals other"), 1);
	assert_non_null(strstr(out, "sandbox 'other' is not running"));

	s.stop = true;
	pthread_join(s.t, NULL);
	close(s.listen_fd);
	unlink(sock);
	approvals_free(s.a);
	policy_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_exit_codes),
		cmocka_unit_test(test_show),
		cmocka_unit_test(test_approvals_cli),
	};
	return cmocka_run_group_tests_name("policy_cli", tests, setup, teardown);
}
