/* The egress policy: name normalisation, label-wise matching, precedence,
 * ports, every parse error with its line, and concurrent use. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "proxy/policy.h"

static struct policy *load(const char *text)
{
	struct policy *p;
	struct policy_error e;

	assert_int_equal(policy_new(&p), 0);
	if (policy_add_text(p, text, strlen(text), "t", &e)) {
		fail_msg("%s:%u: %s", e.file, e.line, e.reason);
	}
	return p;
}

static enum policy_action decide(struct policy *p, const char *name, uint16_t port)
{
	return policy_decide(p, name, port, NULL, 0);
}

static void test_normalise(void **state)
{
	char out[POLICY_NAME_MAX + 1], label63[64], label64[65], longname[300];
	static const char *const bad[] = {
		"", ".", "..", "a..b", ".a", "a.-b", "a-.b", "-a.com", "a.com-", "1.2.3.4", "127.1",
		"0x7f.1", "2130706433", "10.0.0.1.", "::1", "[::1]", "[::1]:443", "b\xc3\xbc" "cher.de",
		"under_score.com", "a b.com", "a/b.com", "*.a.com", "a.com..", "a.com:443",
	};

	assert_int_equal(policy_normalise_name("API.GitHub.COM.", out, sizeof(out)), 0);
	assert_string_equal(out, "api.github.com");
	assert_int_equal(policy_normalise_name("xn--bcher-kva.de", out, sizeof(out)), 0);
	assert_string_equal(out, "xn--bcher-kva.de");
	assert_int_equal(policy_normalise_name("localhost", out, sizeof(out)), 0);
	assert_int_equal(policy_normalise_name("1password.com", out, sizeof(out)), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (policy_normalise_name(bad[i], out, sizeof(out)) != -EINVAL)
			fail_msg("'%s' was taken as a host name", bad[i]);
	}
	/* Labels of 63 are fine, 64 are not; names of 253 are fine, 254 not. */
	memset(label63, 'a', 63);
	label63[63] = '\0';
	memset(label64, 'a', 64);
	label64[64] = '\0';
	assert_int_equal(policy_normalise_name(label63, out, sizeof(out)), 0);
	assert_int_equal(policy_normalise_name(label64, out, sizeof(out)), -EINVAL);
	snprintf(longname, sizeof(longname), "%s.%s.%s.%.61s", label63, label63, label63, label63);
	assert_int_equal(strlen(longname), 253);
	assert_int_equal(policy_normalise_name(longname, out, sizeof(out)), 0);
	strcat(longname, "a");
	assert_int_equal(policy_normalise_name(longname, out, sizeof(out)), -EINVAL);
	/* A buffer too small is an error, not a truncation. */
	assert_int_equal(policy_normalise_name("example.com", out, 5), -EINVAL);
}

static void test_wildcard_is_label_wise(void **state)
{
	struct policy *p = load("allow *.example.com\n");

	assert_int_equal(decide(p, "a.example.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "a.b.example.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "A.Example.COM.", 443), POLICY_ALLOW);
	/* The suffix itself is not below itself. */
	assert_int_equal(decide(p, "example.com", 443), POLICY_DENY);
	assert_int_equal(decide(p, "badexample.com", 443), POLICY_DENY);
	assert_int_equal(decide(p, "a.badexample.com", 443), POLICY_DENY);
	assert_int_equal(decide(p, "example.com.evil.net", 443), POLICY_DENY);
	assert_int_equal(decide(p, "a.example.com.evil.net", 443), POLICY_DENY);
	assert_int_equal(decide(p, "a.example.co", 443), POLICY_DENY);
	assert_int_equal(decide(p, ".example.com", 443), POLICY_DENY);
	assert_int_equal(decide(p, "a..example.com", 443), POLICY_DENY);
	policy_free(p);
}

static void test_exact_and_punycode(void **state)
{
	struct policy *p = load("allow example.com\nallow xn--bcher-kva.de\n");

	assert_int_equal(decide(p, "example.com", 80), POLICY_ALLOW);
	assert_int_equal(decide(p, "EXAMPLE.com.", 80), POLICY_ALLOW);
	assert_int_equal(decide(p, "www.example.com", 80), POLICY_DENY);
	assert_int_equal(decide(p, "XN--BCHER-KVA.DE", 443), POLICY_ALLOW);
	/* The Unicode spelling is not a host name on the wire: denied. */
	assert_int_equal(decide(p, "b\xc3\xbc" "cher.de", 443), POLICY_DENY);
	/* A lookalike A-label is another name. */
	assert_int_equal(decide(p, "xn--bcher-kvb.de", 443), POLICY_DENY);
	policy_free(p);
}

