/* Sandbox checkpoint records (sandbox/checkpoints.h): ids, messages, the
 * parser's refusals, a format/parse round trip, and the files on disk. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "sandbox/checkpoints.h"

static void test_ids(void **state)
{
	assert_true(ckpt_id_valid("c1"));
	assert_true(ckpt_id_valid("c123456789"));
	assert_false(ckpt_id_valid("c"));
	assert_false(ckpt_id_valid("c0"));
	assert_false(ckpt_id_valid("c01"));
	assert_false(ckpt_id_valid("c1234567890"));
	assert_false(ckpt_id_valid("d1"));
	assert_false(ckpt_id_valid("c1/../x"));
	assert_false(ckpt_id_valid("c-1"));
	assert_false(ckpt_id_valid(""));
}

static void test_messages(void **state)
{
	char big[CKPT_MSG_MAX + 1];

	assert_true(ckpt_message_valid(""));
	assert_true(ckpt_message_valid("before the refactor: ok"));
	assert_true(ckpt_message_valid("UTF-8 \xc3\xa9t\xc3\xa9"));
	assert_false(ckpt_message_valid("two\nlines"));
	assert_false(ckpt_message_valid("escape \x1b[2J"));
	assert_false(ckpt_message_valid("del \x7f"));
	memset(big, 'a', CKPT_MSG_MAX - 1);
	big[CKPT_MSG_MAX - 1] = 0;
	assert_true(ckpt_message_valid(big));
	memset(big, 'a', CKPT_MSG_MAX);
	big[CKPT_MSG_MAX] = 0;
	assert_false(ckpt_message_valid(big));
}

static int parse(const char *text, struct ckpt_meta *m, char *err)
{
	return ckpt_meta_parse(text, strlen(text), m, err, 256);
}

static void refused(const char *text, const char *want)
{
	struct ckpt_meta m;
	char err[256] = "";

	assert_int_equal(parse(text, &m, err), -EBADMSG);
	if (!strstr(err, want))
		fail_msg("'%s': error '%s', want '%s'", text, err, want);
	assert_int_equal(m.nchain, 0);
}

static void test_refusals(void **state)
{
	refused("", "not JSON");
	refused("{\"id\":\"c1\"", "not JSON");
	refused("[1]", "not a JSON object");
	refused("{}", "\"id\"");
	refused("{\"id\":\"x1\"}", "\"id\"");
	refused("{\"id\":7}", "\"id\"");
	refused("{\"id\":\"c1\",\"parent\":\"c0\"}", "\"parent\"");
	refused("{\"id\":\"c1\",\"parent\":\"../c2\"}", "\"parent\"");
	refused("{\"id\":\"c1\",\"message\":\"a\\u001bb\"}", "\"message\"");
	refused("{\"id\":\"c1\",\"top\":\"relative/d1.k8d\"}", "\"top\"");
	refused("{\"id\":\"c1\",\"created\":-1}", "number");
	refused("{\"id\":\"c1\",\"created\":\"now\"}", "number");
	refused("{\"id\":\"c1\",\"memory_bytes\":1e300}", "number");
	/* 10^15 and up would not survive cJSON's printing (fuzz/README.md). */
	refused("{\"id\":\"c1\",\"memory_bytes\":5111111111111111}", "number");
	refused("{\"id\":\"c1\",\"created\":1000000000000000}", "number");
	refused("{\"id\":\"current\",\"next\":1e10}", "number");
	refused("{\"id\":\"current\",\"chain\":\"/a\"}", "\"chain\"");
	refused("{\"id\":\"current\",\"chain\":[\"/a\",\"b\"]}", "\"chain\"");
	refused("{\"id\":\"current\",\"chain\":[\"/a\",3]}", "\"chain\"");
	refused("{\"id\":\"current\",\"chain\":[\"/a\\nb\"]}", "\"chain\"");
}

