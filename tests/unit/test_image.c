/* `kosa8 image` and guest/image/build.sh run for real: the recipe parser
 * (build.sh --check) on good and broken recipes, the agent checks, the
 * refusal to build without root, and ls / path / rm on a cache laid out the
 * way build.sh lays it out.  Building a real image (mmdebstrap, minutes,
 * Debian's archive) is not a unit test: see docs/images.md. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "shell_run.h"
#include <cjson/cJSON.h>

static char kosa8[PATH_MAX];
static char builder[PATH_MAX];
static char dir[256];

static void shell_vars(char *buf, size_t len)
{
	snprintf(buf, len, "K='%s'; B='%s'; D='%s'; export KOSA8_CACHE_DIR=\"$D/cache\" KOSA8_CONFIG_DIR=\"$D/cfg\"; unset KOSA8_AGENT KOSA8_IMAGE_BUILDER", kosa8, builder, dir);
}

static int setup(void **state)
{
	char self[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n <= 0)
		return -1;
	self[n] = '\0';
	/* <build>/tests/test_image -> <build>/kosa8 and <checkout>/guest/image/build.sh */
	slash = strrchr(self, '/');
	*slash = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	snprintf(kosa8, sizeof(kosa8), "%s/kosa8", self);
	snprintf(builder, sizeof(builder), "%s/../guest/image/build.sh", self);
	if (access(kosa8, X_OK) || access(builder, X_OK))
		return -1;
	snprintf(dir, sizeof(dir), "/tmp/kosa8-image-test-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	/* readable by the unprivileged user of test_refuses_non_root */
	return chmod(dir, 0755) ? -1 : 0;
}

static int teardown(void **state)
{
	return run("rm -rf \"$D\"") ? -1 : 0;
}

static void test_default_recipe(void **state)
{
	assert_int_equal(run("$B --check"), 0);
	assert_non_null(strstr(out, "name=default\n"));
	assert_non_null(strstr(out, "suite=bookworm\n"));
	assert_non_null(strstr(out, "size=4294967296\n"));
	for (const char *const *p = (const char *const[]){" bash ", " python3 ", " git ", " curl ", " gcc ",
							    " make ", " iptables ", " fio ", NULL};
	     *p; p++)
		assert_non_null(strstr(out, *p));
	/* The same recipe by file name. */
	assert_int_equal(run("$B --check \"$(dirname $B)/default.recipe\" | head -1"), 0);
	assert_string_equal(out, "name=default\n");
}

/* Each broken recipe must fail with its line number and the reason. */
static void test_malformed_recipes(void **state)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"name = x\\nbogus = 1\\n", "r.recipe:2: unknown key 'bogus'"},
		{"name = x\\npackages = ok Bad_Pkg\\n", "r.recipe:2: 'Bad_Pkg' is not a Debian package name"},
		{"# only a comment\\nsuite = bookworm\\n", "no 'name = ...' line"},
		{"name = x\\nname = y\\n", "r.recipe:2: 'name' given twice"},
		{"name = x\\nsize = 12Q\\n", "r.recipe:2: size '12Q'"},
		{"name = x\\n\\nsize = 100M\\n", "r.recipe:3: size '100M' is below 256M"},
		{"name = x\\nsize = 2T\\n", "above 1T"},
		{"name = x\\nsize = 1048577K\\n", "not a whole number of MiB"},
		{"name = ../x\\n", "r.recipe:1: name '../x'"},
		{"name = x\\njust some words\\n", "r.recipe:2: expected 'key = value'"},
		{"name = x\\nvariant = huge\\n", "r.recipe:2: variant 'huge'"},
		{"name = x\\nmirror = ftp://host/debian\\n", "r.recipe:2: mirror"},
		{"name = x\\nrun =\\n", "r.recipe:2: 'run' has an empty value"},
		{"name = x\\nhostname = -bad\\n", "r.recipe:2: hostname"},
		{"name = x\\npath-exclude = usr/share\\n", "r.recipe:2: path-exclude"},
		{"name = x\\nsuite = Book worm\\n", "r.recipe:2: suite"},
		{"name = x\\0\\n", "NUL bytes"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = run("printf '%s' > \"$D/r.recipe\" && $B --check \"$D/r.recipe\"", cases[i].text);
		if (rc != 1 || !strstr(out, cases[i].want))
			fail_msg("case %zu: rc %d, output: %s(wanted: %s)", i, rc, out, cases[i].want);
	}
	/* A good one with every key, lists adding up, CRLF line ends. */
	assert_int_equal(run("printf 'name = mine\\r\\nsuite = bookworm\\nvariant = apt\\nsize = 1G\\n"
			     "hostname = box\\npackages = jq, vim\\npackages = htop\\nmirror = http://deb.debian.org/debian\\n"
			     "path-exclude = /usr/share/man/*\\nrun = echo \"a b\" > /etc/motd\\n' > \"$D/r.recipe\" && "
			     "$B --check \"$D/r.recipe\""),
			 0);
	assert_non_null(strstr(out, "name=mine\nsuite=bookworm\nvariant=apt\nsize=1073741824\nhostname=box\n"));
	assert_non_null(strstr(out, "packages=jq vim htop bash passwd iptables\n"));
	assert_non_null(strstr(out, "dpkgopt=path-exclude=/usr/share/man/*\n"));
	assert_non_null(strstr(out, "run=echo \"a b\" > /etc/motd\n"));
}

