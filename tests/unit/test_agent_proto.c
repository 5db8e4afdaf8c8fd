/* Agent protocol codec: headers, TLV requests, entries, path and symlink
 * checks, CRC-32, and the tree writer fed hostile frames directly (the same
 * code guards the agent's put and the host's get). */
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

#include "agentproto/proto.h"
#include "agentproto/tree.h"

static void test_hdr(void **state)
{
	uint8_t b[AP_HDR_SIZE];
	struct ap_hdr h;
	ap_hdr_encode(b, AP_EXEC, 7, 100);
	assert_int_equal(ap_hdr_decode(b, &h), 0);
	assert_int_equal(h.type, AP_EXEC);
	assert_int_equal(h.chan, 7);
	assert_int_equal(h.len, 100);
	ap_hdr_encode(b, AP_EXEC, 7, AP_MAX_PAYLOAD + 1);
	assert_int_equal(ap_hdr_decode(b, &h), -EBADMSG);
	ap_hdr_encode(b, 0, 7, 1);
	assert_int_equal(ap_hdr_decode(b, &h), -EBADMSG);
	ap_hdr_encode(b, AP_TYPE_MAX + 1, 7, 1);
	assert_int_equal(ap_hdr_decode(b, &h), -EBADMSG);
	ap_hdr_encode(b, AP_PING, 7, 0);
	b[6] = 1;   /* flags */
	assert_int_equal(ap_hdr_decode(b, &h), -EBADMSG);
}

static void test_exec_req(void **state)
{
	struct ap_wr w;
	struct ap_exec_req q;
	uint8_t pty[4] = { 30, 0, 100, 0 };
	ap_wr_init(&w);
	ap_put_tlv_str(&w, AP_T_ARG, "ls");
	ap_put_tlv_str(&w, AP_T_ARG, "-l");
	ap_put_tlv_str(&w, AP_T_ENV, "A=1");
	ap_put_tlv_str(&w, AP_T_CWD, "/tmp");
	ap_put_tlv(&w, AP_T_PTY, pty, 4);
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), 0);
	assert_int_equal(q.argc, 2);
	assert_string_equal(q.argv[1], "-l");
	assert_null(q.argv[2]);
	assert_string_equal(q.env[0], "A=1");
	assert_string_equal(q.cwd, "/tmp");
	assert_true(q.pty);
	assert_int_equal(q.rows, 30);
	assert_int_equal(q.cols, 100);
	ap_exec_req_free(&q);
	/* Every truncation of a valid request is refused or decodes cleanly. */
	for (size_t n = 0; n < w.len; n++) {
		int rc = ap_exec_req_decode(w.p, n, &q);
		if (rc == 0)
			ap_exec_req_free(&q);
		else
			assert_int_equal(rc, -EBADMSG);
	}
	ap_wr_free(&w);

	ap_wr_init(&w);   /* no argv */
	ap_put_tlv_str(&w, AP_T_CWD, "/");
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
	ap_wr_init(&w);   /* embedded NUL */
	ap_put_tlv(&w, AP_T_ARG, "a\0b", 3);
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
	ap_wr_init(&w);   /* env without '=' */
	ap_put_tlv_str(&w, AP_T_ARG, "x");
	ap_put_tlv_str(&w, AP_T_ENV, "NOEQUALS");
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
	ap_wr_init(&w);   /* cwd twice */
	ap_put_tlv_str(&w, AP_T_ARG, "x");
	ap_put_tlv_str(&w, AP_T_CWD, "/");
	ap_put_tlv_str(&w, AP_T_CWD, "/");
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
	ap_wr_init(&w);   /* TLV length beyond the payload */
	ap_put_u16(&w, AP_T_ARG);
	ap_put_u32(&w, 0xffffffffu);
	ap_put_bytes(&w, "abc", 3);
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
}

