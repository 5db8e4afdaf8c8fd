/* The one escaping function for untrusted bytes on a terminal (kosa8 logs,
 * kosa8 audit show): every class it must catch, chunked input, JSON mode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/commands.h"
#include "common/termsafe.h"

static char got[4096];

/* Escapes in with flags; returns bytes consumed, output in got. */
static size_t esc(const char *in, size_t n, unsigned flags)
{
	FILE *f = fmemopen(got, sizeof(got), "w");
	size_t used;

	assert_non_null(f);
	used = term_write(f, in, n, flags);
	fclose(f);
	return used;
}

#define ESC(lit, flags) esc(lit, sizeof(lit) - 1, flags)

static void test_c0_del_escaped(void **state)
{
	ESC("a\x1b[2Jb\x07\x7f\r\x00z", TERM_FINAL);
	assert_string_equal(got, "a\\x1b[2Jb\\x07\\x7f\\x0d\\x00z");
	ESC("l1\nl2\tx\x1b]0;t\x07", TERM_FINAL);
	assert_string_equal(got, "l1\\x0al2\\x09x\\x1b]0;t\\x07");
	ESC("l1\nl2\tx\x1b", TERM_KEEP_LINES | TERM_FINAL);
	assert_string_equal(got, "l1\nl2\tx\\x1b");
}

static void test_cr(void **state)
{
	/* \r\n is a console's line end; a lone \r rewrites the line */
	ESC("ok\r\nfake\rreal\n", TERM_KEEP_LINES | TERM_FINAL);
	assert_string_equal(got, "ok\nfake\\x0dreal\n");
	/* a \r at a chunk's end waits for the next byte */
	assert_int_equal(ESC("ab\r", TERM_KEEP_LINES), 2);
	assert_string_equal(got, "ab");
	ESC("ab\r", TERM_KEEP_LINES | TERM_FINAL);
	assert_string_equal(got, "ab\\x0d");
	/* a final \r is the last byte: what lies past n is never read */
	assert_int_equal(esc("ab\r\n", 3, TERM_KEEP_LINES | TERM_FINAL), 3);
	assert_string_equal(got, "ab\\x0d");
}

static void test_c1_and_bidi(void **state)
{
	/* U+009B (CSI as C1), U+0085, U+202E, U+2066, U+2069, U+200F, U+061C, U+2028 */
	ESC("x\xc2\x9b" "2J\xc2\x85 \xe2\x80\xae evil \xe2\x81\xa6\xe2\x81\xa9\xe2\x80\x8f\xd8\x9c\xe2\x80\xa8",
	    TERM_FINAL);
	assert_string_equal(got, "x\\u009b2J\\u0085 \\u202e evil \\u2066\\u2069\\u200f\\u061c\\u2028");
	/* ordinary UTF-8 passes: e-acute, CJK, an emoji, U+202F (not bidi) */
	ESC("\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80\xe2\x80\xaf", TERM_FINAL);
	assert_string_equal(got, "\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80\xe2\x80\xaf");
}

/* Characters that print as nothing hide text from the person reading: a
 * guest's output or a log record can carry words in invisible tag
 * characters (U+E0000 block, read by a program, unseen by a person),
 * split a word with a zero-width space, or pad with fillers. */
static void test_invisible_format_chars(void **state)
{
	/* U+200B, U+FEFF, U+00AD, U+2060, U+E0041 (tag 'A'), U+3164, U+200D */
	ESC("a\xe2\x80\x8b" "b\xef\xbb\xbf" "c\xc2\xad" "d\xe2\x81\xa0" "e\xf3\xa0\x81\x81" "f\xe3\x85\xa4"
	    "g\xe2\x80\x8d", TERM_FINAL);
	assert_string_equal(got, "a\\u200bb\\ufeffc\\u00add\\u2060e\\U000e0041f\\u3164g\\u200d");
	ESC("\"e\xf3\xa0\x81\x81\xe2\x80\x8b\"", TERM_JSON | TERM_FINAL);
	assert_string_equal(got, "\"e\\udb40\\udc41\\u200b\"");
}

/* term_copy_fd, as kosa8 logs and kosa8 diff on a terminal use it: a file
 * larger than one read, a UTF-8 character across the read boundary, an
 * OSC 52 (clipboard write) sequence; raw copies it exactly. */