static void test_recipe_lookup(void **state)
{
	assert_int_equal(run("$B --check nope"), 1);
	assert_non_null(strstr(out, "unknown recipe 'nope'"));
	assert_non_null(strstr(out, "shipped: default"));
	/* A user's recipe by name, from the config folder. */
	assert_int_equal(run("mkdir -p \"$D/cfg/images\" && printf 'name = mine\\n' > \"$D/cfg/images/mine.recipe\" && "
			     "$B --check mine"),
			 0);
	assert_non_null(strstr(out, "name=mine\n"));
	assert_int_equal(run("$K image build nope"), 1);
	assert_non_null(strstr(out, "unknown recipe 'nope'"));
}

static void test_agent_checks(void **state)
{
	assert_int_equal(run("KOSA8_AGENT=\"$D/none\" $B --path"), 1);
	assert_non_null(strstr(out, "make build/kosa8-agent"));
	assert_int_equal(run("$B --agent \"$(dirname $B)/default.recipe\" --path"), 1);
	assert_non_null(strstr(out, "not an ELF binary"));
	assert_int_equal(run("KOSA8_AGENT=/bin/true $B --path"), 1);
	assert_non_null(strstr(out, "dynamically linked"));
	/* busybox-static is a static ELF: accepted, and nothing is built yet. */
	assert_int_equal(run("KOSA8_AGENT=/bin/busybox $B --path"), 1);
	assert_non_null(strstr(out, "image 'default' is not built for key "));
}

/* --arch: the agent must be built for the guest's architecture, and a
 * foreign architecture's images live in images-<arch>/, apart from x86_64's. */
static void test_arch_checks(void **state)
{
	assert_int_equal(run("$B --arch sparc --path"), 1);
	assert_non_null(strstr(out, "unknown architecture 'sparc'"));
	/* busybox-static: a static x86_64 ELF, not an arm64 agent. */
	assert_int_equal(run("$B --arch arm64 --agent /bin/busybox --path"), 1);
	assert_non_null(strstr(out, "is not an arm64 binary (ELF machine 62, want 183)"));
	/* A bare aarch64 ELF header (no program headers, so static). */
	assert_int_equal(run("{ printf '\\177ELF\\2\\1\\1'; head -c 11 /dev/zero; printf '\\267\\0'; head -c 44 /dev/zero; }"
			     " > \"$D/a64\" && $B --agent \"$D/a64\" --path"),
			 1);
	assert_non_null(strstr(out, "is not an x86_64 binary (ELF machine 183, want 62)"));
	assert_int_equal(run("$B --arch arm64 --agent \"$D/a64\" --path"), 1);
	assert_non_null(strstr(out, "image 'default' is not built for key "));
	/* Laid out under the key it names, in images-arm64/: found there. */
	assert_int_equal(run("k=$($B --arch arm64 --agent \"$D/a64\" --path 2>&1 | sed -n 's/.* for key \\([0-9a-f]*\\) .*/\\1/p') && "
			     "mkdir -p \"$D/cache/images-arm64/default/$k\" && touch \"$D/cache/images-arm64/default/$k/rootfs.ext4\" && "
			     "$B --arch arm64 --agent \"$D/a64\" --path && rm -r \"$D/cache/images-arm64\""),
			 0);
	assert_non_null(strstr(out, "/cache/images-arm64/default/"));
}

static void test_refuses_non_root(void **state)
{
	const char *as_user = geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";

	assert_int_equal(run("%s env HOME=\"$D\" KOSA8_AGENT=/bin/busybox $B", as_user), 1);
	assert_non_null(strstr(out, "building an image needs root"));
}

/* Lays out <cache>/images as build.sh does: two builds of "base" (the
 * newer first in ls), one of "other", and leftovers ls must ignore. */