static void test_paths(void **state)
{
	const char *good[] = { "a", "a/b", "a.b/..c/...", ".hidden" };
	const char *bad[] = { "", "/a", "a/", "a//b", ".", "..", "a/../b", "a/./b", "../x", "x/.." };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_int_equal(ap_path_check(good[i], strlen(good[i])), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(ap_path_check(bad[i], strlen(bad[i])), -EBADMSG);
	assert_int_equal(ap_path_check("a\0b", 3), -EBADMSG);

	assert_int_equal(ap_symlink_check("l", 1, "x", 1), 0);
	assert_int_equal(ap_symlink_check("d/l", 3, "../x", 4), 0);
	assert_int_equal(ap_symlink_check("d/l", 3, "../../x", 7), -EXDEV);
	assert_int_equal(ap_symlink_check("l", 1, "../x", 4), -EXDEV);
	assert_int_equal(ap_symlink_check("l", 1, "/etc/passwd", 11), -EXDEV);
	assert_int_equal(ap_symlink_check("l", 1, "a/../../x", 9), -EXDEV);
	assert_int_equal(ap_symlink_check("l", 1, "./a/./b", 7), 0);
	assert_int_equal(ap_symlink_check("l", 1, "", 0), -EXDEV);
}

static void test_crc_and_exit(void **state)
{
	assert_int_equal(ap_crc32(0, "123456789", 9), 0xcbf43926u);
	assert_int_equal(ap_crc32(ap_crc32(0, "1234", 4), "56789", 5), 0xcbf43926u);
	struct ap_exit x;
	uint8_t ok[8] = { AP_EXITED, 0, 0, 0, 42, 0, 0, 0 };
	assert_int_equal(ap_exit_decode(ok, 8, &x), 0);
	assert_int_equal(x.code, 42);
	uint8_t sig[8] = { AP_KILLED, 1, 0, 0, 11, 0, 0, 0 };
	assert_int_equal(ap_exit_decode(sig, 8, &x), 0);
	assert_int_equal(x.kind, AP_KILLED);
	assert_int_equal(x.core, 1);
	uint8_t badsig[8] = { AP_KILLED, 0, 0, 0, 0, 0, 0, 0 };
	assert_int_equal(ap_exit_decode(badsig, 8, &x), -EBADMSG);
	uint8_t badcode[8] = { AP_EXITED, 0, 0, 0, 0, 1, 0, 0 };
	assert_int_equal(ap_exit_decode(badcode, 8, &x), -EBADMSG);
	assert_int_equal(ap_exit_decode(ok, 7, &x), -EBADMSG);
}

/* ---- tree writer against crafted streams ---- */

static char tmp[64];

static int feed(struct ap_tree_writer *w, uint16_t type, const void *p, size_t len)
{
	struct ap_frame f = { .h = { .len = (uint32_t)len, .type = type, .chan = 1 }, .p = p };
	return ap_tw_frame(w, &f);
}

static int entry(struct ap_tree_writer *w, uint8_t kind, uint32_t mode, uint64_t size,
		 const char *path, const char *target)
{
	struct ap_entry e = { .kind = kind, .mode = mode, .size = size, .path = path,
			      .path_len = (uint16_t)strlen(path), .target = target ? target : "",
			      .target_len = target ? (uint16_t)strlen(target) : 0 };
	struct ap_wr wr;
	ap_wr_init(&wr);
	ap_entry_encode(&wr, &e);
	int rc = feed(w, AP_ENTRY, wr.p, wr.len);
	ap_wr_free(&wr);
	return rc;
}

static int file_end(struct ap_tree_writer *w, uint64_t len, uint32_t crc)
{
	uint8_t b[12];
	struct ap_wr wr = { .p = b, .cap = sizeof(b) };
	ap_put_u64(&wr, len);
	ap_put_u32(&wr, crc);
	return feed(w, AP_FILE_END, b, sizeof(b));
}

static void open_root(struct ap_tree_writer *w, const char *sub)
{
	char p[128];
	snprintf(p, sizeof(p), "%s/%s", tmp, sub);
	assert_int_equal(ap_tw_open(w, p, false, 0, 0), 0);
}

static void test_writer_good(void **state)
{
	struct ap_tree_writer w;
	struct stat sb;
	char p[160], buf[16];
	open_root(&w, "good");
	assert_int_equal(entry(&w, AP_E_DIR, 0750, 0, "d", NULL), 0);
	assert_int_equal(entry(&w, AP_E_FILE, 0640, 5, "d/f", NULL), 0);
	assert_int_equal(feed(&w, AP_DATA, "hel", 3), 0);
	assert_int_equal(feed(&w, AP_DATA, "lo", 2), 0);
	assert_int_equal(file_end(&w, 5, ap_crc32(0, "hello", 5)), 0);
	assert_int_equal(entry(&w, AP_E_SYMLINK, 0777, 0, "d/l", "f"), 0);
	uint8_t end[12];
	struct ap_wr wr = { .p = end, .cap = sizeof(end) };
	ap_put_u32(&wr, 3);
	ap_put_u64(&wr, 5);
	assert_int_equal(feed(&w, AP_TREE_END, end, 12), 1);
	ap_tw_close(&w);
	snprintf(p, sizeof(p), "%s/good/d/f", tmp);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0640);
	snprintf(p, sizeof(p), "%s/good/d/l", tmp);
	assert_int_equal(readlink(p, buf, sizeof(buf)), 1);
	snprintf(p, sizeof(p), "%s/good/d", tmp);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0750);
}

