/* The template store (supervisor/template.h): the key changes with every input
 * the booted guest depends on and with nothing else (a copy of the kernel
 * elsewhere is the same template); the store's checks refuse a half-made
 * template, a writable file in one, a directory others can enter; makers
 * of one template wait for each other.  The VM side is
 * tests/vm/sandbox-template.sh. */
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
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tmp_dir.h"
#include "common/util.h"
#include "supervisor/template.h"

static char kernel[128], image[128], exe[128], vmm[128];

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	char st[128];

	if (tmp_setup(state))
		return -1;
	snprintf(kernel, sizeof(kernel), "%s/bzImage", tmp);
	snprintf(image, sizeof(image), "%s/rootfs.ext4", tmp);
	snprintf(exe, sizeof(exe), "%s/kosa8", tmp);
	put(kernel, "kernel one");
	put(image, "image one");
	put(exe, "kosa8 one");
	snprintf(vmm, sizeof(vmm), "%s/kosa8-vmm", tmp);
	put(vmm, "vmm one");
	assert_int_equal(chmod(vmm, 0755), 0);
	snprintf(st, sizeof(st), "%s/state", tmp);
	setenv("KOSA8_STATE_DIR", st, 1);
	return 0;
}

static void key_of(const struct template_inputs *in, char key[TEMPLATE_KEY_LEN + 1])
{
	char err[512];

	assert_int_equal(template_key(in, key, err, sizeof(err)), 0);
	assert_true(template_key_valid(key));
}

static void test_key_follows_inputs(void **state)
{
	struct template_inputs in = {.kernel = kernel, .image = image, .exe = exe, .mem = 512 * MiB,
				     .cpus = 1};
	char k0[TEMPLATE_KEY_LEN + 1], k[TEMPLATE_KEY_LEN + 1], copy[160];

	key_of(&in, k0);
	key_of(&in, k);
	assert_string_equal(k, k0);
	in.cpus = 2;
	key_of(&in, k);
	assert_string_not_equal(k, k0);
	in.cpus = 1;
	in.mem = 256 * MiB;
	key_of(&in, k);
	assert_string_not_equal(k, k0);
	in.mem = 512 * MiB;
	/* The same kernel elsewhere: the same template. */
	snprintf(copy, sizeof(copy), "%s/elsewhere", tmp);
	put(copy, "kernel one");
	in.kernel = copy;
	key_of(&in, k);
	assert_string_equal(k, k0);
	put(copy, "kernel two");
	key_of(&in, k);
	assert_string_not_equal(k, k0);
	in.kernel = kernel;
	put(exe, "kosa8 two");
	key_of(&in, k);
	assert_string_not_equal(k, k0);
	put(exe, "kosa8 one");
	/* The VMM next to kosa8 is an input too: its device model is in the
	 * template's state. */
	put(vmm, "vmm two");
	key_of(&in, k);
	assert_string_not_equal(k, k0);
	put(vmm, "vmm one");
	/* A new image's identity (a new file: base_id's cache goes by times). */
	snprintf(copy, sizeof(copy), "%s/rootfs2.ext4", tmp);
	put(copy, "image two");
	in.image = copy;
	key_of(&in, k);
	assert_string_not_equal(k, k0);
	in.image = image;
	key_of(&in, k);
	assert_string_equal(k, k0);
	/* A missing input is an error naming it. */
	{
		char err[512] = "";
		in.kernel = "/nonexistent/bzImage";
		assert_int_equal(template_key(&in, k, err, sizeof(err)), -ENOENT);
		assert_non_null(strstr(err, "/nonexistent/bzImage"));
	}
}

static void test_key_text(void **state)
{
	struct template_inputs in = {.mem = 1 * GiB, .cpus = 3};
	uint8_t a[32] = {1}, id[16] = {2}, e[32] = {3};
	char text[1024];

	assert_int_equal(template_key_text(&in, a, id, e, text, sizeof(text)), 0);
	assert_non_null(strstr(text, "cpus 3\n"));
	assert_non_null(strstr(text, "mem 1073741824\n"));
	assert_non_null(strstr(text, "snapshot "));
	assert_non_null(strstr(text, "init=/usr/sbin/kosa8-agent"));
	assert_non_null(strstr(text, "image 02000000"));
	assert_int_equal(template_key_text(&in, a, id, e, text, 40), -ENAMETOOLONG);
}