static void test_copy_fd(void **state)
{
	static const char esc_seq[] = "\x1b]52;c;ZXZpbA==\x07";
	static const char want[] = "\xc3\xa9\\x1b]52;c;ZXZpbA==\\x07";
	size_t n = 65535 + 2 + sizeof(esc_seq) - 1, outlen;
	char *in = malloc(n), *outbuf;
	FILE *tmp = tmpfile(), *out;

	assert_non_null(in);
	assert_non_null(tmp);
	memset(in, 'x', 65535);
	memcpy(in + 65535, "\xc3\xa9", 2); /* e-acute, split by the 64 KiB read */
	memcpy(in + 65537, esc_seq, sizeof(esc_seq) - 1);
	assert_int_equal(fwrite(in, 1, n, tmp), n);
	fflush(tmp);

	rewind(tmp);
	assert_non_null(out = open_memstream(&outbuf, &outlen));
	assert_int_equal(term_copy_fd(fileno(tmp), out, TERM_KEEP_LINES, false), 0);
	fclose(out);
	assert_null(memchr(outbuf, 0x1b, outlen));
	assert_null(memchr(outbuf, 0x07, outlen));
	assert_int_equal(outlen, 65535 + sizeof(want) - 1);
	assert_memory_equal(outbuf + 65535, want, sizeof(want) - 1);
	free(outbuf);

	assert_int_equal(lseek(fileno(tmp), 0, SEEK_SET), 0);
	assert_non_null(out = open_memstream(&outbuf, &outlen));
	assert_int_equal(term_copy_fd(fileno(tmp), out, TERM_KEEP_LINES, true), 0);
	fclose(out);
	assert_int_equal(outlen, n);
	assert_memory_equal(outbuf, in, n);
	free(outbuf);
	fclose(tmp);
	free(in);
}

static void test_invalid_utf8(void **state)
{
	/* lone continuation, overlong '/', surrogate, > U+10FFFF, 0xff, cut sequence */
	ESC("\x80|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xff|\xe2\x80", TERM_FINAL);
	assert_string_equal(got, "\\x80|\\xc0\\xaf|\\xed\\xa0\\x80|\\xf4\\x90\\x80\\x80|\\xff|\\xe2\\x80");
	/* 0xc2 0x9b split across chunks: not consumed until the rest comes */
	assert_int_equal(ESC("ab\xc2", 0), 2);
	assert_int_equal(ESC("ab\xe2\x80", 0), 2);
	assert_int_equal(ESC("ab\xe2\x41", 0), 4); /* decided: invalid */
	assert_string_equal(got, "ab\\xe2A");
}

static void test_json_mode(void **state)
{
	ESC("{\"a\":\"\xe2\x80\xae\xc2\x9b\xff\"}", TERM_JSON | TERM_FINAL);
	assert_string_equal(got, "{\"a\":\"\\u202e\\u009b\\ufffd\"}");
}

/* Every byte value, alone and after a lead byte: nothing a terminal acts on
 * ever comes out raw. */
static void test_no_raw_controls_ever(void **state)
{
	char in[3];

	for (int a = 0; a < 256; a++)
		for (int b = 0; b < 256; b++) {
			in[0] = (char)a;
			in[1] = (char)b;
			in[2] = 'z';
			esc(in, 3, TERM_FINAL);
			for (const unsigned char *p = (const unsigned char *)got; *p; p++) {
				assert_false(*p < 0x20 || *p == 0x7f);
				if (p[0] == 0xc2)
					assert_false(p[1] >= 0x80 && p[1] <= 0x9f);
			}
			assert_null(strstr(got, "\xe2\x80\xae"));
		}
}

/* A CLI error quotes what a guest named (a file in kosa8 cp, a link
 * target, the agent's own message): none of it may act on the terminal,
 * while the message's own line breaks stay. */
static void test_cli_fail_escapes(void **state)
{
	char path[] = "/tmp/kosa8-termsafe-XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0);
	fflush(stderr);
	assert_int_equal(dup2(fd, 2), 2);
	assert_int_equal(cli_fail("cp", "%s: refused\n%s", "a\x1b]0;owned\x07" "b\r",
				  "c\xc2\x9b" "2Jd\xe2\x80\xae" "e"), 1);
	fflush(stderr);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	n = pread(fd, got, sizeof(got) - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n > 0);
	got[n] = 0;
	assert_string_equal(got, "kosa8 cp: a\\x1b]0;owned\\x07b\\x0d: refused\n"
				 "c\\u009b2Jd\\u202ee\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_c0_del_escaped),
		cmocka_unit_test(test_cr),
		cmocka_unit_test(test_c1_and_bidi),
		cmocka_unit_test(test_invisible_format_chars),
		cmocka_unit_test(test_copy_fd),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_json_mode),
		cmocka_unit_test(test_no_raw_controls_ever),
		cmocka_unit_test(test_cli_fail_escapes),
	};
	return cmocka_run_group_tests_name("termsafe", tests, NULL, NULL);
}