static void test_writer_refuses(void **state)
{
	struct ap_tree_writer w;
	char p[160];
	struct stat sb;

	open_root(&w, "bad1");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 1, "../escape", NULL), -EBADMSG);
	ap_tw_close(&w);
	open_root(&w, "bad2");
	assert_int_equal(entry(&w, AP_E_SYMLINK, 0777, 0, "l", "/etc"), -EXDEV);
	assert_int_equal(entry(&w, AP_E_SYMLINK, 0777, 0, "l", "../.."), -EXDEV);
	ap_tw_close(&w);
	/* A symlink already in the target must not be followed. */
	snprintf(p, sizeof(p), "%s/bad3", tmp);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/bad3/out", tmp);
	assert_int_equal(symlink(tmp, p), 0);
	open_root(&w, "bad3");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 1, "out/escape", NULL), -EXDEV);
	assert_int_equal(entry(&w, AP_E_DIR, 0755, 0, "out", NULL), -ENOTDIR);
	ap_tw_close(&w);
	snprintf(p, sizeof(p), "%s/escape", tmp);
	assert_int_equal(lstat(p, &sb), -1);
	/* Lengths and checksums. */
	open_root(&w, "bad4");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 2, "f", NULL), 0);
	assert_int_equal(feed(&w, AP_DATA, "abc", 3), -EBADMSG);
	ap_tw_close(&w);
	open_root(&w, "bad5");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 3, "f", NULL), 0);
	assert_int_equal(feed(&w, AP_DATA, "abc", 3), 0);
	assert_int_equal(file_end(&w, 3, 12345), -EIO);
	ap_tw_close(&w);
	open_root(&w, "bad6");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 3, "f", NULL), 0);
	assert_int_equal(feed(&w, AP_DATA, "ab", 2), 0);
	assert_int_equal(file_end(&w, 3, ap_crc32(0, "ab", 2)), -EIO);
	ap_tw_close(&w);
	open_root(&w, "bad7");   /* setuid-free modes only within 07777 */
	assert_int_equal(entry(&w, AP_E_FILE, 0100644, 0, "f", NULL), -EBADMSG);
	assert_int_equal(feed(&w, AP_DATA, "x", 1), -EBADMSG);
	ap_tw_close(&w);
}

static int setup(void **state)
{
	snprintf(tmp, sizeof(tmp), "/tmp/kosa8-aptest-XXXXXX");
	return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hdr),
		cmocka_unit_test(test_exec_req),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_crc_and_exit),
		cmocka_unit_test(test_writer_good),
		cmocka_unit_test(test_writer_refuses),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