/* A template as the maker leaves it before sealing. */
static void lay_out(const char *root, const char *key)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", root, key);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/%s/checkpoints/c1", root, key);
	assert_int_equal(mkdir_p(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/%s/checkpoints/c1/state", root, key);
	put(p, "state");
	snprintf(p, sizeof(p), "%s/%s/checkpoints/c1/memory", root, key);
	put(p, "memory");
	snprintf(p, sizeof(p), "%s/%s/disk.k8d", root, key);
	put(p, "disk");
}

static void test_store_checks(void **state)
{
	struct template_inputs in = {.kernel = kernel, .image = image, .exe = exe, .mem = 512 * MiB,
				     .cpus = 1};
	char root[256], key[TEMPLATE_KEY_LEN + 1], why[600], p[512];
	struct stat st;

	assert_int_equal(template_root(root, sizeof(root), true, why, sizeof(why)), 0);
	assert_int_equal(stat(root, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	key_of(&in, key);
	assert_int_equal(template_check(root, key, why, sizeof(why)), -ENOENT);
	lay_out(root, key);
	/* Half-made: no template.json. */
	assert_int_equal(template_check(root, key, why, sizeof(why)), -ENOENT);
	assert_non_null(strstr(why, "half-made"));
	assert_int_equal(template_seal(root, key, &in, why, sizeof(why)), 0);
	assert_int_equal(template_check(root, key, why, sizeof(why)), 0);
	/* A file a sandbox could write through. */
	snprintf(p, sizeof(p), "%s/%s/checkpoints/c1/memory", root, key);
	assert_int_equal(chmod(p, 0600), 0);
	assert_int_equal(template_check(root, key, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "memory"));
	assert_int_equal(chmod(p, 0400), 0);
	assert_int_equal(template_check(root, key, why, sizeof(why)), 0);
	/* A missing file. */
	snprintf(p, sizeof(p), "%s/%s/disk.k8d", root, key);
	assert_int_equal(rename(p, "/tmp/kosa8-template-test-moved") == 0 || errno == EXDEV, 1);
	if (access(p, F_OK) != 0) {
		assert_int_equal(template_check(root, key, why, sizeof(why)), -ENOENT);
		assert_int_equal(rename("/tmp/kosa8-template-test-moved", p), 0);
	}
	/* A template directory others may enter. */
	snprintf(p, sizeof(p), "%s/%s", root, key);
	assert_int_equal(chmod(p, 0755), 0);
	assert_int_equal(template_check(root, key, why, sizeof(why)), -EPERM);
	assert_int_equal(chmod(p, 0700), 0);
	assert_int_equal(template_check(root, key, why, sizeof(why)), 0);
	/* template.json of another key: damaged, not used. */
	snprintf(p, sizeof(p), "%s/%s/" TEMPLATE_FILE, root, key);
	assert_int_equal(chmod(p, 0600), 0);
	put(p, "{\"key\":\"0000\",\"kernel\":\"/k\",\"image\":\"/i\",\"mem\":1,\"cpus\":1}");
	assert_int_equal(template_check(root, key, why, sizeof(why)), -EBADMSG);
	/* The store others may enter. */
	assert_int_equal(chmod(root, 0711), 0);
	assert_int_equal(template_root(root, sizeof(root), false, why, sizeof(why)), -EPERM);
	assert_int_equal(chmod(root, 0700), 0);
	assert_false(template_key_valid("abc"));
	assert_false(template_key_valid("../../../../../../../../../../../../../../../../../../../../etc"));
}

static void test_lock_waits(void **state)
{
	char root[256], why[600], key[TEMPLATE_KEY_LEN + 1];
	bool waited = false;
	int fd, status;
	pid_t pid;

	memset(key, 'a', TEMPLATE_KEY_LEN);
	key[TEMPLATE_KEY_LEN] = 0;
	assert_int_equal(template_root(root, sizeof(root), true, why, sizeof(why)), 0);
	fd = template_lock(root, key, &waited);
	assert_true(fd >= 0);
	assert_false(waited);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int c;
		close(fd); /* the parent's: flock goes with the open file */
		c = template_lock(root, key, &waited);
		_exit(c >= 0 && waited ? 0 : 1);
	}
	usleep(200 * 1000);
	close(fd);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(template_lock(root, "../x", &waited) == -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_follows_inputs),
		cmocka_unit_test(test_key_text),
		cmocka_unit_test(test_store_checks),
		cmocka_unit_test(test_lock_waits),
	};
	return cmocka_run_group_tests(tests, setup, tmp_teardown);
}
