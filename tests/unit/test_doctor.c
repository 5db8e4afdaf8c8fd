/* `kosa8 doctor` run for real (the kosa8 binary of the same build): the
 * kernel found in an installed layout (<prefix>/lib/kosa8/bzImage, as a
 * release installs it), the audit key read but never created, a key that
 * others may read reported as a failure, and the exit status. */
#include <limits.h>
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
#include <cjson/cJSON.h>

#include "shell_run.h"

#include "common/util.h"

static char kosa8[PATH_MAX];
static char dir[64];

static void shell_vars(char *buf, size_t len)
{
	snprintf(buf, len, "K='%s'; D='%s'", kosa8, dir);
}

static int setup(void **state)
{
	char self[PATH_MAX - 16];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return -1;
	self[n] = '\0';
	/* <build>/tests/test_doctor -> <build>/kosa8 */
	*strrchr(self, '/') = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(kosa8, sizeof(kosa8), "%s/kosa8", self);
	if (access(kosa8, X_OK))
		return -1;
	snprintf(dir, sizeof(dir), "/tmp/kosa8-doctor-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	shell_use_dirs(dir);
	unsetenv("KOSA8_KERNEL");
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The check named name in doctor --json's output (in `out`): its status
 * into status, its "found" text into found. */
static void check_of(const char *name, char *status, char *found, size_t len)
{
	cJSON *root = cJSON_Parse(out), *c;

	assert_non_null(root);
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "checks"))
	{
		const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "check"));
		if (n && !strcmp(n, name)) {
			snprintf(status, 16, "%s", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "status")));
			snprintf(found, len, "%s", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "found")));
			cJSON_Delete(root);
			return;
		}
	}
	cJSON_Delete(root);
	fail_msg("no check '%s' in: %s", name, out);
}

/* The check name says status, and what it found contains in_found. */
static void expect(const char *name, const char *status, const char *in_found)
{
	char st[16], found[PATH_MAX + 256];

	check_of(name, st, found, sizeof(found));
	assert_string_equal(st, status);
	if (in_found && !strstr(found, in_found))
		fail_msg("%s: '%s' does not say '%s'", name, found, in_found);
}

/* What the check name found contains in_found, whatever its status (which
 * depends on this host's KVM). */
static void expect_found(const char *name, const char *in_found)
{
	char st[16], found[PATH_MAX + 256];

	check_of(name, st, found, sizeof(found));
	if (!strstr(found, in_found))
		fail_msg("%s: '%s' does not say '%s'", name, found, in_found);
}

/* The first n characters cmd printed, into buf (n + 1 bytes): it must
 * succeed and print at least that many. */
static void printed(const char *cmd, char *buf, size_t n)
{
	size_t k;

	assert_int_equal(run("%s", cmd), 0);
	k = strnlen(out, n);
	memcpy(buf, out, k);
	buf[k] = '\0';
	assert_int_equal(k, n);
}

/* A copy of kosa8 with a kernel beside it, as install.sh and the package
 * lay it out: no build tree anywhere near. */
static void test_kernel_of_installed_layout(void **state)
{
	assert_int_equal(run("mkdir -p $D/pfx/bin $D/pfx/lib/kosa8 && cp $K $D/pfx/bin/kosa8 && "
			     "head -c 4096 /dev/urandom >$D/pfx/lib/kosa8/bzImage"), 0);
	assert_int_equal(run("$D/pfx/bin/kosa8 doctor --json"), 1);
	expect("kernel", "ok", "/pfx/lib/kosa8/bzImage");
	/* No image builder installed there: the image check says so. */
	expect("image", "fail", "not installed");
	assert_non_null(strstr(out, "\"ready\":\tfalse"));
	/* Nor the VMM, until it is put where the package puts it. */
	expect("vmm", "fail", "kosa8-vmm");
	assert_int_equal(run("cp $(dirname $K)/kosa8-vmm $D/pfx/lib/kosa8/ && $D/pfx/bin/kosa8 doctor --json"), 1);
	expect("vmm", "ok", "/pfx/lib/kosa8/kosa8-vmm");

	assert_int_equal(run("rm $D/pfx/lib/kosa8/bzImage && $D/pfx/bin/kosa8 doctor --json"), 1);
	expect("kernel", "fail", NULL);
}

/* The image a release's kosa8 built is keyed by the installed agent: the
 * lookup must name that agent to find it (kosa8 run does the same). */
