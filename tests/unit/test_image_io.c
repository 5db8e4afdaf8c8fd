/* `kosa8 image export` and `import` run for real on a small image laid out
 * as build.sh lays one out (an ext4 made by mkfs.ext4 -d, sparse, with its
 * manifest, recipe and identity sidecar): the round trip byte for byte with
 * the holes kept, import over HTTP from a real server on loopback, and the
 * refusals: a wrong checksum, a URL without one, a truncated archive,
 * hostile archives made with GNU tar, an existing image without --force,
 * an interrupted download.  After every refusal nothing of the import is
 * left in the cache.  The parsers of what an archive says are called
 * directly at the end. */
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

#include "shell_run.h"
#include "image/manifest.h"

static char kosa8[PATH_MAX];
static char dir[64];

/* K the CLI, D the test's folder, S the cache the image is exported from,
 * I the image in it, A its archive (with A.sha256); left() lists what an
 * import left in cache $1 besides the lock. */
static void shell_vars(char *buf, size_t len)
{
	snprintf(buf, len,
		 "K='%s'; D='%s'; S=\"$D/src\"; I=\"$S/images/demo/0123456789abcdef\"; A=\"$D/www/demo.tar.zst\"; "
		 "export KOSA8_CONFIG_DIR=\"$D/cfg\" KOSA8_STATE_DIR=\"$D/state\" XDG_RUNTIME_DIR=\"$D/run\"; "
		 "unset KOSA8_IMAGE_SOURCE KOSA8_IMAGE_SHA256 KOSA8_AGENT KOSA8_IMAGE_BUILDER; "
		 "left() { find \"$1/images\" -mindepth 1 ! -name .lock 2>/dev/null; }",
		 kosa8, dir);
}

/* The image: a 256 MiB ext4 with 2 MiB of random data in its tree, 64 KiB
 * more at 200 MiB (a hole on each side), and a sidecar as disk/base_id.c
 * writes it, so that the archive carries one. */
static const char make_image[] =
	"mkdir -p \"$I\" \"$D/tree/etc\" \"$D/www\" \"$D/run\" && chmod 700 \"$D/run\" && "
	"echo kosa8 > \"$D/tree/etc/hostname\" && head -c 2M /dev/urandom > \"$D/tree/blob\" && "
	"truncate -s 256M \"$I/rootfs.ext4\" && mkfs.ext4 -q -F -d \"$D/tree\" \"$I/rootfs.ext4\" && "
	"dd if=/dev/urandom of=\"$I/rootfs.ext4\" bs=64K seek=3200 count=1 conv=notrunc status=none && "
	"printf '{\"name\": \"demo\", \"key\": \"0123456789abcdef\", \"arch\": \"x86_64\", "
	"\"virtual_size\": 268435456, \"packages\": []}\\n' > \"$I/manifest.json\" && "
	"echo 'name = demo' > \"$I/recipe\" && chmod 0444 \"$I\"/* && f=\"$I/rootfs.ext4\" && "
	"printf 'kosa8-base-id 2\\nsize %s\\nmtime %s\\nctime %s\\nsha256 %s\\n' $(stat -c %s \"$f\") "
	"$(stat -c %.9Y \"$f\") $(stat -c %.9Z \"$f\") $(sha256sum < \"$f\" | cut -c1-64) > \"$f.kosa8-id\"";

