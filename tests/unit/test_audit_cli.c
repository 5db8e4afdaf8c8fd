/* `kosa8 audit` run for real (the kosa8 binary of the same build), and the
 * logs and proofs it writes checked by tests/audit/verify_log.py, a verifier
 * written from docs/audit-format.md alone. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "shell_run.h"

#include "audit/audit.h"
#include "common/util.h"

static char kosa8[PATH_MAX];
static char dir[256];

static void shell_vars(char *buf, size_t len)
{
	/* pubhex: the key of $D/pub.pem as 64 hex digits, by openssl, not kosa8 */
	snprintf(buf, len,
		 "K='%s'; D='%s'; LOG=\"$D/a.log\"; export KOSA8_CONFIG_DIR=\"$D/cfg\"; "
		 "pubhex() { openssl pkey -pubin -in $D/pub.pem -outform DER | tail -c 32 | "
		 "od -An -tx1 | tr -d ' \\n'; }",
		 kosa8, dir);
}

static int lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static int setup(void **state)
{
	char self[PATH_MAX - 16];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n <= 0)
		return -1;
	self[n] = '\0';
	/* <build>/tests/test_audit_cli -> <build>/kosa8 */
	slash = strrchr(self, '/');
	*slash = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	snprintf(kosa8, sizeof(kosa8), "%s/kosa8", self);
	if (access(kosa8, X_OK))
		return -1;
	snprintf(dir, sizeof(dir), "/tmp/kosa8-audit-cli-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	/* Six records; append signs no head of its own (a head is due only
	 * after 10 s), so sign after records 2, 4 and 6: heads of size 0 (the
	 * log's first), 2, 4, 6. */
	return run("for i in 1 2 3 4; do $K audit append --log $LOG --type exec "
		   "--sandbox sb-$((i %% 2)) --details \"{\\\"argv\\\":[\\\"ls\\\",\\\"$i\\\"]}\" || exit 1; "
		   "[ $((i %% 2)) = 0 ] && { $K audit sign --log $LOG >/dev/null || exit 1; }; done; "
		   "$K audit append --log $LOG --type net.allow --sandbox sb-1 --actor policy "
		   "--details '{\"host\":\"pypi.org\",\"port\":443}' && "
		   "$K audit append --log $LOG --type sandbox.stop --sandbox sb-1 --actor supervisor && "
		   "$K audit sign --log $LOG >/dev/null && $K audit pubkey > $D/pub.pem");
}

static int teardown(void **state)
{
	return run("rm -rf $D") ? -1 : 0;
}

static void test_show_filters(void **state)
{
	assert_int_equal(run("$K audit show --log $LOG"), 0);
	assert_int_equal(lines(out), 6);
	assert_int_equal(run("$K audit show --log $LOG --type net.allow --json"), 0);
	assert_int_equal(lines(out), 1);
	assert_non_null(strstr(out, "\"details\":{\"host\":\"pypi.org\",\"port\":443}"));
	assert_non_null(strstr(out, "\"seq\":4"));
	assert_int_equal(run("$K audit show --log $LOG --sandbox sb-0"), 0);
	assert_int_equal(lines(out), 2);
	assert_int_equal(run("$K audit show --log $LOG --since 1h --until @9999999999"), 0);
	assert_int_equal(lines(out), 6);
	assert_int_equal(run("$K audit show --log $LOG --since @9999999999"), 0);
	assert_int_equal(lines(out), 0);
	assert_int_equal(run("$K audit show --log $LOG --since yesterday"), 2);
	assert_int_equal(run("$K audit show --log $D/missing.log"), 2);
	assert_non_null(strstr(out, "no audit log"));
	/* --type: a whole dotted prefix, not any prefix */
	assert_int_equal(run("$K audit show --log $LOG --type net"), 0);
	assert_int_equal(lines(out), 1);
	assert_non_null(strstr(out, "net.allow"));
	assert_int_equal(run("$K audit show --log $LOG --type ne"), 0);
	assert_int_equal(lines(out), 0);
}

