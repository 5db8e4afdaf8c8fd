/* Remembered answers (sandbox/lookup.h): an answer comes back only while
 * every file and variable it was made from is as it was; a rewrite of the
 * same size, a file that appears, a changed or unset variable, a file too
 * new to be trusted, or a cache file edited by hand all make it be looked
 * up again.  (The answer itself is the user's own, in a private directory,
 * as trusted as sandbox.json.) */
#include <errno.h>
#include <fcntl.h>
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

#include "tmp_dir.h"
#include "common/util.h"
#include "sandbox/lookup.h"

static char recipe[128], agent[128], missing[128], cache[128], fresh[128];

/* Files the tests depend on, older than LOOKUP_MIN_AGE_S. */
static int setup(void **state)
{
	if (tmp_setup(state))
		return -1;
	snprintf(recipe, sizeof(recipe), "%s/default.recipe", tmp);
	snprintf(agent, sizeof(agent), "%s/agent", tmp);
	snprintf(missing, sizeof(missing), "%s/config.recipe", tmp);
	snprintf(cache, sizeof(cache), "%s/lookup", tmp);
	snprintf(fresh, sizeof(fresh), "%s/fresh", tmp);
	tmp_put(recipe, "name = default\n");
	tmp_put(agent, "agent one");
	sleep(LOOKUP_MIN_AGE_S + 1);
	return 0;
}

static void store_default(void)
{
	struct lookup_deps d = {.files = {recipe, missing, agent}, .nfiles = 3,
				.env = {"KOSA8_TEST_LOOKUP", "KOSA8_TEST_UNSET"}, .nenv = 2};

	setenv("KOSA8_TEST_LOOKUP", "one", 1);
	unsetenv("KOSA8_TEST_UNSET");
	assert_int_equal(lookup_store(cache, &d, "/images/default/rootfs.ext4"), 0);
}

static void test_answer_comes_back(void **state)
{
	char a[256];

	store_default();
	assert_int_equal(lookup_load(cache, a, sizeof(a)), 0);
	assert_string_equal(a, "/images/default/rootfs.ext4");
	assert_int_equal(lookup_load(cache, a, 10), -ENAMETOOLONG);
}

static void test_variables(void **state)
{
	char a[256];

	store_default();
	setenv("KOSA8_TEST_LOOKUP", "two", 1);
	assert_int_equal(lookup_load(cache, a, sizeof(a)), -ESTALE);
	unsetenv("KOSA8_TEST_LOOKUP");
	assert_int_equal(lookup_load(cache, a, sizeof(a)), -ESTALE);
	setenv("KOSA8_TEST_LOOKUP", "one", 1);
	setenv("KOSA8_TEST_UNSET", "", 1);
	assert_int_equal(lookup_load(cache, a, sizeof(a)), -ESTALE);
	unsetenv("KOSA8_TEST_UNSET");
	assert_int_equal(lookup_load(cache, a, sizeof(a)), 0);
}

static void test_files(void **state)
{
	char a[256];

	store_default();
	/* Same size, same mtime put back: the ctime still shows it. */
	struct stat st;
	assert_int_equal(stat(agent, &st), 0);
	tmp_put(agent, "agent two");
	struct timespec t[2] = {st.st_atim, st.st_mtim};
	assert_int_equal(utimensat(AT_FDCWD, agent, t, 0), 0);
	assert_int_equal(lookup_load(cache, a, sizeof(a)), -ESTALE);
	/* Too new to be remembered now: nothing is written. */
	struct lookup_deps d = {.files = {agent}, .nfiles = 1};
	unlink(cache);
	assert_int_equal(lookup_store(cache, &d, "/x"), -EAGAIN);
	assert_int_equal(access(cache, F_OK), -1);
}

static void test_file_that_appears(void **state)
{
	char a[256];

	store_default();
	tmp_put(missing, "name = other\n");
	assert_int_equal(lookup_load(cache, a, sizeof(a)), -ESTALE);
	unlink(missing);
	assert_int_equal(lookup_load(cache, a, sizeof(a)), 0);
}

static void test_edited_cache(void **state)
{
	char a[256], text[4096];
	uint8_t *buf = NULL;
	size_t len = 0;

	store_default();
	assert_int_equal(read_file(cache, sizeof(text), &buf, &len), 0);
	memcpy(text, buf, len);
	free(buf);
	assert_int_equal(lookup_check(text, len, a, sizeof(a)), 0);
	/* Numbers written by hand are not taken: the file's are compared. */
	char *num = strstr(text, "agent\n ") + 7;
	*num = *num == '1' ? '2' : '1';
	assert_int_equal(lookup_check(text, len, a, sizeof(a)), -ESTALE);
	*num = *num == '1' ? '2' : '1';
	/* Cut short, something after the answer, another format. */
	assert_int_equal(lookup_check(text, len - 1, a, sizeof(a)), -EBADMSG);
	assert_int_equal(lookup_check(text, 20, a, sizeof(a)), -EBADMSG);
	text[len] = 'x';
	assert_int_equal(lookup_check(text, len + 1, a, sizeof(a)), -EBADMSG);
	text[13] = '2';
	assert_int_equal(lookup_check(text, len, a, sizeof(a)), -EBADMSG);
	assert_int_equal(lookup_check("", 0, a, sizeof(a)), -EBADMSG);
}

static void test_refuses_newlines(void **state)
{
	struct lookup_deps d = {.files = {"/a\nanswer /evil"}, .nfiles = 1};
	struct lookup_deps e = {.env = {"A B"}, .nenv = 1};
	struct lookup_deps none = {.nfiles = 0};

	assert_int_equal(lookup_store(fresh, &d, "/x"), -EINVAL);
	assert_int_equal(lookup_store(fresh, &e, "/x"), -EINVAL);
	assert_int_equal(lookup_store(fresh, &none, "/x\n"), -EINVAL);
	assert_int_equal(lookup_store(fresh, &none, ""), -EINVAL);
	assert_int_equal(access(fresh, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answer_comes_back),
		cmocka_unit_test(test_variables),
		cmocka_unit_test(test_file_that_appears),
		cmocka_unit_test(test_edited_cache),
		cmocka_unit_test(test_refuses_newlines),
		/* Last: it leaves a file too new to be remembered. */
		cmocka_unit_test(test_files),
	};
	return cmocka_run_group_tests(tests, setup, tmp_teardown);
}