static int setup(void **state)
{
	char self[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return -1;
	self[n] = '\0';
	/* <build>/tests/test_image_io -> <build>/kosa8 */
	*strrchr(self, '/') = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(kosa8, sizeof(kosa8), "%s/kosa8", self);
	snprintf(dir, sizeof(dir), "/tmp/kosa8-image-io-XXXXXX");
	if (access(kosa8, X_OK) || !mkdtemp(dir))
		return -1;
	if (run("%s", make_image))
		return fprintf(stderr, "%s", out), -1;
	if (run("KOSA8_CACHE_DIR=\"$S\" $K image export demo/0123456789abcdef \"$A\" --sha256-file"))
		return fprintf(stderr, "%s", out), -1;
	return 0;
}

static int teardown(void **state)
{
	return run("for p in \"$D\"/*.pid; do [ -f \"$p\" ] && kill $(cat \"$p\"); done; rm -rf \"$D\"") ? -1 : 0;
}

static void test_round_trip(void **state)
{
	/* What export printed: sha256sum's line, and the same in A.sha256. */
	assert_int_equal(run("cd \"$D/www\" && sha256sum -c demo.tar.zst.sha256 && "
			     "tar --zstd -tf \"$A\" | tr '\\n' ' '"), 0);
	assert_non_null(strstr(out, "manifest.json recipe rootfs.ext4.kosa8-id rootfs.ext4 "));

	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c1\"; $K image import \"$A\" 2>&1 >\"$D/c1.out\"; "
			     "cat \"$D/c1.out\""), 0);
	assert_non_null(strstr(out, "verified (SOURCE.sha256)"));
	assert_non_null(strstr(out, "\n/tmp/kosa8-image-io-"));
	assert_int_equal(run("N=\"$D/c1/images/demo/0123456789abcdef\" && test \"$(tail -1 \"$D/c1.out\")\" = \"$N/rootfs.ext4\" && "
			     "cmp \"$I/rootfs.ext4\" \"$N/rootfs.ext4\" && cmp \"$I/manifest.json\" \"$N/manifest.json\" && "
			     "cmp \"$I/recipe\" \"$N/recipe\" && test -f \"$N/import.json\" && test $(stat -c %%a \"$N/rootfs.ext4\") = 444 && "
			     "echo alloc $(stat -c %%b \"$I/rootfs.ext4\") $(stat -c %%b \"$N/rootfs.ext4\") && left \"$D/c1\""), 0);
	{
		/* The holes stay holes: no more blocks than the original. */
		long a = 0, b = 0;
		assert_int_equal(sscanf(strstr(out, "alloc "), "alloc %ld %ld", &a, &b), 2);
		assert_true(b > 0 && b <= a && b < 65536); /* < 32 MiB of the 256 */
	}
	assert_non_null(strstr(out, "/import.json\n"));
	assert_null(strstr(out, ".import-"));

	/* The imported image is what the name stands for (no recipe "demo"
	 * here): export by name finds it, and the archive is the same bytes. */
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c1\"; $K image export demo \"$D/again.tar.zst\" && "
			     "a=$(zstd -dc \"$A\" | tar -xOf - rootfs.ext4 | sha256sum) && "
			     "b=$(zstd -dc \"$D/again.tar.zst\" | tar -xOf - rootfs.ext4 | sha256sum) && test \"$a\" = \"$b\""), 0);
}

/* A real HTTP server on loopback serving $D/www; its port in $D/http.port. */
static void start_http(void)
{
	assert_int_equal(run("[ -s \"$D/http.port\" ] && kill -0 $(cat \"$D/http.pid\") && exit 0; "
			     "cd \"$D/www\" && { python3 -u -m http.server --bind 127.0.0.1 0 >\"$D/http.log\" 2>&1 & "
			     "echo $! >\"$D/http.pid\"; } && "
			     "while ! grep -q 'port [0-9]' \"$D/http.log\"; do kill -0 $(cat \"$D/http.pid\") || exit 1; sleep 0.1; done && "
			     "sed -n 's/.* port \\([0-9]*\\).*/\\1/p' \"$D/http.log\" | head -1 >\"$D/http.port\""), 0);
}

static void test_http(void **state)
{
	start_http();
	/* SOURCE.sha256 served beside it: verified. */
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c2\"; U=http://127.0.0.1:$(cat \"$D/http.port\"); "
			     "$K image import $U/demo.tar.zst --name web && "
			     "cmp \"$I/rootfs.ext4\" \"$D/c2/images/web/0123456789abcdef/rootfs.ext4\""), 0);
	assert_non_null(strstr(out, "verified (SOURCE.sha256)"));
	assert_non_null(strstr(out, "downloading"));

	/* No checksum anywhere: a URL is refused, and nothing is left. */
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c3\"; U=http://127.0.0.1:$(cat \"$D/http.port\"); "
			     "cp \"$A\" \"$D/www/bare.tar.zst\" && $K image import $U/bare.tar.zst; echo rc=$?; left \"$D/c3\""), 0);
	assert_non_null(strstr(out, "no checksum to verify"));
	assert_non_null(strstr(out, "--no-verify"));
	assert_non_null(strstr(out, "rc=1\n"));
	assert_null(strstr(out, "/images/"));

	/* --no-verify takes it, and says so; --sha256 checks it. */
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c3\"; U=http://127.0.0.1:$(cat \"$D/http.port\"); "
			     "$K image import $U/bare.tar.zst --no-verify --name a && "
			     "$K image import $U/bare.tar.zst --name b --sha256 $(cut -c1-64 \"$A.sha256\")"), 0);
	assert_non_null(strstr(out, "NOT verified"));
	assert_non_null(strstr(out, "verified (--sha256)"));

	/* A missing file: the server's answer, nothing left. */
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c4\"; U=http://127.0.0.1:$(cat \"$D/http.port\"); "
			     "$K image import $U/nothing.tar.zst --no-verify; echo rc=$?; left \"$D/c4\""), 0);
	assert_non_null(strstr(out, "404"));
	assert_non_null(strstr(out, "rc=1\n"));
	assert_null(strstr(out, "/images/"));
}