static void test_append_rejects(void **state)
{
	assert_int_equal(run("$K audit append --log $LOG --type exec --details '[1]'"), 2);
	assert_non_null(strstr(out, "JSON object"));
	assert_int_equal(run("$K audit append --log $LOG --sandbox x"), 2);
	assert_int_equal(run("$K audit frobnicate"), 2);
	assert_int_equal(run("$K audit show --log $LOG --bogus"), 2);
}

static void test_verify_and_tamper(void **state)
{
	assert_int_equal(run("$K audit verify --log $LOG --pubkey $D/pub.pem"), 0);
	assert_non_null(strstr(out, "OK: "));
	assert_non_null(strstr(out, "6 records, 4 signed heads"));
	/* Edit one byte of record 2's details ("3" -> "7" inside its argv). */
	assert_int_equal(run("cp $LOG $D/t.log && cp $LOG.heads $D/t.log.heads && "
			     "python3 -c \"import sys; b=bytearray(open(sys.argv[1],'rb').read()); "
			     "i=b.index(b'\\\"3\\\"]'); b[i+1]=55; open(sys.argv[1],'wb').write(b)\" $D/t.log"),
			 0);
	assert_int_equal(run("$K audit verify --log $D/t.log --pubkey $D/pub.pem"), 1);
	assert_non_null(strstr(out, "FAILED"));
	assert_non_null(strstr(out, "edited"));
	assert_non_null(strstr(out, "first bad record: 2,"));
	/* Cut the last two records: the heads that covered them remain. */
	assert_int_equal(run("cp $LOG.heads $D/t.log.heads && head -c $(( $(stat -c %%s $LOG) - 140 )) "
			     "$LOG > $D/t.log"),
			 0);
	assert_int_equal(run("$K audit verify --log $D/t.log --pubkey $D/pub.pem"), 1);
	assert_non_null(strstr(out, "truncated"));
}

/* verify reads the log in one pass and takes the careful way (lengths under
 * the lock, a mapping to name the problem) only when the records do not end
 * at the file's end: both kinds of tail must still come out right. */
static void test_verify_tails(void **state)
{
	/* zeros after the last record: a torn write (section 7), a note */
	assert_int_equal(run("cp $LOG.heads $D/t.log.heads && cp $LOG $D/t.log && "
			     "head -c 16 /dev/zero >> $D/t.log"),
			 0);
	assert_int_equal(run("$K audit verify --log $D/t.log --pubkey $D/pub.pem"), 0);
	assert_non_null(strstr(out, "6 records, 4 signed heads"));
	assert_non_null(strstr(out, "incomplete last record (16 bytes"));
	/* bytes that are no record: damage, named as record 6 */
	assert_int_equal(run("cp $LOG $D/t.log && printf 'not a record at all, no.\\n' >> $D/t.log"), 0);
	assert_int_equal(run("$K audit verify --log $D/t.log --pubkey $D/pub.pem"), 1);
	assert_non_null(strstr(out, "edited (malformed record)"));
	assert_non_null(strstr(out, "first bad record: 6,"));
	assert_null(strstr(out, "incomplete"));
}

static void test_prove_and_check(void **state)
{
	assert_int_equal(run("$K audit prove 3 --log $LOG > $D/p.json"), 0);
	assert_int_equal(run("$K audit check-proof $D/p.json --pubkey $D/pub.pem"), 0);
	assert_non_null(strstr(out, "OK: record 3 (exec, sandbox sb-0)"));
	/* Against an older head (size 4) too. */
	assert_int_equal(run("$K audit prove 3 --size 4 --log $LOG > $D/p4.json && "
			     "$K audit check-proof $D/p4.json --pubkey $D/pub.pem"),
			 0);
	assert_int_equal(run("$K audit prove 4 --size 4 --log $LOG"), 1);
	assert_int_equal(run("$K audit prove 5 --size 4 --log $LOG"), 1);
	assert_non_null(strstr(out, "covers records 0..3, not record 5"));
	assert_int_equal(run("$K audit prove 1 --size 3 --log $LOG"), 1);
	assert_non_null(strstr(out, "no signed head has size 3"));
	/* A proof whose record was changed does not check. */
	assert_int_equal(run("sed 's/226c73222c2234/226c73222c2239/' $D/p.json > $D/bad.json && "
			     "! cmp -s $D/p.json $D/bad.json"),
			 0);
	assert_int_equal(run("$K audit check-proof $D/bad.json --pubkey $D/pub.pem"), 1);
	assert_non_null(strstr(out, "FAILED"));
	assert_int_equal(run("echo '{\"type\":1}' > $D/junk.json && "
			     "$K audit check-proof $D/junk.json --pubkey $D/pub.pem"),
			 2);
}