static void test_ip_literals_denied(void **state)
{
	struct policy *p = load("default ask\nallow *.com\n");
	char rule[128];

	assert_int_equal(policy_decide(p, "93.184.216.34", 443, rule, sizeof(rule)), POLICY_DENY);
	assert_string_equal(rule, "not a host name");
	assert_int_equal(decide(p, "127.0.0.1", 0), POLICY_DENY);
	assert_int_equal(decide(p, "0x7f000001", 80), POLICY_DENY);
	assert_int_equal(decide(p, "::1", 80), POLICY_DENY);
	assert_int_equal(decide(p, "[2606:4700::1]", 80), POLICY_DENY);
	assert_int_equal(decide(p, NULL, 80), POLICY_DENY);
	/* ... while a name still gets the default. */
	assert_int_equal(decide(p, "unknown.net", 80), POLICY_ASK);
	policy_free(p);
}

static void test_deny_wins(void **state)
{
	struct policy *p = load("deny *.example.com\nallow a.example.com\nallow *.example.com\n"
				"allow api.good.org:443\ndeny *.good.org\n");
	char rule[128];

	assert_int_equal(policy_decide(p, "a.example.com", 443, rule, sizeof(rule)), POLICY_DENY);
	assert_string_equal(rule, "deny *.example.com (t:1)");
	/* Order does not matter for a deny, nor does specificity. */
	assert_int_equal(policy_decide(p, "api.good.org", 443, rule, sizeof(rule)), POLICY_DENY);
	assert_string_equal(rule, "deny *.good.org (t:5)");
	assert_int_equal(decide(p, "api.good.org", 0), POLICY_DENY);
	policy_free(p);
}

