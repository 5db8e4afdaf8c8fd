/* sandbox/sandbox.c: a sandbox's vsock CID in sandbox.json, and picking
 * one no other sandbox of the user has. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/util.h"
#include "sandbox/sandbox.h"

static char root[64];

static int setup(void **state)
{
	snprintf(root, sizeof(root), "/tmp/k8-sbcfg-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	setenv("KOSA8_STATE_DIR", root, 1);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

/* A sandbox NAME on disk with the given CID (0: a sandbox.json without one). */
static void make_sandbox(const char *name, uint32_t cid)
{
	struct sandbox_cfg c = {.mem = 256 << 20, .cpus = 1, .cid = cid};
	char dir[PATH_MAX];

	snprintf(c.name, sizeof(c.name), "%s", name);
	assert_int_equal(sandbox_state_dir(name, dir, sizeof(dir)), 0);
	assert_int_equal(mkdir_p(dir, 0700), 0);
	assert_int_equal(sandbox_cfg_save(dir, &c), 0);
}

static void rewrite_cid(const char *name, const char *value)
{
	char cmd[PATH_MAX + 128];

	snprintf(cmd, sizeof(cmd), "sed -i 's/\"cid\":[^,]*,/%s/' '%s/sandboxes/%s/sandbox.json'", value, root, name);
	assert_int_equal(system(cmd), 0);
}

static uint32_t loaded_cid(const char *name, int *err)
{
	struct sandbox_cfg c;
	char dir[PATH_MAX];

	assert_int_equal(sandbox_state_dir(name, dir, sizeof(dir)), 0);
	*err = sandbox_cfg_load(dir, &c);
	return c.cid;
}

static void test_pick_smallest_free(void **state)
{
	int err;

	assert_int_equal(sandbox_cid_pick(), 3); /* no sandbox yet */
	make_sandbox("a", 3);
	make_sandbox("b", 5);
	assert_int_equal(sandbox_cid_pick(), 4);
	make_sandbox("c", 4);
	assert_int_equal(sandbox_cid_pick(), 6);
	assert_int_equal(loaded_cid("b", &err), 5);
	assert_int_equal(err, 0);
}

/* A template being made holds a CID too (its VMM runs): no sandbox may
 * get it, or as root the two VMMs would share a jail uid. */
static void test_pick_skips_templates(void **state)
{
	struct sandbox_cfg c = {.mem = 256 << 20, .cpus = 1, .cid = 3};
	char dir[PATH_MAX];

	snprintf(c.name, sizeof(c.name), "tpl-0123456789ab");
	snprintf(dir, sizeof(dir), "%s/templates/0123456789abcdef", root);
	assert_int_equal(mkdir_p(dir, 0700), 0);
	assert_int_equal(sandbox_cfg_save(dir, &c), 0);
	make_sandbox("a", 4);
	assert_int_equal(sandbox_cid_pick(), 5);
}

static void test_cid_in_json(void **state)
{
	int err;

	/* A sandbox.json from before CIDs were kept: the VMM's default. */
	make_sandbox("old", 9);
	rewrite_cid("old", "");
	assert_int_equal(loaded_cid("old", &err), 3);
	assert_int_equal(err, 0);
	/* Out of the VMM's range, or not a number: refused. */
	make_sandbox("low", 9);
	rewrite_cid("low", "\"cid\": 2,");
	loaded_cid("low", &err);
	assert_int_equal(err, -EBADMSG);
	make_sandbox("big", 9);
	rewrite_cid("big", "\"cid\": 4294967295,");
	loaded_cid("big", &err);
	assert_int_equal(err, -EBADMSG);
	make_sandbox("str", 9);
	rewrite_cid("str", "\"cid\": \"7\",");
	loaded_cid("str", &err);
	assert_int_equal(err, -EBADMSG);
	/* A damaged sandbox.json does not stop a pick. */
	make_sandbox("ok", 3);
	assert_int_equal(sandbox_cid_pick(), 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pick_smallest_free, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pick_skips_templates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cid_in_json, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