static void test_export_bundle(void **state)
{
	assert_int_equal(run("rm -f $D/b.bundle; $K audit export --log $LOG -o $D/b.bundle"), 0);
	assert_int_equal(run("$K audit verify --bundle $D/b.bundle --pubkey $D/pub.pem"), 0);
	assert_non_null(strstr(out, "6 records"));
	/* Another user's key does not vouch for it. */
	assert_int_equal(run("KOSA8_CONFIG_DIR=$D/other $K audit pubkey > $D/other.pem && "
			     "$K audit verify --bundle $D/b.bundle --pubkey $D/other.pem"),
			 1);
	assert_non_null(strstr(out, "head signature invalid"));
	assert_int_equal(run("head -c 100 $D/b.bundle > $D/short.bundle; "
			     "$K audit verify --bundle $D/short.bundle --pubkey $D/pub.pem"),
			 2);
	assert_non_null(strstr(out, "not a kosa8 audit bundle"));
}

static void test_consistency(void **state)
{
	assert_int_equal(run("$K audit consistency 2 latest --log $LOG"), 0);
	assert_non_null(strstr(out, "is a prefix of"));
	assert_int_equal(run("$K audit head --log $LOG > $D/saved.head && "
			     "$K audit append --log $LOG --type exec --details '{}' >/dev/null && "
			     "$K audit consistency $D/saved.head latest --log $LOG --json"),
			 0);
	assert_non_null(strstr(out, "kosa8-audit-consistency-proof-v1"));
	assert_int_equal(run("$K audit consistency 4 2 --log $LOG"), 1);
	assert_int_equal(run("$K audit consistency 999 latest --log $LOG"), 2);
}

/* Item 12: what a record or a guest holds reaches the terminal escaped:
 * C1 controls, bidi overrides, escape sequences, invalid UTF-8. */
static void test_show_escapes(void **state)
{
	assert_int_equal(run("printf '{\"a\":\"x\\342\\200\\256y\\302\\233z\"}' > $D/det && "
			     "$K audit append --log $D/e.log --type exec --details \"$(cat $D/det)\""),
			 0);
	assert_int_equal(run("$K audit show --log $D/e.log"), 0);
	assert_non_null(strstr(out, "x\\u202ey\\u009bz"));
	assert_null(strstr(out, "\xe2\x80\xae"));
	assert_null(strstr(out, "\xc2\x9b"));
	assert_int_equal(run("$K audit show --log $D/e.log --json"), 0);
	assert_non_null(strstr(out, "x\\u202ey\\u009bz"));
	assert_int_equal(run("$K audit show --log $D/e.log --raw"), 0);
	assert_non_null(strstr(out, "x\xe2\x80\xaey\xc2\x9bz"));
}

static void test_logs_escapes(void **state)
{
#define LOGS_CMD "export KOSA8_STATE_DIR=$D/st; mkdir -p $D/st/sandboxes/esc && " \
		"printf 'boot ok\\r\\n\\033]0;pwned\\007\\033[2J\\302\\233x \\342\\200\\256rtl\\377\\n' " \
		"> $D/st/sandboxes/esc/console.log && $K logs %s"

	assert_int_equal(run(LOGS_CMD, "esc"), 0);
	assert_string_equal(out, "boot ok\n\\x1b]0;pwned\\x07\\x1b[2J\\u009bx \\u202ertl\\xff\n");
	assert_int_equal(run(LOGS_CMD, "--raw esc"), 0);
	assert_non_null(strstr(out, "\033]0;pwned\007\033[2J"));
}