static void test_wrong_checksum(void **state)
{
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c5\"; "
			     "$K image import \"$A\" --sha256 $(printf '%%064d' 0); echo rc=$?; left \"$D/c5\""), 0);
	assert_non_null(strstr(out, "checksum mismatch: expected 0000000000"));
	assert_non_null(strstr(out, "rc=1\n"));
	assert_null(strstr(out, "/images/"));
	/* A SOURCE.sha256 that does not match is no better. */
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c5\"; cp \"$A\" \"$D/x.tar.zst\" && "
			     "printf '%%064d  x.tar.zst\\n' 1 > \"$D/x.tar.zst.sha256\" && "
			     "$K image import \"$D/x.tar.zst\"; echo rc=$?; left \"$D/c5\""), 0);
	assert_non_null(strstr(out, "checksum mismatch"));
	assert_non_null(strstr(out, "rc=1\n"));
	assert_null(strstr(out, "/images/"));
}

static void test_truncated(void **state)
{
	/* Cut in the disk's data, and in the first member. */
	for (const char *const *n = (const char *const[]){"$(( $(stat -c %s \"$A\") / 2 ))", "300", NULL}; *n; n++) {
		assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c6\"; head -c %s \"$A\" > \"$D/cut.tar.zst\" && "
				     "$K image import \"$D/cut.tar.zst\" --no-verify; echo rc=$?; left \"$D/c6\"", *n), 0);
		assert_non_null(strstr(out, "is refused: "));
		assert_non_null(strstr(out, "rc=1\n"));
		assert_null(strstr(out, "/images/"));
	}
}

/* Each archive is made by GNU tar in $D/h from the image's files ($D/x:
 * the image unpacked), as an attacker could; each is refused with its
 * reason, nothing is left in the cache and nothing appears outside it. */
static void test_hostile(void **state)
{
	static const struct {
		const char *make, *why;
	} cases[] = {
		{"cd h && cp ../x/manifest.json . && echo x > ../evil_src && "
		 "tar -cPf ../a.tar --transform s/evil_src/evil_1/ manifest.json ../evil_src",
		 "member '../evil_1': a path with '..'"},
		{"cd h && cp ../x/manifest.json . && ln -s /etc/passwd rootfs.ext4 && tar -cf ../a.tar manifest.json rootfs.ext4",
		 "member 'rootfs.ext4': a link"},
		{"cd h && cp ../x/manifest.json . && ln manifest.json recipe && tar -cf ../a.tar manifest.json recipe",
		 "member 'recipe': a link"},
		{"cd h && cp ../x/manifest.json . && tar -cPf ../a.tar \"$PWD/manifest.json\"", "an absolute path"},
		{"cd h && { printf '{\"pad\": \"'; head -c 2M /dev/zero | tr '\\0' x; printf '\"}'; } > manifest.json && "
		 "tar -cf ../a.tar manifest.json", "member 'manifest.json' is larger than 1048576 bytes"},
		{"cd h && sed 's/268435456/536870912/' ../x/manifest.json > manifest.json && cp -a ../x/rootfs.ext4 . && "
		 "tar -cSf ../a.tar --format=pax manifest.json rootfs.ext4", "rootfs.ext4 is 268435456 bytes, the manifest says 536870912"},
		{"cd h && cp -a ../x/manifest.json ../x/rootfs.ext4 . && echo hi > extra && "
		 "tar -cSf ../a.tar --format=pax manifest.json rootfs.ext4 extra", "member 'extra' after rootfs.ext4"},
		{"cd h && cp -a ../x/recipe . && tar -cf ../a.tar recipe", "the first member is 'recipe', not manifest.json"},
		{"cd h && cp -a ../x/* . && sed -i \"s/^sha256 .*/sha256 $(printf '%064d' 0)/\" rootfs.ext4.kosa8-id && "
		 "tar -cSf ../a.tar --format=pax manifest.json recipe rootfs.ext4.kosa8-id rootfs.ext4",
		 "does not hash to the identity"},
	};

	assert_int_equal(run("mkdir -p \"$D/x\" && zstd -dc \"$A\" | tar -xSf - -C \"$D/x\" && "
			     "cmp \"$D/x/rootfs.ext4\" \"$I/rootfs.ext4\""), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c7\"; cd \"$D\" && rm -rf h a.tar evil_1 && mkdir h && (%s) && "
				     "$K image import \"$D/a.tar\" --no-verify; echo rc=$?; left \"$D/c7\"; "
				     "echo \"outside:$(ls \"$D/c7\" | grep -v '^images$'; ls \"$D\" | grep evil_1)\"", cases[i].make), 0);
		if (!strstr(out, cases[i].why) || !strstr(out, "rc=1\n") || strstr(out, "/images/") ||
		    !strstr(out, "outside:\n"))
			fail_msg("case %zu (%s):\n%s", i, cases[i].why, out);
	}
	/* The same files in the right order, by GNU tar, sparse: accepted. */
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c7\"; cd \"$D/x\" && "
			     "tar -cSf ../ok.tar --format=pax manifest.json recipe rootfs.ext4.kosa8-id rootfs.ext4 && "
			     "$K image import \"$D/ok.tar\" --no-verify && cmp \"$I/rootfs.ext4\" \"$D/c7/images/demo/0123456789abcdef/rootfs.ext4\""), 0);
}