static void test_specific_rule_decides(void **state)
{
	struct policy *p = load("ask *.npmjs.org\nallow registry.npmjs.org\n"
				"allow *.github.com\nask gist.github.com\n"
				"ask *.a.example\nallow *.b.a.example\n");
	char rule[128];

	assert_int_equal(policy_decide(p, "registry.npmjs.org", 443, rule, sizeof(rule)), POLICY_ALLOW);
	assert_string_equal(rule, "allow registry.npmjs.org (t:2)");
	assert_int_equal(policy_decide(p, "www.npmjs.org", 443, rule, sizeof(rule)), POLICY_ASK);
	assert_string_equal(rule, "ask *.npmjs.org (t:1)");
	assert_int_equal(decide(p, "gist.github.com", 443), POLICY_ASK);
	assert_int_equal(decide(p, "api.github.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "x.b.a.example", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "x.c.a.example", 443), POLICY_ASK);
	policy_free(p);

	/* Equal rules: the later one (a sandbox's file over the user's). */
	p = load("ask x.org\n");
	assert_int_equal(decide(p, "x.org", 443), POLICY_ASK);
	assert_int_equal(policy_add_allow(p, "x.org", NULL), 0);
	assert_int_equal(decide(p, "x.org", 443), POLICY_ALLOW);
	policy_free(p);
}

static void test_ports(void **state)
{
	struct policy *p = load("allow api.github.com:443\nallow x.com\ndeny x.com:25\n"
				"ask y.com:22\nallow *.z.com:443\nask *.z.com\n");
	char rule[128];

	assert_int_equal(decide(p, "api.github.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "api.github.com", 22), POLICY_DENY);
	/* Port 0 (DNS): reachable on some port, so it resolves. */
	assert_int_equal(policy_decide(p, "api.github.com", 0, rule, sizeof(rule)), POLICY_ALLOW);
	assert_string_equal(rule, "allow api.github.com:443 (t:1)");
	assert_int_equal(decide(p, "x.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "x.com", 25), POLICY_DENY);
	assert_int_equal(decide(p, "x.com", 0), POLICY_ALLOW);
	assert_int_equal(decide(p, "y.com", 22), POLICY_ASK);
	assert_int_equal(decide(p, "y.com", 80), POLICY_DENY);
	assert_int_equal(decide(p, "y.com", 0), POLICY_ASK);
	/* A rule with a port is more specific than one without. */
	assert_int_equal(decide(p, "a.z.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "a.z.com", 80), POLICY_ASK);
	assert_int_equal(decide(p, "a.z.com", 0), POLICY_ALLOW);
	policy_free(p);
}

static void test_defaults(void **state)
{
	struct policy *p;
	char rule[128];

	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(policy_decide(p, "example.com", 443, rule, sizeof(rule)), POLICY_DENY);
	assert_string_equal(rule, "default deny");
	assert_int_equal(policy_add_text(p, "# user\ndefault ask\n", 19, "user", NULL), 0);
	assert_int_equal(policy_decide(p, "example.com", 443, rule, sizeof(rule)), POLICY_ASK);
	assert_string_equal(rule, "default ask (user:2)");
	/* A later file's default replaces the earlier one. */
	assert_int_equal(policy_add_text(p, "default deny", 12, "sandbox", NULL), 0);
	assert_int_equal(policy_decide(p, "example.com", 443, rule, sizeof(rule)), POLICY_DENY);
	assert_string_equal(rule, "default deny (sandbox:1)");
	policy_free(p);
}

static void test_syntax_accepted(void **state)
{
	struct policy *p = load("  # comment\r\n\n\tallow a.com  b.com:8080 # trailing\r\n"
				"deny\tc.com\ndefault   ask   \nask *.d.com");

	assert_int_equal(decide(p, "a.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "a.com", 1), POLICY_ASK);
	assert_int_equal(decide(p, "b.com", 8080), POLICY_ALLOW);
	assert_int_equal(decide(p, "b.com", 80), POLICY_ASK);
	assert_int_equal(decide(p, "c.com", 80), POLICY_DENY);
	assert_int_equal(decide(p, "e.d.com", 80), POLICY_ASK);
	policy_free(p);
}

/* Issue 23 item 5: a bare name is the web ports, never every port (it
 * was how a guest reached port 25 of an allowed name); other ports are
 * named; a bare deny still closes every port. */
static void test_bare_name_web_ports(void **state)
{
	struct policy *p = load("allow a.com\nallow b.com:25\nallow *.c.com\ndeny d.com\nallow d.com:443\n"
				"ask e.com\nallow e.com:22\n");
	static const uint16_t other[] = {25, 22, 21, 8080, 465, 587, 1, 65535};
	char *shown = NULL;

	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		assert_int_equal(decide(p, "a.com", other[i]), POLICY_DENY);
		assert_int_equal(decide(p, "x.c.com", other[i]), POLICY_DENY);
		assert_int_equal(decide(p, "d.com", other[i]), POLICY_DENY);
	}
	assert_int_equal(decide(p, "a.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "a.com", 80), POLICY_ALLOW);
	assert_int_equal(decide(p, "x.c.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "b.com", 25), POLICY_ALLOW);
	assert_int_equal(decide(p, "b.com", 443), POLICY_DENY);
	assert_int_equal(decide(p, "d.com", 443), POLICY_DENY);
	assert_int_equal(decide(p, "e.com", 443), POLICY_ASK);
	assert_int_equal(decide(p, "e.com", 22), POLICY_ALLOW);
	assert_int_equal(decide(p, "e.com", 25), POLICY_DENY);
	/* DNS (port 0): a name resolves if some port of it may be reached. */
	assert_int_equal(decide(p, "a.com", 0), POLICY_ALLOW);
	assert_int_equal(decide(p, "b.com", 0), POLICY_ALLOW);
	assert_int_equal(decide(p, "d.com", 0), POLICY_DENY);
	assert_int_equal(decide(p, "e.com", 0), POLICY_ALLOW);
	/* `policy show` says what a bare rule means. */
	assert_int_equal(policy_format(p, &shown), 0);
	assert_non_null(strstr(shown, "allow a.com\t# ports 443 and 80, "));
	assert_non_null(strstr(shown, "deny d.com\t# every port, "));
	assert_non_null(strstr(shown, "allow b.com:25\t# t:2"));
	free(shown);
	policy_free(p);
}

struct bad_case {
	const char *text;
	unsigned line;
	const char *reason; /* a part of it */
};

static void test_parse_errors(void **state)
{
	static const struct bad_case cases[] = {
		{"allow a.com\nallw b.com\n", 2, "starts with allow, deny, ask or default"},
		{"Allow a.com\n", 1, "starts with allow"},
		{"allow\n", 1, "'allow' needs at least one host name"},
		{"# c\n\ndeny   # nothing\n", 3, "'deny' needs at least one host name"},
		{"allow a..com\n", 1, "empty label"},
		{"allow *.\n", 1, "not a host name: empty host name"},
		{"allow *\n", 1, "'*' alone"},
		{"allow a.*.com\n", 1, "whole first label"},
		{"allow *a.com\n", 1, "whole first label"},
		{"allow **.a.com\n", 1, "whole first label"},
		{"allow 10.0.0.1\n", 1, "an IP address"},
		{"\n\nallow 10.0.0.1:443\n", 3, "an IP address"},
		{"allow [::1]\n", 1, "IPv6"},
		{"allow ::1\n", 1, "IPv6"},
		{"allow a.com:0\n", 1, "not a port"},
		{"allow a.com:65536\n", 1, "not a port"},
		{"allow a.com:\n", 1, "not a port"},
		{"allow a.com:https\n", 1, "not a port"},
		{"allow a.com:+443\n", 1, "not a port"},
		{"allow a.com:000443\n", 1, "not a port"},
		{"allow -a.com\n", 1, "starts with '-'"},
		{"allow a-.com\n", 1, "ends with '-'"},
		{"allow a_b.com\n", 1, "only letters, digits"},
		{"allow b\xc3\xbc" "cher.de\n", 1, "xn-- A-label"},
		{"allow aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com\n", 1,
		 "longer than 63"},
		{"default allow\n", 1, "'default' takes 'deny' or 'ask'"},
		{"default\n", 1, "'default' takes 'deny' or 'ask'"},
		{"default ask deny\n", 1, "takes one word"},
		{"default ask\nallow a.com\ndefault deny\n", 3, "second 'default' (the first is on line 1)"},
		{"allow a.com\nallow b.com\x00\n", 2, "NUL byte"},
	};
	struct policy_error e;
	struct policy *p;
	char rule[128];

	assert_int_equal(policy_new(&p), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].text);
		if (strstr(cases[i].reason, "NUL"))
			len += 2; /* the NUL and the newline after it */
		memset(&e, 0x55, sizeof(e));
		if (policy_add_text(p, cases[i].text, len, "bad.policy", &e) != -EINVAL)
			fail_msg("case %zu accepted: %s", i, cases[i].text);
		if (e.line != cases[i].line || !strstr(e.reason, cases[i].reason) ||
		    strcmp(e.file, "bad.policy"))
			fail_msg("case %zu: got %s:%u: %s", i, e.file, e.line, e.reason);
	}
	/* Nothing of a rejected file was kept, not even its good lines. */
	assert_int_equal(policy_decide(p, "a.com", 443, rule, sizeof(rule)), POLICY_DENY);
	assert_string_equal(rule, "default deny");
	policy_free(p);
}

static void test_add_allow(void **state)
{
	struct policy *p;
	struct policy_error e;
	char rule[128];

	assert_int_equal(policy_new(&p), 0);
	assert_int_equal(policy_add_allow(p, "pypi.org", &e), 0);
	assert_int_equal(policy_add_allow(p, "*.pythonhosted.org:443", &e), 0);
	assert_int_equal(policy_add_allow(p, "a.com b.com", &e), -EINVAL);
	assert_int_equal(policy_add_allow(p, "", &e), -EINVAL);
	assert_int_equal(policy_add_allow(p, "c.com#x", &e), -EINVAL);
	assert_int_equal(policy_add_allow(p, "1.1.1.1", &e), -EINVAL);
	assert_non_null(strstr(e.reason, "IP address"));
	assert_int_equal(policy_decide(p, "files.pythonhosted.org", 443, rule, sizeof(rule)), POLICY_ALLOW);
	assert_string_equal(rule, "allow *.pythonhosted.org:443 (--allow:1)");
	assert_int_equal(decide(p, "pypi.org", 80), POLICY_ALLOW);
	assert_int_equal(decide(p, "a.com", 80), POLICY_DENY);
	policy_free(p);
}

static void strip_comments(char *s)
{
	char *w = s;

	for (char *r = s; *r;) {
		if (*r == '\t' && r[1] == '#') {
			while (*r && *r != '\n')
				r++;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
}

static void test_format_round_trip(void **state)
{
	struct policy *p = load("allow a.com b.com:8080\ndeny *.c.com\ndefault ask\nask *.D.com.:22\n");
	struct policy *q;
	char *one, *two;

	assert_int_equal(policy_format(p, &one), 0);
	assert_non_null(strstr(one, "default ask\t# t:3\n"));
	assert_non_null(strstr(one, "ask *.d.com:22\t# t:4\n"));
	assert_int_equal(policy_new(&q), 0);
	assert_int_equal(policy_add_text(q, one, strlen(one), "again", NULL), 0);
	assert_int_equal(policy_format(q, &two), 0);
	strip_comments(one);
	strip_comments(two);
	assert_string_equal(one, "default ask\nallow a.com\nallow b.com:8080\ndeny *.c.com\nask *.d.com:22\n");
	assert_string_equal(one, two);
	free(one);
	free(two);
	policy_free(p);
	policy_free(q);
}

static void test_load_effective(void **state)
{
	char dir[] = "/tmp/k8-policy-XXXXXX", path[256], sdir[128];
	struct policy_error e;
	struct policy *p;
	FILE *f;

	assert_non_null(mkdtemp(dir));
	setenv("KOSA8_CONFIG_DIR", dir, 1);
	snprintf(sdir, sizeof(sdir), "%s/sb", dir);
	assert_int_equal(mkdir(sdir, 0700), 0);
	/* Neither file: the built-in default. */
	assert_int_equal(policy_load_effective(sdir, &p, &e), 0);
	assert_int_equal(decide(p, "a.com", 443), POLICY_DENY);
	policy_free(p);
	snprintf(path, sizeof(path), "%s/policy", dir);
	assert_non_null(f = fopen(path, "w"));
	fputs("default ask\nallow a.com\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/policy", sdir);
	assert_non_null(f = fopen(path, "w"));
	fputs("deny a.com\nallow b.com\n", f);
	fclose(f);
	assert_int_equal(policy_load_effective(sdir, &p, &e), 0);
	assert_int_equal(decide(p, "a.com", 443), POLICY_DENY);
	assert_int_equal(decide(p, "b.com", 443), POLICY_ALLOW);
	assert_int_equal(decide(p, "c.com", 443), POLICY_ASK);
	policy_free(p);
	/* A bad sandbox file fails with its path and line. */
	assert_non_null(f = fopen(path, "w"));
	fputs("allow ok.com\nallow bad..com\n", f);
	fclose(f);
	assert_int_equal(policy_load_effective(sdir, &p, &e), -EINVAL);
	assert_string_equal(e.file, path);
	assert_int_equal(e.line, 2);
	unlink(path);
	rmdir(sdir);
	snprintf(path, sizeof(path), "%s/policy", dir);
	unlink(path);
	rmdir(dir);
	unsetenv("KOSA8_CONFIG_DIR");
}

struct race {
	struct policy *p;
	int wrong;
};

static void *decider(void *arg)
{
	struct race *r = arg;

	for (int i = 0; i < 20000; i++) {
		if (decide(r->p, "api.github.com", 443) != POLICY_ALLOW ||
		    decide(r->p, "evil.example", 443) != POLICY_DENY)
			__atomic_add_fetch(&r->wrong, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* Approvals add rules while DNS and proxy threads decide. */
static void test_concurrent(void **state)
{
	struct race r = {.p = load("allow api.github.com\ndeny evil.example\n")};
	pthread_t t[3];
	char spec[64];

	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, decider, &r), 0);
	for (int i = 0; i < 2000; i++) {
		snprintf(spec, sizeof(spec), "host%d.example", i);
		assert_int_equal(policy_add_allow(r.p, spec, NULL), 0);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(r.wrong, 0);
	assert_int_equal(decide(r.p, "host1999.example", 443), POLICY_ALLOW);
	policy_free(r.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normalise),
		cmocka_unit_test(test_wildcard_is_label_wise),
		cmocka_unit_test(test_exact_and_punycode),
		cmocka_unit_test(test_ip_literals_denied),
		cmocka_unit_test(test_deny_wins),
		cmocka_unit_test(test_specific_rule_decides),
		cmocka_unit_test(test_ports),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_syntax_accepted),
		cmocka_unit_test(test_bare_name_web_ports),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_add_allow),
		cmocka_unit_test(test_format_round_trip),
		cmocka_unit_test(test_load_effective),
		cmocka_unit_test(test_concurrent),
	};
	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