/* Item 13: a forged log re-signed under another key, with that key's
 * .pub.pem put beside the real key, does not pass; verify says which key
 * it trusted and whether anything pinned it. */
static void test_forgery_with_swapped_pub_pem(void **state)
{
	assert_int_equal(run("rm -rf $D/forge && mkdir $D/forge && "
			     "KOSA8_CONFIG_DIR=$D/forge/cfg $K audit append --log $D/forge/f.log "
			     "--type exec --details '{\"forged\":1}' >/dev/null 2>&1 && "
			     "KOSA8_CONFIG_DIR=$D/forge/cfg $K audit sign --log $D/forge/f.log >/dev/null && "
			     "cp -r $D/cfg $D/forge/victim && "
			     "cp $D/forge/cfg/audit/audit-ed25519.pub.pem $D/forge/victim/audit/ && "
			     "KOSA8_CONFIG_DIR=$D/forge/victim $K audit verify --log $D/forge/f.log"),
			 1);
	assert_non_null(strstr(out, "head signature invalid"));
	assert_int_equal(run("$K audit verify --log $D/forge/f.log --pubkey $D/pub.pem"), 1);
	/* pinned by hex, by file; a trusted-keys file */
	assert_int_equal(run("$K audit verify --log $LOG --pubkey $(pubhex)"), 0);
	assert_non_null(strstr(out, "pinned by --pubkey"));
	assert_int_equal(run("$K audit verify --log $LOG"), 0);
	assert_non_null(strstr(out, "NOT pinned"));
	assert_non_null(strstr(out, "integrity only"));
	assert_int_equal(run("umask 022; pubhex > $D/tk && echo >> $D/tk && "
			     "$K audit verify --log $LOG --trusted-keys $D/tk"),
			 0);
	assert_non_null(strstr(out, "pinned in"));
	assert_int_equal(run("$K audit verify --log $D/forge/f.log --trusted-keys $D/tk"), 1);
	assert_int_equal(run("chmod 666 $D/tk && $K audit verify --log $LOG --trusted-keys $D/tk"), 2);
	assert_non_null(strstr(out, "may be written by others"));
	/* the log's creation printed the key to pin */
	assert_int_equal(run("$K audit append --log $D/new.log --type x"), 0);
	assert_non_null(strstr(out, "created"));
	assert_non_null(strstr(out, "--pubkey "));
}

/* Item 18: an auditor's saved head pins the log: cutting the tail of the
 * log and of the heads together, or replacing the log, is then caught. */
static void test_verify_pinned_head(void **state)
{
	/* A log of its own: an append 10 s after the last head signs one by
	 * itself, so under load the shared log's head numbers vary.  The cut
	 * keeps the first two records and the heads covering at most those. */
	assert_int_equal(run("rm -f $D/h.log* && for i in 1 2 3 4; do "
			     "$K audit append --log $D/h.log --type t >/dev/null 2>&1 || exit 1; "
			     "[ $i = 2 ] && stat -c %%s $D/h.log > $D/h.two; done; "
			     "$K audit sign --log $D/h.log >/dev/null && "
			     "$K audit head --log $D/h.log > $D/pin.head && "
			     "$K audit verify --log $D/h.log --head $D/pin.head"),
			 0);
	assert_non_null(strstr(out, "pinned: head #"));
	assert_non_null(strstr(out, "(size 4)"));
	/* cut the last two records and the heads over them: plain verify cannot tell */
	assert_int_equal(run("awk '$6 <= 2' $D/h.log.heads > $D/c.heads && head -c $(cat $D/h.two) $D/h.log > $D/c.log && "
			     "mv $D/c.heads $D/h.log.heads && mv $D/c.log $D/h.log && rm -f $D/h.log.state && "
			     "$K audit verify --log $D/h.log"),
			 0);
	assert_int_equal(run("$K audit verify --log $D/h.log --head $D/pin.head"), 1);
	assert_non_null(strstr(out, "truncated"));
	/* another log altogether */
	assert_int_equal(run("$K audit verify --log $D/new.log --head $D/pin.head"), 1);
	assert_non_null(strstr(out, "another log"));
}