static void test_existing_kept(void **state)
{
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c8\"; N=\"$D/c8/images/demo/0123456789abcdef\"; "
			     "$K image import \"$A\" && i=$(stat -c %%i \"$N/rootfs.ext4\") && "
			     "$K image import \"$A\"; echo rc=$?; test $i = $(stat -c %%i \"$N/rootfs.ext4\") && echo kept; left \"$D/c8\""), 0);
	assert_non_null(strstr(out, "is already in the cache"));
	assert_non_null(strstr(out, "--force replaces it"));
	assert_non_null(strstr(out, "rc=1\nkept\n"));
	assert_null(strstr(out, ".import-"));
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c8\"; N=\"$D/c8/images/demo/0123456789abcdef\"; "
			     "i=$(stat -c %%i \"$N/rootfs.ext4\") && $K image import \"$A\" --force && "
			     "test $i != $(stat -c %%i \"$N/rootfs.ext4\") && cmp \"$I/rootfs.ext4\" \"$N/rootfs.ext4\" && left \"$D/c8\""), 0);
	assert_non_null(strstr(out, "replaced 'demo'"));
	assert_null(strstr(out, ".import-"));
}

/* A server that sends 1 MiB of 64 and then stalls: the import is stopped
 * with SIGINT midway, and leaves nothing.  A folder left by an import that
 * was killed outright is removed by the next one. */
static void test_interrupted(void **state)
{
	assert_int_equal(run("cat > \"$D/stall.py\" <<'EOF'\n"
			     "import http.server, time\n"
			     "class H(http.server.BaseHTTPRequestHandler):\n"
			     "    def do_GET(self):\n"
			     "        self.send_response(200)\n"
			     "        self.send_header('Content-Length', str(64 << 20))\n"
			     "        self.end_headers()\n"
			     "        self.wfile.write(b'x' * (1 << 20))\n"
			     "        self.wfile.flush()\n"
			     "        time.sleep(3600)\n"
			     "s = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
			     "print(s.server_address[1], flush=True)\n"
			     "s.serve_forever()\n"
			     "EOF\n"
			     "python3 -u \"$D/stall.py\" > \"$D/stall.port\" 2>/dev/null & echo $! > \"$D/stall.pid\"; "
			     "while ! [ -s \"$D/stall.port\" ]; do sleep 0.1; done; "
			     "export KOSA8_CACHE_DIR=\"$D/c9\"; "
			     "$K image import http://127.0.0.1:$(cat \"$D/stall.port\")/big.tar.zst --no-verify & k=$!; "
			     "until [ \"$(stat -c %%s \"$D\"/c9/images/.import-*/archive 2>/dev/null)\" = 1048576 ]; do kill -0 $k || break; sleep 0.1; done; "
			     "kill -INT $k; wait $k; echo rc=$?; left \"$D/c9\""), 0);
	assert_non_null(strstr(out, "interrupted"));
	assert_non_null(strstr(out, "rc=1\n"));
	assert_null(strstr(out, "/images/"));

	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c9\"; mkdir -p \"$D/c9/images/.import-dead1/out\" && "
			     "echo junk > \"$D/c9/images/.import-dead1/out/rootfs.ext4\" && $K image import \"$A\" && left \"$D/c9\""), 0);
	assert_null(strstr(out, ".import-"));
}