static void test_image_of_installed_layout(void **state)
{
	char key[32];

	printed("mkdir -p $D/img/bin $D/img/lib/kosa8/guest/image && cp $K $D/img/bin/kosa8 && "
		/* any static ELF will do as the agent (the sanitizer build's is dynamic) */
		"echo 'int main(void){return 0;}' | cc -static -x c - -o $D/img/lib/kosa8/kosa8-agent && "
		"cp guest/image/build.sh guest/image/default.recipe $D/img/lib/kosa8/guest/image/ && "
		"KOSA8_CACHE_DIR=$D/cache KOSA8_AGENT=$D/img/lib/kosa8/kosa8-agent "
		"$D/img/lib/kosa8/guest/image/build.sh --path default 2>&1 | "
		"sed -n 's/.*for key \\([0-9a-f]*\\).*/\\1/p'",
		key, 16);
	assert_int_equal(run("mkdir -p $D/cache/images/default/%s && touch $D/cache/images/default/%s/rootfs.ext4 && "
			     "KOSA8_CACHE_DIR=$D/cache $D/img/bin/kosa8 doctor --json",
			     key, key),
			 1);
	expect("image", "ok", key);
	/* No kernel there: no template can be made. */
	expect("template", "warn", "no guest kernel");
	/* With one, the template for the default image, its vCPUs and memory
	 * and this kosa8 is not made yet: warn, with the command that makes it. */
	assert_int_equal(run("head -c 4096 /dev/urandom >$D/img/lib/kosa8/bzImage && "
			     "cp $(dirname $K)/kosa8-vmm $D/img/lib/kosa8/ && "
			     "KOSA8_CACHE_DIR=$D/cache $D/img/bin/kosa8 doctor"),
			 1);
	assert_non_null(strstr(out, "warn  template   none yet for the default image (1 vCPU, 1024 MiB)"));
	assert_non_null(strstr(out, "fix: kosa8 image warm"));
}

static void test_key_never_created(void **state)
{
	run("$K doctor --json");
	expect("audit-key", "ok", "none yet");
	assert_int_equal(run("test -e $D/cfg/audit"), 1);
}

/* The fingerprint is the raw public key in hex, as `kosa8 audit verify
 * --pubkey` and trusted-keys take it; a key others may read fails. */
static void test_key_fingerprint_and_mode(void **state)
{
	char hex[80];

	printed("mkdir -p -m 700 $D/cfg/audit && (umask 077; openssl genpkey -algorithm ed25519 "
		"-out $D/cfg/audit/audit-ed25519.pem) && openssl pkey -in "
		"$D/cfg/audit/audit-ed25519.pem -pubout -outform DER | tail -c 32 | od -An -tx1 | "
		"tr -d ' \\n'",
		hex, 64);
	run("$K doctor --json");
	expect("audit-key", "ok", hex);

	assert_int_equal(run("chmod 644 $D/cfg/audit/audit-ed25519.pem && $K doctor"), 1);
	assert_non_null(strstr(out, "FAIL  audit-key"));
	assert_non_null(strstr(out, "fix: chmod 600"));
	assert_int_equal(run("rm -rf $D/cfg/audit"), 0);
}

/* The helper scripts are found as `kosa8 vm` and the machine commands find
 * them: $KOSA8_TESTBED and $KOSA8_MACHINE_SCRIPT count, beside a copy of
 * kosa8 that has no testbed/ of its own. */
static void test_emulation_found_as_commands_find_it(void **state)
{
	if (run("command -v qemu-system-x86_64"))
		skip();
	assert_int_equal(run("mkdir -p $D/emu/bin && cp $K $D/emu/bin/kosa8 && "
			     "printf '#!/bin/sh\\nexit 0\\n' >$D/emu/tb && chmod +x $D/emu/tb"),
			 0);
	run("$D/emu/bin/kosa8 doctor --json");
	expect_found("emulation", "not installed");
	run("KOSA8_TESTBED=$D/emu/tb KOSA8_MACHINE_SCRIPT=$D/emu/tb $D/emu/bin/kosa8 doctor --json");
	expect("emulation", "ok", "the helper machine");
	run("KOSA8_TESTBED=$D/emu/tb $D/emu/bin/kosa8 doctor --json");
	expect_found("emulation", "not installed");
	run("KOSA8_MACHINE_SCRIPT=$D/emu/tb $D/emu/bin/kosa8 doctor --json");
	expect_found("emulation", "not installed");
}

static void test_usage(void **state)
{
	assert_int_equal(run("$K doctor --bogus"), 2);
	assert_int_equal(run("$K doctor --help"), 0);
	assert_non_null(strstr(out, "--json"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kernel_of_installed_layout),
		cmocka_unit_test(test_image_of_installed_layout),
		cmocka_unit_test(test_key_never_created),
		cmocka_unit_test(test_key_fingerprint_and_mode),
		cmocka_unit_test(test_emulation_found_as_commands_find_it),
		cmocka_unit_test(test_usage),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