/* A pin that fails never reads "OK", and a saved-head file is exactly one
 * head line: one with a second line or junk after it is not taken as its
 * first line, nor is a CRLF copy. */
static void test_verify_pinned_head_strict(void **state)
{
	assert_int_equal(run("rm -f $D/o.log*; $K audit append --log $D/o.log --type t >/dev/null 2>&1 && "
			     "$K audit head --log $D/o.log > $D/other.head && "
			     "$K audit verify --log $LOG --head $D/other.head"),
			 1);
	assert_non_null(strstr(out, "another log"));
	assert_null(strstr(out, "OK"));
	assert_int_equal(run("$K audit head --log $LOG > $D/p.head && cat $D/p.head $D/p.head > $D/two.head && "
			     "$K audit verify --log $LOG --head $D/two.head"),
			 2);
	assert_non_null(strstr(out, "exactly one head line"));
	assert_null(strstr(out, "OK"));
	assert_int_equal(run("(cat $D/p.head; echo junk) > $D/junk.head && "
			     "$K audit consistency $D/junk.head latest --log $LOG"),
			 2);
	assert_int_equal(run("sed 's/$/\\r/' $D/p.head > $D/crlf.head && "
			     "$K audit verify --log $LOG --head $D/crlf.head"),
			 2);
	assert_null(strstr(out, "OK"));
	assert_int_equal(run("$K audit verify --log $LOG --head $D/p.head"), 0);
}

/* PATH.state is the writer's cache, in a folder a log forger can write:
 * a forged tree in it must not make the key holder sign a wrong root
 * (which then fails the honest records as "rewritten"). */
static void test_state_cache_forged(void **state)
{
	assert_int_equal(run("rm -f $D/c.log*; for i in 1 2 3; do $K audit append --log $D/c.log --type t "
			     ">/dev/null 2>&1 || exit 1; done; $K audit sign --log $D/c.log >/dev/null && "
			     "$K audit append --log $D/c.log --type t >/dev/null 2>&1 && "
			     "$K audit append --log $D/c.log --type t >/dev/null 2>&1 && "
			     "python3 -c 'import sys; b = bytearray(open(sys.argv[1], \"rb\").read()); "
			     "b[96:96 + 64 * 32] = bytes(x ^ 0x55 for x in b[96:96 + 64 * 32]); "
			     "open(sys.argv[1], \"wb\").write(b)' $D/c.log.state && "
			     "$K audit sign --log $D/c.log >/dev/null && "
			     "$K audit verify --log $D/c.log --pubkey $D/pub.pem"),
			 0);
	assert_non_null(strstr(out, "5 records, 3 signed heads verified"));
}

/* A trusted-keys file of ours, 0600, in a folder others may write (not
 * sticky): they can rename their own file over it, so it pins nothing. */
static void test_trusted_keys_folder(void **state)
{
	assert_int_equal(run("rm -rf $D/tkd && mkdir $D/tkd && chmod 777 $D/tkd && "
			     "pubhex > $D/tkd/tk && chmod 600 $D/tkd/tk && "
			     "$K audit verify --log $LOG --trusted-keys $D/tkd/tk"),
			 2);
	assert_non_null(strstr(out, "may be written by others"));
	/* sticky like /tmp: only the owner may replace it */
	assert_int_equal(run("chmod 1777 $D/tkd && $K audit verify --log $LOG --trusted-keys $D/tkd/tk"), 0);
	assert_int_equal(run("chmod 755 $D/tkd && ln -s tk $D/tkd/link && "
			     "$K audit verify --log $LOG --trusted-keys $D/tkd/link"),
			 0);
	assert_non_null(strstr(out, "pinned in"));
}