/* KOSA8_IMAGE_SOURCE: create imports the default image when it is missing
 * (no sandbox is started: create only makes the disk over it). */
static void test_default_from_source(void **state)
{
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c10\" KOSA8_KERNEL=\"$A\" KOSA8_MACHINE=never "
			     "KOSA8_IMAGE_SOURCE=\"$A\"; $K create --cold --name t1 && "
			     "grep '\"image\"' \"$D/state/sandboxes/t1/sandbox.json\" && $K rm t1"), 0);
	assert_non_null(strstr(out, "importing it from KOSA8_IMAGE_SOURCE"));
	assert_non_null(strstr(out, "/c10/images/default/0123456789abcdef/rootfs.ext4\""));

	/* A URL with no checksum: refused, with what to set. */
	start_http();
	assert_int_equal(run("export KOSA8_CACHE_DIR=\"$D/c11\" KOSA8_KERNEL=\"$A\" KOSA8_MACHINE=never "
			     "KOSA8_IMAGE_SOURCE=http://127.0.0.1:$(cat \"$D/http.port\")/bare.tar.zst; "
			     "cp \"$A\" \"$D/www/bare.tar.zst\"; $K create --cold --name t2; echo rc=$?; left \"$D/c11\""), 0);
	assert_non_null(strstr(out, "KOSA8_IMAGE_SHA256=HEX"));
	assert_non_null(strstr(out, "rc=1\n"));
	assert_null(strstr(out, "/images/"));
}

static void test_parsers(void **state)
{
	static const char good[] = "{\"name\":\"a.b\",\"key\":\"00112233445566ff\",\"arch\":\"arm64\","
				   "\"virtual_size\":1073741824}";
	static const char *const bad[] = {
		"", "[]", "{\"name\":\"A\",\"key\":\"00112233445566ff\",\"arch\":\"x86_64\",\"virtual_size\":1073741824}",
		"{\"name\":\"../x\",\"key\":\"00112233445566ff\",\"arch\":\"x86_64\",\"virtual_size\":1073741824}",
		"{\"name\":\"a\",\"key\":\"00112233445566FF\",\"arch\":\"x86_64\",\"virtual_size\":1073741824}",
		"{\"name\":\"a\",\"key\":\"00112233445566ff\",\"arch\":\"sparc\",\"virtual_size\":1073741824}",
		"{\"name\":\"a\",\"key\":\"00112233445566ff\",\"arch\":\"x86_64\",\"virtual_size\":1073741825}",
		"{\"name\":\"a\",\"key\":\"00112233445566ff\",\"arch\":\"x86_64\",\"virtual_size\":2199023255552}",
		"{\"name\":\"a\",\"key\":\"00112233445566ff\",\"arch\":\"x86_64\",\"virtual_size\":\"1G\"}",
	};
	struct image_manifest m;
	char err[IMAGE_ERR_LEN], two[200];
	uint8_t sha[32];

	assert_int_equal(image_manifest_parse(good, strlen(good), &m, err, sizeof(err)), 0);
	assert_string_equal(m.name, "a.b");
	assert_string_equal(m.arch, "arm64");
	assert_true(m.virtual_size == 1ull << 30);
	/* The length bounds the parse: the same text cut short is refused. */
	assert_int_equal(image_manifest_parse(good, strlen(good) - 1, &m, err, sizeof(err)), -EBADMSG);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(image_manifest_parse(bad[i], strlen(bad[i]), &m, err, sizeof(err)), -EBADMSG);

	snprintf(two, sizeof(two), "%064d  a.tar\n%063d1 *b.tar\n", 0, 0);
	assert_int_equal(image_sums_find(two, strlen(two), "b.tar", sha), 0);
	assert_int_equal(sha[31], 1);
	assert_int_equal(image_sums_find(two, strlen(two), "c.tar", sha), -ENOENT);
	assert_int_equal(image_sums_find(two, 30, "a.tar", sha), -EBADMSG); /* a hash cut short */
	snprintf(two, sizeof(two), "%063d2\n", 0);
	assert_int_equal(image_sums_find(two, strlen(two), "any", sha), 0);
	assert_int_equal(sha[31], 2);
	assert_int_equal(image_sums_find("zz", 2, "any", sha), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_http),
		cmocka_unit_test(test_wrong_checksum),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_existing_kept),
		cmocka_unit_test(test_interrupted),
		cmocka_unit_test(test_default_from_source),
		cmocka_unit_test(test_parsers),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