static void test_too_many_layers(void **state)
{
	size_t cap = 64 + (CKPT_MAX_CHAIN + 1) * 8;
	char *t = malloc(cap), err[256];
	struct ckpt_meta m;
	size_t n = (size_t)snprintf(t, cap, "{\"id\":\"current\",\"chain\":[");

	for (int i = 0; i <= CKPT_MAX_CHAIN; i++)
		n += (size_t)snprintf(t + n, cap - n, "%s\"/l\"", i ? "," : "");
	snprintf(t + n, cap - n, "]}");
	assert_int_equal(parse(t, &m, err), -EBADMSG);
	free(t);
}

static void test_round_trip(void **state)
{
	struct ckpt_meta a = {0}, b;
	char err[256], *text;

	snprintf(a.id, sizeof(a.id), "current");
	snprintf(a.parent, sizeof(a.parent), "c12");
	snprintf(a.message, sizeof(a.message), "quotes \" and \\ kept");
	snprintf(a.top, sizeof(a.top), "/s/checkpoints/d13.k8d");
	a.created = 1764690000;
	a.memory_bytes = 999999999999999ULL; /* the largest allowed */
	a.paused_ms = 41.5;
	a.next = 14;
	assert_int_equal(ckpt_meta_chain_add(&a, "/images/default.ext4"), 0);
	assert_int_equal(ckpt_meta_chain_add(&a, "/s/disk.k8d"), 0);
	text = ckpt_meta_format(&a);
	assert_non_null(text);
	assert_int_equal(parse(text, &b, err), 0);
	assert_string_equal(b.id, a.id);
	assert_string_equal(b.parent, a.parent);
	assert_string_equal(b.message, a.message);
	assert_string_equal(b.top, a.top);
	assert_true(b.created == a.created);
	assert_true(b.memory_bytes == a.memory_bytes);
	assert_true(b.paused_ms == a.paused_ms);
	assert_int_equal(b.next, 14);
	assert_int_equal(b.nchain, 2);
	assert_string_equal(b.chain[1], "/s/disk.k8d");
	free(text);
	ckpt_meta_free(&a);
	ckpt_meta_free(&b);
}

static void test_files(void **state)
{
	char dir[] = "/tmp/kosa8-ckmeta-XXXXXX", path[512], err[256];
	struct ckpt_meta m = {0}, *all;
	int n;
	FILE *f;

	assert_non_null(mkdtemp(dir));
	/* Saved out of order, listed by number (c10 after c9). */
	for (int i = 10; i >= 8; i--) {
		snprintf(m.id, sizeof(m.id), "c%d", i);
		if (i > 8)
			snprintf(m.parent, sizeof(m.parent), "c%d", i - 1);
		else
			m.parent[0] = 0;
		assert_int_equal(ckpt_meta_save(dir, &m), 0);
	}
	/* A damaged record is skipped, one whose id is not its name refused. */
	snprintf(path, sizeof(path), "%s/" CKPT_META_DIR "/c11.json", dir);
	assert_non_null(f = fopen(path, "w"));
	fputs("{\"id\":", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/" CKPT_META_DIR "/c12.json", dir);
	assert_non_null(f = fopen(path, "w"));
	fputs("{\"id\":\"c3\"}", f);
	fclose(f);
	assert_int_equal(ckpt_meta_load(dir, "c12", &m, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "not its name"));
	assert_int_equal(ckpt_meta_load(dir, "c99", &m, err, sizeof(err)), -ENOENT);
	assert_int_equal(ckpt_meta_list(dir, &all, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(all[0].id, "c8");
	assert_string_equal(all[1].id, "c9");
	assert_string_equal(all[2].id, "c10");
	assert_string_equal(all[2].parent, "c9");
	assert_string_equal(all[0].parent, "");
	free(all);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	assert_int_equal(system(path), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ids),
		cmocka_unit_test(test_messages),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_too_many_layers),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_files),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