/* Item 19: what export and prove write is private like the log. */
static void test_outputs_private(void **state)
{
	assert_int_equal(run("umask 022; rm -f $D/o.bundle $D/o.json; "
			     "$K audit export --log $LOG -o $D/o.bundle && "
			     "$K audit prove 1 --log $LOG -o $D/o.json && "
			     "stat -c %%a $D/o.bundle $D/o.json"),
			 0);
	assert_string_equal(out + strlen(out) - 8, "600\n600\n");
	assert_int_equal(run("$K audit check-proof $D/o.json --pubkey $D/pub.pem"), 0);
}

/* Item 16: appends from a script do not each sign a head: one when the
 * log is made, then at most one per AUDIT_HEAD_SECS_DEFAULT of the loop's
 * own time (a loaded machine stretches the loop, not the rule), never one
 * per append. */
static void test_append_heads_per_interval(void **state)
{
	unsigned heads = 0, secs = 0;

	assert_int_equal(run("t0=$(date +%%s); for i in $(seq 40); do "
			     "$K audit append --log $D/many.log --type t >/dev/null 2>&1 || exit 1; "
			     "done; echo $(wc -l < $D/many.log.heads) $(( $(date +%%s) - t0 ))"),
			 0);
	assert_int_equal(sscanf(out, "%u %u", &heads, &secs), 2);
	assert_true(heads >= 1);
	assert_true(heads <= 2 + secs / AUDIT_HEAD_SECS_DEFAULT);
	assert_true(heads < 40);
	assert_int_equal(run("$K audit verify --log $D/many.log"), 0);
	assert_non_null(strstr(out, "40 records"));
	/* Within one interval the last appends wait for a head; a loop that
	 * took longer may have signed one on its last append. */
	if (secs < AUDIT_HEAD_SECS_DEFAULT)
		assert_non_null(strstr(out, "not yet covered by a signed head"));
}

static bool have_python(void)
{
	return system("command -v python3 >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1") == 0;
}

/* The independent verifier accepts what kosa8 writes and refuses edits. */
static void test_independent_verifier(void **state)
{
	if (!have_python()) {
		fprintf(stderr, "python3 or openssl missing: independent verifier not run\n");
		skip();
	}
	assert_int_equal(run("python3 tests/audit/verify_log.py log $LOG $D/pub.pem"), 0);
	assert_non_null(strstr(out, "OK "));
	assert_int_equal(run("$K audit prove 5 --log $LOG > $D/p5.json && "
			     "python3 tests/audit/verify_log.py proof $D/p5.json $D/pub.pem"),
			 0);
	assert_int_equal(run("cp $LOG $D/u.log && cp $LOG.heads $D/u.log.heads && "
			     "printf 'X' | dd of=$D/u.log bs=1 seek=120 conv=notrunc 2>/dev/null && "
			     "python3 tests/audit/verify_log.py log $D/u.log $D/pub.pem"),
			 1);
	assert_int_equal(run("python3 tests/audit/verify_log.py log $LOG $D/other.pem"), 1);
	/* tampers of every kind: both verifiers agree on each, and every one
	 * that changes signed content fails (more: run the script by hand
	 * with a larger count) */
	assert_int_equal(run("python3 tests/audit/tamper_compare.py $K $LOG $D/pub.pem 30"), 0);
	assert_non_null(strstr(out, "0 disagreements"));
}

/* A format-1 log (tests/audit/v1, by kosa8 42588ff): verify says what it is
 * (status 2); `audit append` moves it aside, says so in one line, and the
 * new log verifies; the archive still gets the format-1 answer. */