static void make_cache(void)
{
	assert_int_equal(run("i=\"$D/cache/images\" && rm -rf \"$i\" && "
			     "mkdir -p \"$i/base/00000000000000aa\" \"$i/base/00000000000000bb\" \"$i/other/1234567890abcdef\" "
			     "\"$i/base/.build-00000000000000cc.x\" \"$i/.debs\" \"$i/base/not-a-key\" && "
			     "truncate -s 4G \"$i/base/00000000000000aa/rootfs.ext4\" && "
			     "touch -d @1000000000 \"$i/base/00000000000000aa/rootfs.ext4\" && "
			     "head -c 1048576 /dev/zero > \"$i/base/00000000000000bb/rootfs.ext4\" && "
			     "truncate -s 1G \"$i/other/1234567890abcdef/rootfs.ext4\" && "
			     "touch \"$i/base/.build-00000000000000cc.x/rootfs.ext4\" \"$i/base/not-a-key/rootfs.ext4\" "
			     "\"$i/.lock\""),
			 0);
}

static void test_ls(void **state)
{
	cJSON *a, *e;

	make_cache();
	assert_int_equal(run("$K image ls"), 0);
	assert_non_null(strstr(out, "NAME"));
	assert_non_null(strstr(out, "\nbase                 00000000000000bb     1.0M     1.0M  "));
	assert_non_null(strstr(out, "\nbase                 00000000000000aa       0B     4.0G  2001-09-"));
	assert_true(strstr(out, "00000000000000bb") < strstr(out, "00000000000000aa"));
	assert_non_null(strstr(out, "\nother                1234567890abcdef       0B     1.0G  "));
	assert_null(strstr(out, "cc"));
	assert_null(strstr(out, "not-a-key"));

	assert_int_equal(run("$K image ls --json"), 0);
	a = cJSON_Parse(out);
	assert_non_null(a);
	assert_int_equal(cJSON_GetArraySize(a), 3);
	e = cJSON_GetArrayItem(a, 1);
	assert_string_equal(cJSON_GetObjectItem(e, "key")->valuestring, "00000000000000aa");
	assert_true(cJSON_GetObjectItem(e, "virtual_bytes")->valuedouble == 4294967296.0);
	assert_true(cJSON_GetObjectItem(e, "allocated_bytes")->valuedouble == 0.0);
	assert_string_equal(cJSON_GetObjectItem(e, "built")->valuestring, "2001-09-09T01:46:40Z");
	cJSON_Delete(a);

	assert_int_equal(run("$K image ls --bogus"), 2);
	/* No cache at all is an empty list, not an error. */
	assert_int_equal(run("KOSA8_CACHE_DIR=\"$D/none\" $K image ls --json"), 0);
	assert_string_equal(out, "[]\n");
}

static void test_path(void **state)
{
	make_cache();
	assert_int_equal(run("$K image path base"), 0);
	assert_non_null(strstr(out, "/cache/images/base/00000000000000bb/rootfs.ext4\n"));
	assert_int_equal(run("$K image path nope"), 1);
	assert_non_null(strstr(out, "no image named 'nope'"));
	assert_int_equal(run("$K image path ../../etc"), 2);
}

static void test_rm(void **state)
{
	char lock[512];
	int fd;

	make_cache();
	assert_int_equal(run("$K image rm ../x"), 2);
	assert_int_equal(run("$K image rm base/xyz"), 2);
	assert_int_equal(run("$K image rm base/0000000000000000"), 1);
	assert_non_null(strstr(out, "no image 'base/0000000000000000'"));
	assert_int_equal(run("$K image rm gone"), 1);

	/* A build in progress holds the lock: rm waits for nothing, it refuses. */
	snprintf(lock, sizeof(lock), "%s/cache/images/.lock", dir);
	fd = open(lock, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	assert_int_equal(run("$K image rm other"), 1);
	assert_non_null(strstr(out, "an image build is running"));
	close(fd);

	assert_int_equal(run("$K image rm base/00000000000000aa && $K image ls"), 0);
	assert_null(strstr(out, "00000000000000aa"));
	assert_non_null(strstr(out, "00000000000000bb"));
	assert_int_equal(run("$K image rm base && $K image ls && test ! -e \"$D/cache/images/base\""), 0);
	assert_null(strstr(out, "base"));
	assert_non_null(strstr(out, "other"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_recipe),
		cmocka_unit_test(test_malformed_recipes),
		cmocka_unit_test(test_recipe_lookup),
		cmocka_unit_test(test_agent_checks),
		cmocka_unit_test(test_arch_checks),
		cmocka_unit_test(test_refuses_non_root),
		cmocka_unit_test(test_ls),
		cmocka_unit_test(test_path),
		cmocka_unit_test(test_rm),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
