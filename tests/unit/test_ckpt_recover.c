/* ckpt_recover_top (supervisor/ckpt_ops.h): a supervisor killed while its
 * VMM wrote a checkpoint leaves current.json naming a frozen delta; the next
 * start moves on to the delta the VMM went on writing (its data kept), or
 * to a new one over the frozen one.  Real disk files (disk/disk.h), no VM;
 * the VM side is tests/vm/sandbox-race.sh (sandbox-sigkill-mid-checkpoint). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tmp_dir.h"

#include "disk/disk.h"
#include "sandbox/checkpoints.h"
#include "supervisor/ckpt_ops.h"

static char dir[PATH_MAX], image[PATH_MAX + 16], first[PATH_MAX + 16], next[PATH_MAX + 32];

/* A sandbox dir: disk.k8d over a raw image, as create makes it. */
static void make_sandbox(const char *name)
{
	char err[256], cmd[PATH_MAX + 64];

	snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s/checkpoints", dir);
	assert_int_equal(system(cmd), 0);
	snprintf(image, sizeof(image), "%s/image", dir);
	snprintf(cmd, sizeof(cmd), "truncate -s 4M %s", image);
	assert_int_equal(system(cmd), 0);
	snprintf(first, sizeof(first), "%s/disk.k8d", dir);
	snprintf(next, sizeof(next), "%s/checkpoints/d1.k8d", dir);
	assert_int_equal(disk_create(first, image, NULL, err, sizeof(err)), 0);
}

static void write_byte(const char *top, uint64_t off, uint8_t v)
{
	struct disk *d;
	char err[256];

	assert_int_equal(disk_open(&d, top, 0, err, sizeof(err)), 0);
	assert_int_equal(disk_write(d, &v, 1, off), 0);
	assert_int_equal(disk_close(d), 0);
}

static uint8_t read_byte(const char *top, uint64_t off)
{
	struct disk *d;
	char err[256];
	uint8_t v = 0;

	assert_int_equal(disk_open(&d, top, DISK_RDONLY, err, sizeof(err)), 0);
	assert_int_equal(disk_read(d, &v, 1, off), 0);
	disk_close(d);
	return v;
}

static void test_nothing_to_do(void **state)
{
	char err[256] = "";
	struct ckpt_meta cur;

	make_sandbox("plain");
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 0);
	assert_int_equal(ckpt_current(dir, &cur, err, sizeof(err)), 0);
	assert_int_equal(cur.next, 1); /* no current.json written */
	ckpt_meta_free(&cur);
}

/* Killed after the VMM froze the top and wrote on in the new delta. */
static void test_moves_to_the_vmms_new_delta(void **state)
{
	char err[256] = "";
	struct ckpt_meta cur;

	make_sandbox("went-on");
	write_byte(first, 0, 0x11);
	assert_int_equal(disk_freeze(first, err, sizeof(err)), 0);
	assert_int_equal(disk_create(next, first, NULL, err, sizeof(err)), 0);
	write_byte(next, 512, 0x22);
	/* Before: current names the frozen delta, which cannot be opened for writing. */
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 1);
	assert_int_equal(ckpt_current(dir, &cur, err, sizeof(err)), 0);
	assert_string_equal(cur.top, next);
	assert_int_equal(cur.next, 2);
	assert_int_equal(cur.nchain, 2);
	assert_non_null(strstr(cur.chain[1], "disk.k8d"));
	ckpt_meta_free(&cur);
	/* What was written before and after the freeze is there. */
	assert_int_equal(read_byte(next, 0), 0x11);
	assert_int_equal(read_byte(next, 512), 0x22);
	/* Once is enough. */
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 0);
}

/* Killed after the freeze, before the new delta (or with a bad one). */
static void test_new_delta_over_the_frozen_one(void **state)
{
	char err[256] = "";
	struct ckpt_meta cur;
	FILE *f;

	make_sandbox("half");
	write_byte(first, 0, 0x33);
	assert_int_equal(disk_freeze(first, err, sizeof(err)), 0);
	f = fopen(next, "w");
	assert_non_null(f);
	fputs("not a delta", f);
	fclose(f);
	assert_int_equal(ckpt_recover_top(dir, err, sizeof(err)), 1);
	assert_int_equal(ckpt_current(dir, &cur, err, sizeof(err)), 0);
	assert_string_equal(cur.top, next);
	ckpt_meta_free(&cur);
	assert_int_equal(read_byte(next, 0), 0x33);
	write_byte(next, 1024, 0x44);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nothing_to_do),
		cmocka_unit_test(test_moves_to_the_vmms_new_delta),
		cmocka_unit_test(test_new_delta_over_the_frozen_one),
	};
	return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