static void test_v1_upgrade(void **state)
{
	const char *arch = "$D/v1/a.log.v1-2440df7045288c13ee63d5d30e0364f1";

	assert_int_equal(run("mkdir $D/v1 && cp tests/audit/v1/v1.log $D/v1/a.log && "
			     "cp tests/audit/v1/v1.log.heads $D/v1/a.log.heads"), 0);
	assert_int_equal(run("$K audit verify --log $D/v1/a.log"), 2);
	assert_non_null(strstr(out, "format 1 log: written by kosa8 before format 2"));
	assert_int_equal(run("$K audit append --log $D/v1/a.log --type exec --actor agent"), 0);
	assert_non_null(strstr(out, "was a format-1 log (2 records"));
	assert_int_equal(run("cmp tests/audit/v1/v1.log %s && "
			     "cmp tests/audit/v1/v1.log.heads %s.heads", arch, arch), 0);
	assert_int_equal(run("$K audit sign --log $D/v1/a.log && $K audit verify --log $D/v1/a.log"), 0);
	assert_non_null(strstr(out, "OK: "));
	assert_non_null(strstr(out, "2 records"));
	assert_int_equal(run("$K audit show --log $D/v1/a.log --type audit.archived"), 0);
	assert_non_null(strstr(out, "\"records\":2,"));
	assert_int_equal(run("$K audit verify --log %s", arch), 2);
	assert_non_null(strstr(out, "format 1 log"));
}

/* $D/s.log is $LOG with its heads (or tail) changed by a shell line; both
 * verifiers must refuse it. */
static void both_refuse(const char *make)
{
	assert_int_equal(run("rm -f $D/s.log*; cp $LOG $D/s.log && cp $LOG.heads $D/s.log.heads && (%s) && "
			     "$K audit verify --log $D/s.log --pubkey $D/pub.pem",
			     make),
			 1);
	assert_int_equal(run("python3 tests/audit/verify_log.py log $D/s.log $D/pub.pem"), 1);
	assert_non_null(strstr(out, "BAD "));
}

/* Section 5 allows one spelling of a head line and section 7 one shape of
 * a torn tail; a forger without the key re-spells signed heads (upper-case
 * hex, leading zeros, CRLF) or hides a whole record behind a cut-off one. */
static void test_independent_verifier_strict(void **state)
{
	if (!have_python())
		skip();
	both_refuse("sed -i '$s/ \\([0-9a-f]*\\)$/ \\U\\1/' $D/s.log.heads");
	both_refuse("sed -i 's/$/\\r/' $D/s.log.heads");
	both_refuse("awk '{ if (NR == 2) $4 = \"0\" $4; print }' $LOG.heads > $D/s.log.heads");
	both_refuse("awk '{ if (NR == 2) $3 = \"+\" $3; print }' $LOG.heads > $D/s.log.heads");
	both_refuse("printf 'XYZ' >> $D/s.log");
	both_refuse("python3 -c 'import sys; b = open(sys.argv[1], \"rb\").read(); "
		    "n = int.from_bytes(b[36:40], \"big\"); "
		    "open(sys.argv[1], \"ab\").write(b\"K8AR\" + (10**6).to_bytes(4, \"big\") + b[32:32 + n])' "
		    "$D/s.log");
	both_refuse("printf '\\n' >> $D/s.log.heads");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_show_filters),
		cmocka_unit_test(test_v1_upgrade),
		cmocka_unit_test(test_append_rejects),
		cmocka_unit_test(test_verify_and_tamper),
		cmocka_unit_test(test_verify_tails),
		cmocka_unit_test(test_prove_and_check),
		cmocka_unit_test(test_export_bundle),
		cmocka_unit_test(test_consistency),
		cmocka_unit_test(test_independent_verifier),
		cmocka_unit_test(test_independent_verifier_strict),
		cmocka_unit_test(test_show_escapes),
		cmocka_unit_test(test_logs_escapes),
		cmocka_unit_test(test_forgery_with_swapped_pub_pem),
		cmocka_unit_test(test_verify_pinned_head),
		cmocka_unit_test(test_verify_pinned_head_strict),
		cmocka_unit_test(test_state_cache_forged),
		cmocka_unit_test(test_trusted_keys_folder),
		cmocka_unit_test(test_outputs_private),
		cmocka_unit_test(test_append_heads_per_interval),
	};
	return cmocka_run_group_tests_name("audit_cli", tests, setup, teardown);
}
