/* Forks' bookkeeping (supervisor/ckpt_ops.h): fork.json is read back and a
 * damaged one refused; a checkpoint with a living fork is pinned (checkpoint
 * rm refused) and the pin of a fork that is gone is dropped.  The VM side
 * (a fork running from the checkpoint) is tests/vm/sandbox-checkpoint.sh. */
#include <errno.h>
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

#include "sandbox/checkpoints.h"
#include "supervisor/ckpt_ops.h"
#include "common/util.h"
#include "sandbox/sandbox.h"

static char root[64];

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	snprintf(root, sizeof(root), "/tmp/kosa8-fork-XXXXXX");
	assert_non_null(mkdtemp(root));
	setenv("KOSA8_STATE_DIR", root, 1);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd);
}

static void test_fork_file(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	struct ckpt_fork f;

	assert_int_equal(sandbox_state_dir("kid", dir, sizeof(dir)), 0);
	assert_int_equal(mkdir_p(dir, 0700), 0);
	assert_int_equal(ckpt_fork_load(dir, &f), -ENOENT);
	snprintf(path, sizeof(path), "%s/" CKPT_FORK_FILE, dir);
	put(path, "{\"parent\":\"dad\",\"checkpoint\":\"c3\",\"restore\":\"/s/checkpoints/c3\"}");
	assert_int_equal(ckpt_fork_load(dir, &f), 0);
	assert_string_equal(f.parent, "dad");
	assert_string_equal(f.id, "c3");
	assert_string_equal(f.restore, "/s/checkpoints/c3");
	/* Damaged: every field checked. */
	put(path, "{\"parent\":\"dad\",\"checkpoint\":\"c3\"");
	assert_int_equal(ckpt_fork_load(dir, &f), -EBADMSG);
	put(path, "{\"parent\":\"../x\",\"checkpoint\":\"c3\",\"restore\":\"/r\"}");
	assert_int_equal(ckpt_fork_load(dir, &f), -EBADMSG);
	put(path, "{\"parent\":\"dad\",\"checkpoint\":\"c03\",\"restore\":\"/r\"}");
	assert_int_equal(ckpt_fork_load(dir, &f), -EBADMSG);
	put(path, "{\"parent\":\"dad\",\"checkpoint\":\"c3\",\"restore\":\"r\"}");
	assert_int_equal(ckpt_fork_load(dir, &f), -EBADMSG);
	put(path, "{\"parent\":\"dad\",\"checkpoint\":\"c3\",\"restore\":\"/r\"}");
	assert_int_equal(ckpt_fork_done(dir), 0);
	assert_int_equal(ckpt_fork_load(dir, &f), -ENOENT);
}

static void test_pins(void **state)
{
	char dad[PATH_MAX], kid[PATH_MAX], pins[PATH_MAX + 32], name[64], err[256];
	struct ckpt_meta m = {0};
	uint64_t freed;

	assert_int_equal(sandbox_state_dir("dad", dad, sizeof(dad)), 0);
	assert_int_equal(sandbox_state_dir("kid2", kid, sizeof(kid)), 0);
	assert_int_equal(mkdir_p(dad, 0700), 0);
	assert_int_equal(mkdir_p(kid, 0700), 0);
	snprintf(m.id, sizeof(m.id), "c1");
	assert_int_equal(ckpt_meta_save(dad, &m), 0);
	assert_int_equal(ckpt_live_fork(dad, NULL, name, sizeof(name)), 0);
	/* kid2 runs from c1: c1 cannot be removed, the parent has a fork. */
	snprintf(pins, sizeof(pins), "%s/" CKPT_META_DIR "/c1.forks", dad);
	assert_int_equal(mkdir(pins, 0700), 0);
	snprintf(pins, sizeof(pins), "%s/" CKPT_META_DIR "/c1.forks/kid2", dad);
	put(pins, "");
	assert_int_equal(ckpt_live_fork(dad, "c1", name, sizeof(name)), 1);
	assert_string_equal(name, "kid2");
	assert_int_equal(ckpt_live_fork(dad, NULL, name, sizeof(name)), 1);
	assert_int_equal(ckpt_live_fork(dad, "c2", name, sizeof(name)), 0);
	assert_int_equal(ckpt_remove(dad, "c1", &freed, err, sizeof(err)), -EBUSY);
	assert_non_null(strstr(err, "kid2"));
	/* kid2 gone: its pin goes, c1 can be removed. */
	assert_int_equal(rmdir(kid), 0);
	assert_int_equal(ckpt_live_fork(dad, NULL, name, sizeof(name)), 0);
	assert_int_equal(access(pins, F_OK), -1);
	assert_int_equal(ckpt_remove(dad, "c1", &freed, err, sizeof(err)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fork_file),
		cmocka_unit_test(test_pins),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
