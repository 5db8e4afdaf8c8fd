/* The audit log end to end: writer, verifier, every kind of tampering (each
 * found at the right record), torn writes at every byte offset, concurrent
 * appenders (threads and processes), a full disk, the signing key's mode. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "audit/audit.h"
#include "audit/sign.h"
#include "audit/verify.h"
#include "common/log.h"
#include "common/util.h"

struct fx {
	char dir[256], log[PATH_MAX], heads[PATH_MAX], keys[PATH_MAX];
	uint8_t pub[AUDIT_PUBKEY_LEN];
};

static void fx_init(struct fx *f)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/kosa8-audit-test-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->log, sizeof(f->log), "%s/audit.log", f->dir);
	snprintf(f->heads, sizeof(f->heads), "%s/audit.log.heads", f->dir);
	snprintf(f->keys, sizeof(f->keys), "%s/keys", f->dir);
}

static void fx_done(struct fx *f)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
}

static struct audit_log *fx_open(struct fx *f, unsigned head_every)
{
	struct audit_opts o = {.path = f->log, .key_dir = f->keys, .head_every = head_every,
			       .head_secs = 3600};
	struct audit_log *l = NULL;

	assert_int_equal(audit_log_open(&o, &l), 0);
	assert_int_equal(audit_log_public_key(l, f->pub), 0);
	return l;
}

static int append_one(struct audit_log *l, const char *tag, int i, uint64_t *seq)
{
	char det[128];
	struct audit_event ev = {"sb-test", "agent", "exec", det};

	snprintf(det, sizeof(det), "{\"tag\":\"%s\",\"i\":%d,\"argv\":[\"make\",\"check\"]}", tag, i);
	return audit_log_append(l, &ev, seq);
}

static void append_n(struct audit_log *l, int n, const char *tag)
{
	for (int i = 0; i < n; i++) {
		uint64_t seq;
		uint64_t before = audit_log_count(l);
		assert_int_equal(append_one(l, tag, i, &seq), 0);
		assert_int_equal(seq, before);
	}
}

/* ---- a 20-record log, shared by the tampering tests ---- */

#define N 20
static struct fx G;
static uint8_t *Glog, *Gheads;
static size_t Glog_len, Gheads_len;
static size_t Goff[N + 1]; /* offset of each record, and the end */

static int group_setup(void **state)
{
	struct audit_log *l;
	struct audit_record r;

	fx_init(&G);
	l = fx_open(&G, 5);
	append_n(l, N, "g");
	audit_log_close(l);
	if (read_file(G.log, 1 << 24, &Glog, &Glog_len) ||
	    read_file(G.heads, 1 << 24, &Gheads, &Gheads_len))
		return -1;
	Goff[0] = AUDIT_HDR_LEN;
	for (int i = 0; i < N; i++) {
		int n = audit_record_parse(Glog + Goff[i], Glog_len - Goff[i], &r);
		if (n <= 0)
			return -1;
		Goff[i + 1] = Goff[i] + (size_t)n;
	}
	return Goff[N] == Glog_len ? 0 : -1;
}

static int group_teardown(void **state)
{
	free(Glog);
	free(Gheads);
	fx_done(&G);
	return 0;
}

/* A private copy of the log bytes with room to grow. */
static uint8_t *copy_log(size_t *len)
{
	uint8_t *b = malloc(Glog_len + 4096);

	memcpy(b, Glog, Glog_len);
	*len = Glog_len;
	return b;
}

static void expect(const uint8_t *log, size_t len, const uint8_t *heads, size_t hlen,
		   const uint8_t *pub, enum audit_problem p, uint64_t seq)
{
	struct audit_verify_result res;
	int err = audit_verify(log, len, heads, hlen, pub, &res, NULL);

	if (res.problem != p || (p != AUDIT_OK && res.bad_seq != seq))
		fprintf(stderr, "got problem %d (%s) at seq %llu: %s\n", res.problem,
			audit_problem_name(res.problem), (unsigned long long)res.bad_seq, res.what);
	assert_int_equal(res.problem, p);
	assert_int_equal(err, p == AUDIT_OK ? 0 : -EBADMSG);
	if (p != AUDIT_OK)
		assert_int_equal(res.bad_seq, seq);
}

static void expect_log(const uint8_t *log, size_t len, enum audit_problem p, uint64_t seq)
{
	expect(log, len, Gheads, Gheads_len, G.pub, p, seq);
}

static void test_clean_log_verifies(void **state)
{
	struct audit_verify_result res;

	assert_int_equal(audit_verify_files(G.log, G.heads, G.pub, &res, NULL), 0);
	assert_int_equal(res.records, N);
	assert_true(res.heads >= N / 5);
	assert_int_equal(res.unsigned_records, 0);
	assert_true(res.have_head);
	assert_int_equal(res.last_head.size, N);
	assert_false(res.torn_tail);
	expect_log(Glog, Glog_len, AUDIT_OK, 0);
}

static void test_edit_details(void **state)
{
	size_t len;
	uint8_t *b = copy_log(&len);
	uint8_t *p = memmem(b + Goff[7], Goff[8] - Goff[7], "check", 5);

	assert_non_null(p);
	p[0] = 'C'; /* still a well-formed record, just different */
	expect_log(b, len, AUDIT_EDITED, 7);
	free(b);
}

static void test_edit_prev_field(void **state)
{
	size_t len;
	uint8_t *b = copy_log(&len);

	b[Goff[7] + 24 + 3] ^= 0x40;
	expect_log(b, len, AUDIT_EDITED, 7);
	free(b);
}

static void test_edit_seq_field(void **state)
{
	size_t len;
	uint8_t *b = copy_log(&len);

	b[Goff[7] + 15] ^= 0x02; /* low byte of seq */
	expect_log(b, len, AUDIT_EDITED, 7);
	free(b);
}

static void test_edit_breaks_framing(void **state)
{
	size_t len;
	uint8_t *b = copy_log(&len);

	b[Goff[7] + 7] ^= 0x01; /* low byte of the length */
	expect_log(b, len, AUDIT_MALFORMED, 7);
	free(b);
}

static int write_bytes(const char *path, const uint8_t *b, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int err;

	if (fd < 0)
		return -errno;
	err = write_all(fd, b, len);
	close(fd);
	return err;
}

/* A length field made huge looks like a record still being written; with
 * whole records after it, it is damage: reported, never cut. */
static void test_huge_length_is_not_torn(void **state)
{
	struct fx f;
	struct audit_opts o = {0};
	struct audit_log *l = NULL;
	size_t len;
	uint8_t *b = copy_log(&len), *after;
	size_t after_len;

	b[Goff[7] + 5] = 0x0f; /* length ~1 MB: runs past the end of the log */
	expect_log(b, len, AUDIT_MALFORMED, 7);
	fx_init(&f);
	assert_int_equal(write_bytes(f.log, b, len), 0);
	assert_int_equal(write_bytes(f.heads, Gheads, Gheads_len), 0);
	o.path = f.log;
	o.key_dir = G.keys;
	assert_int_equal(audit_log_open(&o, &l), -EBADMSG);
	assert_int_equal(read_file(f.log, 1 << 20, &after, &after_len), 0);
	assert_int_equal(after_len, len);
	assert_memory_equal(after, b, len);
	/* The same with no signed head to protect the records after it. */
	assert_int_equal(write_bytes(f.heads, NULL, 0), 0);
	assert_int_equal(audit_log_open(&o, &l), -EBADMSG);
	free(after);
	assert_int_equal(read_file(f.log, 1 << 20, &after, &after_len), 0);
	assert_int_equal(after_len, len);
	free(after);
	free(b);
	fx_done(&f);
}

static void test_edit_first_record(void **state)
{
	size_t len;
	uint8_t *b = copy_log(&len);

	b[Goff[0] + 24] = 1; /* record 0's prev must be zero */
	expect_log(b, len, AUDIT_EDITED, 0);
	free(b);
}

static void test_swap(void **state)
{
	size_t len, a = Goff[8] - Goff[7], c = Goff[9] - Goff[8];
	uint8_t *b = copy_log(&len);

	memcpy(b + Goff[7], Glog + Goff[8], c);
	memcpy(b + Goff[7] + c, Glog + Goff[7], a);
	expect_log(b, len, AUDIT_REORDERED, 7);
	free(b);
}

static void test_remove(void **state)
{
	size_t len, gap = Goff[8] - Goff[7];
	uint8_t *b = copy_log(&len);

	memmove(b + Goff[7], b + Goff[8], len - Goff[8]);
	len -= gap;
	expect_log(b, len, AUDIT_REMOVED, 7);
	free(b);
}

static void test_duplicate(void **state)
{
	size_t len, sz = Goff[8] - Goff[7];
	uint8_t *b = copy_log(&len);

	memmove(b + Goff[8] + sz, b + Goff[8], len - Goff[8]);
	memcpy(b + Goff[8], Glog + Goff[7], sz);
	len += sz;
	expect_log(b, len, AUDIT_REORDERED, 8);
	free(b);
}

static void test_truncate_after_head(void **state)
{
	size_t len;
	uint8_t *b = copy_log(&len);

	expect_log(b, Goff[15], AUDIT_TRUNCATED, 15);
	free(b);
}

static void test_bad_signature(void **state)
{
	uint8_t *h = malloc(Gheads_len);
	char *nl;
	struct audit_verify_result res;

	memcpy(h, Gheads, Gheads_len);
	/* Second head line: flip a digit of its signature (the line's end). */
	nl = memchr(h, '\n', Gheads_len);
	nl = memchr(nl + 1, '\n', Gheads_len - (size_t)(nl + 1 - (char *)h));
	nl[-3] = nl[-3] == '0' ? '1' : '0';
	assert_int_equal(audit_verify(Glog, Glog_len, h, Gheads_len, G.pub, &res, NULL), -EBADMSG);
	assert_int_equal(res.problem, AUDIT_BAD_SIGNATURE);
	assert_int_equal(res.bad_head, 1);
	free(h);
}

static void test_other_key(void **state)
{
	uint8_t pub[AUDIT_PUBKEY_LEN];
	struct audit_verify_result res;

	memcpy(pub, G.pub, sizeof(pub));
	pub[0] ^= 1;
	assert_int_equal(audit_verify(Glog, Glog_len, Gheads, Gheads_len, pub, &res, NULL), -EBADMSG);
	assert_int_equal(res.problem, AUDIT_BAD_SIGNATURE);
	assert_int_equal(res.bad_head, 0);
}

/* Re-chains every record after `from`, as an attacker who edits a record
 * and then recomputes the prev fields would. */
static void rechain(uint8_t *b, int from)
{
	merkle_hash h;

	for (int i = from; i + 1 < N; i++) {
		merkle_leaf_hash(b + Goff[i], Goff[i + 1] - Goff[i], h);
		memcpy(b + Goff[i + 1] + 24, h, AUDIT_HASH_LEN);
	}
}

static void test_chain_rewritten(void **state)
{
	size_t len;
	uint8_t *b = copy_log(&len);
	uint8_t *p = memmem(b + Goff[12], Goff[13] - Goff[12], "make", 4);
	struct audit_verify_result res;

	p[0] = 'f';
	rechain(b, 12);
	assert_int_equal(audit_verify(b, len, Gheads, Gheads_len, G.pub, &res, NULL), -EBADMSG);
	assert_int_equal(res.problem, AUDIT_ROOT_MISMATCH);
	/* A rewritten chain can only be placed between two signed heads. */
	assert_true(res.bad_seq <= 12 && 12 <= res.bad_seq_last);
	assert_true(res.bad_seq_last - res.bad_seq < 5);
	/* the offset named is that of the first record of the range */
	assert_int_equal(res.bad_offset, Goff[res.bad_seq]);
	free(b);
}

static void test_last_record_edited(void **state)
{
	size_t len;
	uint8_t *b = copy_log(&len);
	uint8_t *p = memmem(b + Goff[N - 1], Goff[N] - Goff[N - 1], "make", 4);
	struct audit_verify_result res;

	p[1] = 'A';
	assert_int_equal(audit_verify(b, len, Gheads, Gheads_len, G.pub, &res, NULL), -EBADMSG);
	assert_int_equal(res.problem, AUDIT_ROOT_MISMATCH);
	assert_int_equal(res.bad_seq_last, N - 1);
	free(b);
}

static void test_heads_reordered(void **state)
{
	uint8_t *h = malloc(Gheads_len);
	size_t l1 = (size_t)((uint8_t *)memchr(Gheads, '\n', Gheads_len) - Gheads) + 1;
	size_t l2 = (size_t)((uint8_t *)memchr(Gheads + l1, '\n', Gheads_len - l1) - Gheads) + 1 - l1;
	struct audit_verify_result res;

	memcpy(h, Gheads + l1, l2);
	memcpy(h + l2, Gheads, l1);
	memcpy(h + l1 + l2, Gheads + l1 + l2, Gheads_len - l1 - l2);
	assert_int_equal(audit_verify(Glog, Glog_len, h, Gheads_len, G.pub, &res, NULL), -EBADMSG);
	assert_int_equal(res.problem, AUDIT_BAD_HEADS);
	assert_int_equal(res.bad_head, 0); /* line 0 holds head #1: head #0 is not there */
	free(h);
}

/* ---- issue 23: the log as evidence (format 2) ---- */

/* The heads file as lines: line i starts at hoff[i]; returns the count. */
static size_t head_lines(size_t hoff[64])
{
	size_t n = 0, off = 0;

	while (off < Gheads_len && n < 63) {
		hoff[n++] = off;
		off = (size_t)((uint8_t *)memchr(Gheads + off, '\n', Gheads_len - off) - Gheads) + 1;
	}
	hoff[n] = Gheads_len;
	return n;
}

static void test_heads_missing_or_emptied(void **state)
{
	expect(Glog, Glog_len, NULL, 0, G.pub, AUDIT_BAD_HEADS, 0);
	expect(Glog, Glog_len, (const uint8_t *)"", 0, G.pub, AUDIT_BAD_HEADS, 0);
}

static void test_head_removed_from_middle(void **state)
{
	size_t hoff[64], n = head_lines(hoff);
	uint8_t *h = malloc(Gheads_len);
	struct audit_verify_result res;

	assert_true(n >= 4);
	for (size_t k = 0; k + 1 < n; k++) { /* every head but the last */
		memcpy(h, Gheads, hoff[k]);
		memcpy(h + hoff[k], Gheads + hoff[k + 1], Gheads_len - hoff[k + 1]);
		assert_int_equal(audit_verify(Glog, Glog_len, h, Gheads_len - (hoff[k + 1] - hoff[k]),
					      G.pub, &res, NULL), -EBADMSG);
		assert_int_equal(res.problem, AUDIT_BAD_HEADS);
		assert_int_equal(res.bad_head, k);
		assert_non_null(strstr(res.what, "missing"));
	}
	free(h);
}

/* Any field of any head line changed: caught, and named as that head. */
static void test_head_fields_signed(void **state)
{
	size_t hoff[64], n = head_lines(hoff);
	uint8_t *h = malloc(Gheads_len);
	struct audit_verify_result res;

	for (size_t k = 0; k < n; k++)
		for (size_t i = hoff[k] + 6; i + 1 < hoff[k + 1]; i++) {
			if (Gheads[i] == ' ')
				continue;
			memcpy(h, Gheads, Gheads_len);
			/* another digit of the same kind keeps the line well-formed */
			h[i] = h[i] == '1' ? '2' : '1';
			if (audit_verify(Glog, Glog_len, h, Gheads_len, G.pub, &res, NULL) != -EBADMSG)
				fail_msg("head %zu byte %zu changed: verify passed", k, i - hoff[k]);
			assert_true(res.problem == AUDIT_BAD_SIGNATURE || res.problem == AUDIT_BAD_HEADS);
		}
	free(h);
}

static void test_head_names_another_key(void **state)
{
	size_t hoff[64], n = head_lines(hoff);
	uint8_t *h = malloc(Gheads_len);
	struct audit_verify_result res;
	/* the public key field is the 9th: after 8 spaces */
	size_t at = hoff[n - 1];

	memcpy(h, Gheads, Gheads_len);
	for (int sp = 0; sp < 8; at++)
		sp += h[at] == ' ';
	h[at] = h[at] == 'a' ? 'b' : 'a';
	assert_int_equal(audit_verify(Glog, Glog_len, h, Gheads_len, G.pub, &res, NULL), -EBADMSG);
	assert_int_equal(res.problem, AUDIT_BAD_SIGNATURE);
	assert_int_equal(res.bad_head, n - 1);
	free(h);
}

/* An unsigned record with an earlier time after the last head: no key
 * needed to write it, so verify must see the time. */
static void test_time_goes_backwards(void **state)
{
	struct audit_event ev = {"sb", "agent", "exec", "{}"};
	struct audit_record last;
	merkle_hash h;
	size_t len;
	uint8_t *b = copy_log(&len);
	int n;

	audit_record_parse(b + Goff[N - 1], len - Goff[N - 1], &last);
	merkle_leaf_hash(last.raw, last.len, h);
	n = audit_record_encode(b + len, 4096, N, last.time_ns - 1, h, &ev);
	assert_true(n > 0);
	expect(b, len + (size_t)n, Gheads, Gheads_len, G.pub, AUDIT_BAD_TIME, N);
	/* the same record with the same time as the one before is fine */
	audit_record_encode(b + len, 4096, N, last.time_ns, h, &ev);
	expect(b, len + (size_t)n, Gheads, Gheads_len, G.pub, AUDIT_OK, 0);
	free(b);
}

static void test_wiped_or_cut_header(void **state)
{
	struct audit_verify_result res;
	size_t len;
	uint8_t *b = copy_log(&len);

	expect(NULL, 0, NULL, 0, G.pub, AUDIT_BAD_HEADER, 0);
	expect(NULL, 0, Gheads, Gheads_len, G.pub, AUDIT_BAD_HEADER, 0);
	expect(Glog, 20, Gheads, Gheads_len, G.pub, AUDIT_BAD_HEADER, 0);
	/* the creation time is signed: changed, the heads name another log */
	b[30] ^= 1;
	assert_int_equal(audit_verify(b, len, Gheads, Gheads_len, G.pub, &res, NULL), -EBADMSG);
	assert_int_equal(res.problem, AUDIT_BAD_HEADS);
	assert_non_null(strstr(res.what, "another log"));
	free(b);
}

/* A head whose size was raised past the end is a forgery, not a sign of
 * truncation: its signature is checked first. */
static void test_forged_head_size(void **state)
{
	size_t hoff[64], n = head_lines(hoff);
	uint8_t *h = malloc(Gheads_len + 8);
	struct audit_verify_result res;
	size_t at = hoff[n - 1], k;

	for (int sp = 0; sp < 5; at++)
		sp += Gheads[at] == ' ';
	assert_int_equal(memcmp(Gheads + at, "20 ", 3), 0);
	memcpy(h, Gheads, at);
	memcpy(h + at, "21", 2);
	k = Gheads_len - at - 2;
	memcpy(h + at + 2, Gheads + at + 2, k);
	assert_int_equal(audit_verify(Glog, Glog_len, h, Gheads_len, G.pub, &res, NULL), -EBADMSG);
	assert_int_equal(res.problem, AUDIT_BAD_SIGNATURE);
	assert_int_equal(res.bad_head, n - 1);
	free(h);
}

/* A record cut off at the end, under a signed head: malformed (section 6). */
static void test_cut_record_under_head(void **state)
{
	struct audit_verify_result res;

	assert_int_equal(audit_verify(Glog, Goff[N] - 10, Gheads, Gheads_len, G.pub, &res, NULL),
			 -EBADMSG);
	assert_int_equal(res.problem, AUDIT_MALFORMED);
	assert_int_equal(res.bad_seq, N - 1);
	assert_int_equal(res.bad_offset, Goff[N - 1]);
}

static void test_first_records_removed(void **state)
{
	struct audit_verify_result res;
	size_t len = Glog_len - (Goff[2] - Goff[0]);
	uint8_t *b = malloc(len);

	memcpy(b, Glog, AUDIT_HDR_LEN);
	memcpy(b + AUDIT_HDR_LEN, Glog + Goff[2], Glog_len - Goff[2]);
	assert_int_equal(audit_verify(b, len, Gheads, Gheads_len, G.pub, &res, NULL), -EBADMSG);
	assert_int_equal(res.problem, AUDIT_REMOVED);
	assert_null(strstr(res.what, "18446744073709551615"));
	assert_non_null(strstr(res.what, "records 0..1 were removed"));
	free(b);
}

/* The last record's own prev edited: a head over the records before it
 * clears them, so the last record is the one named. */
static void test_last_prev_flipped(void **state)
{
	struct fx f;
	struct audit_log *l;
	struct audit_record r;
	uint8_t *b, *h;
	size_t len, hlen, off = AUDIT_HDR_LEN;

	fx_init(&f);
	l = fx_open(&f, 1000);
	append_n(l, 3, "p");
	assert_int_equal(audit_log_sign_head(l, NULL), 0);
	append_n(l, 1, "q");
	audit_log_close(l);
	assert_int_equal(read_file(f.log, 1 << 20, &b, &len), 0);
	assert_int_equal(read_file(f.heads, 1 << 20, &h, &hlen), 0);
	for (int i = 0; i < 3; i++)
		off += (size_t)audit_record_parse(b + off, len - off, &r);
	b[off + AUDIT_REC_PREV_OFF + 5] ^= 0x40;
	expect(b, len, h, hlen, f.pub, AUDIT_EDITED, 3);
	free(b);
	free(h);
	fx_done(&f);
}

/* A log cut below its header, or with its heads removed: a writer refuses
 * and keeps the file as it is (the log id is evidence). */
static void test_writer_keeps_cut_log(void **state)
{
	struct fx f;
	struct audit_opts o = {0};
	struct audit_log *l = NULL;
	struct stat st;

	fx_init(&f);
	o.path = f.log;
	o.key_dir = G.keys;
	for (size_t cut = 0; cut < AUDIT_HDR_LEN; cut += 7) {
		assert_int_equal(write_bytes(f.log, Glog, cut), 0);
		assert_int_equal(write_bytes(f.heads, Gheads, Gheads_len), 0);
		assert_int_equal(audit_log_open(&o, &l), -EBADMSG);
		assert_int_equal(stat(f.log, &st), 0);
		assert_int_equal(st.st_size, cut);
	}
	/* records, no heads */
	assert_int_equal(write_bytes(f.log, Glog, Glog_len), 0);
	assert_int_equal(write_bytes(f.heads, Gheads, 0), 0);
	assert_int_equal(audit_log_open(&o, &l), -EBADMSG);
	assert_int_equal(stat(f.heads, &st), 0);
	assert_int_equal(st.st_size, 0);
	fx_done(&f);
}

/* Section 3: no control byte and only well-formed UTF-8, in details too. */
static void test_writer_rejects_raw_bytes(void **state)
{
	static const char *const bad[] = {
		"{\"a\":\"x\ty\"}", "{\"a\":\"\x1b[2J\"}", "{\"a\":\"\x7f\"}", "{\n\"a\":1}",
		"{\"a\":\"\xff\"}", "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}",
		"{\"a\":\"\xe2\x80\"}", "{\"a\":\"\xf4\x90\x80\x80\"}",
	};
	struct audit_event ev = {"sb", "agent", "exec", NULL};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ev.details = bad[i];
		assert_int_equal(audit_event_check(&ev), -EINVAL);
	}
	ev.details = "{\"a\":\"caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \\u001b\"}";
	assert_true(audit_event_check(&ev) > 0);
	ev.details = "{}";
	ev.sandbox = "sb-\xff";
	assert_int_equal(audit_event_check(&ev), -EINVAL);
}

/* A log of 10 records "s" with a signed head over them all, its
 * PATH.state's name in sp. */
static void state_fx(struct fx *f, char *sp, size_t len)
{
	struct audit_log *l;

	fx_init(f);
	snprintf(sp, len, "%s.state", f->log);
	l = fx_open(f, 1000);
	append_n(l, 10, "s");
	audit_log_close(l);
}

/* One more record by a writer that opens the log as it is now; then what
 * verify says of the whole. */
static int append_one_verify(struct fx *f, const char *what, struct audit_verify_result *res)
{
	struct audit_log *l = fx_open(f, 1000);

	append_n(l, 1, what);
	audit_log_close(l);
	return audit_verify_files(f->log, f->heads, f->pub, res, NULL);
}

/* PATH.state lets a writer skip reading the log; a wrong or stale one must
 * never make it sign a wrong tree: each kind of damage, then verify. */
static void test_state_cache_damage(void **state)
{
	struct fx f;
	struct audit_verify_result res;
	char sp[PATH_MAX + 8];
	uint8_t *st;
	size_t stlen;

	state_fx(&f, sp, sizeof(sp));
	assert_int_equal(read_file(sp, 1 << 20, &st, &stlen), 0);
	for (size_t at = 0; at < stlen; at += 97) {
		st[at] ^= 0x10;
		assert_int_equal(write_bytes(sp, st, stlen), 0);
		assert_int_equal(append_one_verify(&f, "t", &res), 0);
		st[at] ^= 0x10;
		/* the state now reflects the last append: take it again */
		free(st);
		assert_int_equal(read_file(sp, 1 << 20, &st, &stlen), 0);
	}
	assert_int_equal(unlink(sp), 0);
	assert_int_equal(append_one_verify(&f, "u", &res), 0);
	assert_true(res.records > 10);
	free(st);
	fx_done(&f);
}

/* A valid PATH.state is used: the writer reads only what follows the last
 * record it names (and the newest head), so an edit to an earlier record
 * goes unread by it; verify, which never reads the cache, finds it, and a
 * writer without the cache reads the whole log and refuses it. */
static void test_state_cache_used(void **state)
{
	struct fx f;
	struct audit_opts o = {0};
	struct audit_log *l;
	struct audit_verify_result res;
	char sp[PATH_MAX + 8];
	uint8_t *b;
	size_t len;

	state_fx(&f, sp, sizeof(sp));
	assert_int_equal(read_file(f.log, 1 << 20, &b, &len), 0);
	b[AUDIT_HDR_LEN + AUDIT_REC_FIXED + 3] ^= 1; /* record 0's sandbox name */
	assert_int_equal(write_bytes(f.log, b, len), 0);
	assert_int_equal(append_one_verify(&f, "t", &res), -EBADMSG);
	assert_int_equal(res.bad_seq, 0);
	assert_int_equal(unlink(sp), 0);
	o.path = f.log;
	o.key_dir = f.keys;
	assert_int_equal(audit_log_open(&o, &l), -EBADMSG);
	free(b);
	fx_done(&f);
}


/* An auditor's saved head (audit_pin_check): held and extended, then each
 * way a log can fail to hold it. */
static void test_pin_check(void **state)
{
	struct audit_verify_result res, other_log;
	struct audit_head *heads, *changed, pin;
	uint8_t other_key[AUDIT_PUBKEY_LEN];
	merkle_hash *leaves;
	size_t bad, n;
	char why[256];
	int k = audit_heads_parse_all(Gheads, Gheads_len, &heads, &bad);

	assert_true(k >= 3);
	n = (size_t)k;
	assert_int_equal(audit_verify(Glog, Glog_len, Gheads, Gheads_len, G.pub, &res, &leaves), 0);
	pin = heads[1];
	assert_true(audit_pin_check(&pin, G.pub, &res, heads, n, leaves, why, sizeof(why)) > 0);
	memcpy(other_key, G.pub, sizeof(other_key));
	other_key[0] ^= 1;
	assert_int_equal(audit_pin_check(&pin, other_key, &res, heads, n, leaves, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(strstr(why, "not signed by the trusted key"));
	pin.size++;
	assert_int_equal(audit_pin_check(&pin, G.pub, &res, heads, n, leaves, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(strstr(why, "not signed by the trusted key"));
	pin = heads[1];
	other_log = res;
	other_log.header.created_ns++;
	assert_int_equal(audit_pin_check(&pin, G.pub, &other_log, heads, n, leaves, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(strstr(why, "another log"));
	pin = heads[n - 1];
	assert_int_equal(audit_pin_check(&pin, G.pub, &res, heads, n - 1, leaves, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(strstr(why, "truncated"));
	changed = malloc(n * sizeof(*changed));
	memcpy(changed, heads, n * sizeof(*changed));
	changed[1].time_ns++;
	pin = heads[1];
	assert_int_equal(audit_pin_check(&pin, G.pub, &res, changed, n, leaves, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(strstr(why, "is not the one pinned"));
	leaves[0][0] ^= 1;
	assert_int_equal(audit_pin_check(&pin, G.pub, &res, heads, n, leaves, why, sizeof(why)),
			 -EBADMSG);
	assert_non_null(strstr(why, "no longer extends"));
	free(changed);
	free(leaves);
	free(heads);
}

/* A writer must not extend a chain it cannot continue. */
static void test_writer_refuses_tampered(void **state)
{
	struct fx f;
	struct audit_opts o = {0};
	struct audit_log *l = NULL;
	size_t len;
	uint8_t *b = copy_log(&len);

	fx_init(&f);
	b[Goff[3] + 24] ^= 1;
	assert_int_equal(write_bytes(f.log, b, len), 0);
	assert_int_equal(write_bytes(f.heads, Gheads, Gheads_len), 0);
	o.path = f.log;
	o.key_dir = G.keys;
	assert_int_equal(audit_log_open(&o, &l), -EBADMSG);
	/* Truncated after a signed head: refused too. */
	assert_int_equal(write_bytes(f.log, Glog, Goff[10]), 0);
	assert_int_equal(audit_log_open(&o, &l), -EBADMSG);
	free(b);
	fx_done(&f);
}

/* A crash while writing the last record leaves any prefix of it.  For every
 * prefix: the next open cuts it, keeps every earlier record, appends on. */
static void test_torn_every_offset(void **state)
{
	struct fx f;
	struct audit_log *l;
	struct audit_verify_result res;
	uint8_t *full, *heads;
	size_t full_len, heads_len, before;

	fx_init(&f);
	l = fx_open(&f, 1000);
	append_n(l, 5, "t");
	audit_log_close(l); /* signs a head over 5 */
	assert_int_equal(read_file(f.heads, 1 << 20, &heads, &heads_len), 0);
	l = fx_open(&f, 1000);
	before = (size_t)audit_log_count(l);
	assert_int_equal(before, 5);
	append_n(l, 1, "torn");
	assert_int_equal(read_file(f.log, 1 << 20, &full, &full_len), 0);
	audit_log_close(l);
	{
		struct audit_record r;
		size_t off = AUDIT_HDR_LEN, last = 0;
		while (off < full_len) {
			last = off;
			off += (size_t)audit_record_parse(full + off, full_len - off, &r);
		}
		for (size_t cut = last; cut < full_len; cut++) {
			uint64_t seq;
			assert_int_equal(write_bytes(f.log, full, cut), 0);
			assert_int_equal(write_bytes(f.heads, heads, heads_len), 0);
			/* read-only verify reports the torn tail without failing */
			assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
			assert_int_equal(res.records, 5);
			assert_int_equal(res.torn_tail, cut > last);
			l = fx_open(&f, 1000);
			assert_int_equal(audit_log_count(l), 5);
			assert_int_equal(append_one(l, "after", (int)cut, &seq), 0);
			assert_int_equal(seq, 5);
			audit_log_close(l);
			assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
			assert_int_equal(res.records, 6);
			assert_false(res.torn_tail);
		}
	}
	free(full);
	free(heads);
	fx_done(&f);
}

/* Collects the "tag"/"i" pairs of a log and checks each appears once. */
static void check_all_once(const char *log_path, int tags, int per_tag)
{
	uint8_t *b, *seen = calloc((size_t)(tags * per_tag), 1);
	size_t len, off = AUDIT_HDR_LEN;
	struct audit_record r;
	int n, count = 0;

	assert_int_equal(read_file(log_path, 1 << 26, &b, &len), 0);
	while (off < len && (n = audit_record_parse(b + off, len - off, &r)) > 0) {
		int t, i;
		char det[256];
		assert_true(r.details_len < sizeof(det));
		memcpy(det, r.details, r.details_len);
		det[r.details_len] = '\0';
		assert_int_equal(sscanf(det, "{\"tag\":\"c%d\",\"i\":%d", &t, &i), 2);
		assert_true(t >= 0 && t < tags && i >= 0 && i < per_tag);
		assert_int_equal(seen[t * per_tag + i], 0);
		seen[t * per_tag + i] = 1;
		off += (size_t)n;
		count++;
	}
	assert_int_equal(off, len);
	assert_int_equal(count, tags * per_tag);
	free(seen);
	free(b);
}

struct thread_arg {
	struct audit_log *l;
	int id, n, err;
};

static void *appender(void *p)
{
	struct thread_arg *a = p;
	char tag[16];

	snprintf(tag, sizeof(tag), "c%d", a->id);
	for (int i = 0; i < a->n && !a->err; i++)
		a->err = append_one(a->l, tag, i, NULL);
	return NULL;
}

static void test_concurrent_threads(void **state)
{
	enum { T = 8, PER = 150 };
	struct fx f;
	struct audit_log *l;
	pthread_t th[T];
	struct thread_arg a[T];
	struct audit_verify_result res;

	fx_init(&f);
	l = fx_open(&f, 64);
	for (int i = 0; i < T; i++) {
		a[i] = (struct thread_arg){l, i, PER, 0};
		assert_int_equal(pthread_create(&th[i], NULL, appender, &a[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].err, 0);
	}
	audit_log_close(l);
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.records, T * PER);
	assert_int_equal(res.unsigned_records, 0);
	check_all_once(f.log, T, PER);
	fx_done(&f);
}

struct group_arg {
	struct audit_log *l;
	int id, groups, per, err;
};

static void *group_appender(void *p)
{
	struct group_arg *a = p;
	struct audit_event ev[64];
	char det[64][96];
	uint64_t first;

	for (int g = 0; g < a->groups && !a->err; g++) {
		for (int i = 0; i < a->per; i++) {
			snprintf(det[i], sizeof(det[i]), "{\"tag\":\"c%d\",\"i\":%d}", a->id,
				 g * a->per + i);
			ev[i] = (struct audit_event){"sb", "agent", "exec", det[i]};
		}
		a->err = audit_log_append_many(a->l, ev, (size_t)a->per, &first);
	}
	return NULL;
}

/* Groups from several threads: one valid log, every record once, each
 * group's records consecutive; a group with one bad event writes nothing. */
static void test_append_many(void **state)
{
	enum { T = 4, NG = 10, PER = 25 };
	struct fx f;
	struct audit_log *l;
	pthread_t th[T];
	struct group_arg a[T];
	struct audit_verify_result res;
	struct audit_event bad[2] = {{"sb", "agent", "exec", "{}"}, {"sb", "agent", "exec", "[]"}};
	uint64_t first;

	fx_init(&f);
	l = fx_open(&f, 100);
	for (int i = 0; i < T; i++) {
		a[i] = (struct group_arg){l, i, NG, PER, 0};
		assert_int_equal(pthread_create(&th[i], NULL, group_appender, &a[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].err, 0);
	}
	assert_int_equal(audit_log_append_many(l, bad, 2, &first), -EINVAL);
	assert_int_equal(audit_log_count(l), T * NG * PER);
	audit_log_close(l);
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.records, T * NG * PER);
	check_all_once(f.log, T, NG * PER);
	{
		uint8_t *b;
		size_t len, off = AUDIT_HDR_LEN;
		struct audit_record r;
		int pt = -1, pi = -1, t, i, n;
		assert_int_equal(read_file(f.log, 1 << 24, &b, &len), 0);
		while (off < len && (n = audit_record_parse(b + off, len - off, &r)) > 0) {
			assert_int_equal(sscanf(r.details, "{\"tag\":\"c%d\",\"i\":%d", &t, &i), 2);
			if (i % PER)
				assert_true(t == pt && i == pi + 1);
			pt = t;
			pi = i;
			off += (size_t)n;
		}
		free(b);
	}
	fx_done(&f);
}

static void test_concurrent_processes(void **state)
{
	enum { P = 4, TH = 2, PER = 60 };
	struct fx f;
	struct audit_verify_result res;
	pid_t pids[P];

	fx_init(&f);
	audit_log_close(fx_open(&f, 50)); /* creates the key once: not what is tested */
	for (int p = 0; p < P; p++) {
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] == 0) {
			struct audit_opts o = {.path = f.log, .key_dir = f.keys, .head_every = 50};
			struct audit_log *l;
			pthread_t th[TH];
			struct thread_arg a[TH];
			int bad = audit_log_open(&o, &l) != 0;
			for (int t = 0; !bad && t < TH; t++) {
				a[t] = (struct thread_arg){l, p * TH + t, PER, 0};
				pthread_create(&th[t], NULL, appender, &a[t]);
			}
			for (int t = 0; !bad && t < TH; t++) {
				pthread_join(th[t], NULL);
				bad |= a[t].err != 0;
			}
			if (!bad)
				audit_log_close(l);
			_exit(bad);
		}
	}
	for (int p = 0; p < P; p++) {
		int st;
		assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.records, P * TH * PER);
	check_all_once(f.log, P * TH, PER);
	fx_done(&f);
}

/* A full disk (here: the file size limit, which fails write(2) the same
 * way without needing a tiny file system) gives a clear error, writes
 * nothing, and leaves a log that verifies with every acknowledged record. */
static void test_full_disk(void **state)
{
	struct fx f;
	struct audit_verify_result res;
	struct stat st;
	int pipefd[2], status;
	uint64_t acked = 0;
	pid_t pid;

	fx_init(&f);
	audit_log_close(fx_open(&f, 10));
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct audit_opts o = {.path = f.log, .key_dir = f.keys, .head_every = 10};
		struct rlimit rl = {6000, 6000};
		struct audit_log *l;
		uint64_t n = 0, seq;
		int err = 0;
		signal(SIGXFSZ, SIG_IGN);
		if (audit_log_open(&o, &l) || setrlimit(RLIMIT_FSIZE, &rl))
			_exit(3);
		for (int i = 0; i < 1000 && !err; i++)
			if (!(err = append_one(l, "full", i, &seq)))
				n++;
		if (write(pipefd[1], &n, sizeof(n)) != sizeof(n))
			_exit(4);
		/* A clear error, and the next append fails the same way. */
		if (err != -EFBIG || append_one(l, "full", 0, &seq) != -EFBIG ||
		    !strstr(audit_strerror(err), "intact"))
			_exit(5);
		audit_log_close(l);
		_exit(0);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &acked, sizeof(acked)), sizeof(acked));
	close(pipefd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_true(acked > 10);
	assert_int_equal(stat(f.log, &st), 0);
	assert_true(st.st_size <= 6000);
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.records, acked);
	assert_false(res.torn_tail);
	fx_done(&f);
}

/* Killed (SIGKILL) in the middle of appending: every record acknowledged
 * before the kill is in the log afterwards, which verifies and takes more. */
static void test_killed_writer(void **state)
{
	struct fx f;
	struct audit_verify_result res;
	int pipefd[2];
	uint64_t last = 0, seq;
	struct audit_log *l;
	pid_t pid;

	fx_init(&f);
	audit_log_close(fx_open(&f, 7));
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct audit_opts o = {.path = f.log, .key_dir = f.keys, .head_every = 7};
		struct audit_log *cl;
		close(pipefd[0]);
		if (audit_log_open(&o, &cl))
			_exit(3);
		for (int i = 0;; i++) {
			if (append_one(cl, "kill", i, &seq) || write(pipefd[1], &seq, sizeof(seq)) < 0)
				_exit(4);
		}
	}
	close(pipefd[1]);
	for (int i = 0; i < 40; i++)
		assert_int_equal(read(pipefd[0], &last, sizeof(last)), sizeof(last));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(pipefd[0]);
	l = fx_open(&f, 7);
	assert_true(audit_log_count(l) >= last + 1);
	assert_int_equal(append_one(l, "after", 0, &seq), 0);
	audit_log_close(l);
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.records, seq + 1);
	fx_done(&f);
}

/* Big enough for several windows of the verifier's helper threads: the
 * result must be the same with helpers as without, tampering included. */
static void test_verify_with_helpers(void **state)
{
	enum { RECS = 9000 };
	struct fx f;
	struct audit_opts o = {.head_every = 700, .head_secs = 3600, .no_sync = true};
	struct audit_log *l;
	struct audit_verify_result res;
	uint8_t *b, *h;
	size_t len, hlen, off = AUDIT_HDR_LEN;
	struct audit_record r;

	fx_init(&f);
	o.path = f.log;
	o.key_dir = f.keys;
	assert_int_equal(audit_log_open(&o, &l), 0);
	assert_int_equal(audit_log_public_key(l, f.pub), 0);
	append_n(l, RECS, "w");
	audit_log_close(l);
	assert_int_equal(read_file(f.log, 1 << 26, &b, &len), 0);
	assert_int_equal(read_file(f.heads, 1 << 26, &h, &hlen), 0);
	for (int i = 0; i < 6123; i++)
		off += (size_t)audit_record_parse(b + off, len - off, &r);
	b[off + 80] ^= 0x20; /* inside record 6123's names or details */
	for (int threads = 1; threads <= 3; threads++) {
		char v[16];
		snprintf(v, sizeof(v), "%d", threads);
		setenv("KOSA8_VERIFY_THREADS", v, 1);
		assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
		assert_int_equal(res.records, RECS);
		assert_int_equal(res.unsigned_records, 0);
		expect(b, len, h, hlen, f.pub, AUDIT_EDITED, 6123);
	}
	unsetenv("KOSA8_VERIFY_THREADS");
	free(b);
	free(h);
	fx_done(&f);
}

static void test_key_mode(void **state)
{
	struct fx f;
	struct audit_log *l;
	struct audit_opts o = {0};
	char key[PATH_MAX + 32];
	struct stat st;

	fx_init(&f);
	audit_log_close(fx_open(&f, 10));
	snprintf(key, sizeof(key), "%s/%s", f.keys, AUDIT_KEY_FILE);
	assert_int_equal(stat(key, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(chmod(key, 0644), 0);
	o.path = f.log;
	o.key_dir = f.keys;
	assert_int_equal(audit_log_open(&o, &l), -EPERM);
	/* The exported public key is the one that verifies. */
	{
		uint8_t pub[AUDIT_PUBKEY_LEN];
		snprintf(key, sizeof(key), "%s/%s", f.keys, AUDIT_PUB_FILE);
		assert_int_equal(audit_pubkey_load(key, pub), 0);
		assert_memory_equal(pub, f.pub, sizeof(pub));
	}
	fx_done(&f);
}

/* First use from several processes at once: one key wins, all use it. */
static void test_key_created_once(void **state)
{
	enum { P = 6 };
	struct fx f;
	int pipefd[2];
	uint8_t pubs[P][AUDIT_PUBKEY_LEN];
	pid_t pids[P];

	fx_init(&f);
	assert_int_equal(pipe(pipefd), 0);
	for (int p = 0; p < P; p++) {
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] == 0) {
			EVP_PKEY *k = NULL;
			uint8_t pub[AUDIT_PUBKEY_LEN + 1];
			if (audit_key_load_or_create(f.keys, &k) || audit_key_public(k, pub + 1))
				_exit(1);
			pub[0] = (uint8_t)p;
			_exit(write(pipefd[1], pub, sizeof(pub)) == sizeof(pub) ? 0 : 2);
		}
	}
	close(pipefd[1]);
	for (int p = 0; p < P; p++) {
		uint8_t pub[AUDIT_PUBKEY_LEN + 1];
		int st;
		assert_int_equal(read(pipefd[0], pub, sizeof(pub)), sizeof(pub));
		memcpy(pubs[pub[0]], pub + 1, AUDIT_PUBKEY_LEN);
		assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	close(pipefd[0]);
	for (int p = 1; p < P; p++)
		assert_memory_equal(pubs[p], pubs[0], AUDIT_PUBKEY_LEN);
	fx_done(&f);
}

static void test_sign_head_on_demand(void **state)
{
	struct fx f;
	struct audit_log *l;
	struct audit_head h;
	struct audit_verify_result res;

	fx_init(&f);
	l = fx_open(&f, 1000);
	append_n(l, 3, "s");
	assert_int_equal(audit_log_sign_head(l, &h), 0);
	assert_int_equal(h.size, 3);
	assert_int_equal(audit_head_verify(f.pub, &h), 0);
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.unsigned_records, 0);
	assert_memory_equal(res.root, h.root, sizeof(h.root));
	audit_log_close(l);
	fx_done(&f);
}

/* A head every T seconds: due at the first append T seconds after the last
 * head, or at a tick of a quiet log. */
static void test_head_every_t_seconds(void **state)
{
	struct fx f;
	struct audit_opts o = {.head_every = 1000, .head_secs = 1};
	struct audit_log *l;
	struct audit_verify_result res;

	fx_init(&f);
	o.path = f.log;
	o.key_dir = f.keys;
	assert_int_equal(audit_log_open(&o, &l), 0);
	assert_int_equal(audit_log_public_key(l, f.pub), 0);
	append_n(l, 2, "t"); /* a new log has its head of size 0: T has not passed */
	assert_int_equal(audit_log_tick(l), 0);
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.heads, 1);
	assert_int_equal(res.unsigned_records, 2);
	usleep(1100 * 1000);
	assert_int_equal(audit_log_tick(l), 0);
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.heads, 2);
	assert_int_equal(res.unsigned_records, 0);
	usleep(1100 * 1000);
	append_n(l, 1, "t2"); /* T passed: this append brings a head with it */
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.heads, 3);
	assert_int_equal(res.unsigned_records, 0);
	audit_log_close(l);
	fx_done(&f);
}

/* ---- a format-1 log on disk (upgrade) ---- */

/* tests/audit/v1/: two records and two heads written by kosa8 42588ff (format
 * 1), see tests/audit/v1/README. */
#define V1_LOG "tests/audit/v1/v1.log"
#define V1_HEADS "tests/audit/v1/v1.log.heads"
#define V1_ID "2440df7045288c13ee63d5d30e0364f1"

static void put_file(const char *path, const uint8_t *b, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, b, len), (ssize_t)len);
	close(fd);
}

static void fx_put_v1(struct fx *f, uint8_t **log, size_t *len, uint8_t **heads, size_t *hlen)
{
	assert_int_equal(read_file(V1_LOG, 1 << 20, log, len), 0);
	assert_int_equal(read_file(V1_HEADS, 1 << 20, heads, hlen), 0);
	put_file(f->log, *log, *len);
	put_file(f->heads, *heads, *hlen);
}

static void assert_file_is(const char *path, const uint8_t *b, size_t len)
{
	uint8_t *got;
	size_t n;

	assert_int_equal(read_file(path, 1 << 20, &got, &n), 0);
	assert_int_equal(n, len);
	assert_memory_equal(got, b, len);
	free(got);
}

static bool has(const struct audit_record *r, const char *s)
{
	return memmem(r->details, r->details_len, s, strlen(s)) != NULL;
}

/* A writer meets a format-1 log: the old files are kept under names of
 * their own, byte for byte, and the new log starts by naming them. */
static void test_v1_log_archived(void **state)
{
	char alog[PATH_MAX + 64], aheads[PATH_MAX + 80], want[PATH_MAX + 128];
	struct audit_verify_result res;
	struct audit_record r;
	uint8_t *log, *heads, *nlog;
	size_t len, hlen, nlen;
	struct audit_log *l;
	struct fx f;
	int n;

	fx_init(&f);
	fx_put_v1(&f, &log, &len, &heads, &hlen);
	snprintf(want, sizeof(want), "%s.state", f.log);
	put_file(want, (const uint8_t *)"K8AS cache", 10);
	l = fx_open(&f, 5);
	assert_int_equal(audit_log_count(l), 1);
	append_n(l, 3, "after");
	audit_log_close(l);

	snprintf(alog, sizeof(alog), "%s.v1-" V1_ID, f.log);
	snprintf(aheads, sizeof(aheads), "%s.heads", alog);
	assert_file_is(alog, log, len);
	assert_file_is(aheads, heads, hlen);
	snprintf(want, sizeof(want), "%s.state", alog);
	assert_file_is(want, (const uint8_t *)"K8AS cache", 10);

	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &res, NULL), 0);
	assert_int_equal(res.records, 4);
	assert_int_equal(res.unsigned_records, 0);
	assert_int_equal(read_file(f.log, 1 << 20, &nlog, &nlen), 0);
	assert_int_not_equal(memcmp(nlog + 8, log + 8, AUDIT_LOG_ID_LEN), 0);
	n = audit_record_parse(nlog + AUDIT_HDR_LEN, nlen - AUDIT_HDR_LEN, &r);
	assert_true(n > 0);
	assert_int_equal(r.seq, 0);
	assert_int_equal(r.type_len, strlen("audit.archived"));
	assert_memory_equal(r.type, "audit.archived", r.type_len);
	snprintf(want, sizeof(want), "\"log\":\"%s\"", alog);
	assert_true(has(&r, want));
	snprintf(want, sizeof(want), "\"heads\":\"%s\"", aheads);
	assert_true(has(&r, want));
	assert_true(has(&r, "\"log_id\":\"" V1_ID "\""));
	assert_true(has(&r, "\"records\":2,"));
	assert_true(has(&r, "\"newest_head\":{\"size\":2,\"root\":"
			    "\"171ee063d3a13f138803cd4471c5e23e0bccc49f72db8ae8376b9efb984b0df1\"}"));
	free(nlog);
	free(log);
	free(heads);
	fx_done(&f);
}

/* Only a whole format-1 header is upgraded: garbage, a cut header and a
 * newer version are refused as before, and nothing is moved or written;
 * the same bytes with a whole format-1 header are taken. */
static void test_v1_only_whole_header(void **state)
{
	static const struct {
		const char *bytes;
		size_t len;
		int err;
	} cases[] = {
		{"garbage garbage garbage garbage garbage", 39, -EBADMSG},
		{"K8AL\0\0\0\1 cut short", 19, -EBADMSG},
		{"K8AL\0\0\0\3 0123456789abcdef01234567", 32, -EPROTONOSUPPORT},
	};
	struct audit_opts o = {.head_secs = 3600};
	char alog[PATH_MAX + 16];
	struct audit_log *l = NULL;
	struct fx f;
	glob_t g;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		fx_init(&f);
		o.path = f.log;
		o.key_dir = f.keys;
		put_file(f.log, (const uint8_t *)cases[i].bytes, cases[i].len);
		put_file(f.heads, (const uint8_t *)"old heads\n", 10);
		assert_int_equal(audit_log_open(&o, &l), cases[i].err);
		assert_file_is(f.log, (const uint8_t *)cases[i].bytes, cases[i].len);
		assert_file_is(f.heads, (const uint8_t *)"old heads\n", 10);
		snprintf(alog, sizeof(alog), "%s.v1-*", f.log);
		assert_int_equal(glob(alog, 0, NULL, &g), GLOB_NOMATCH);
		fx_done(&f);
	}
	fx_init(&f);
	o.path = f.log;
	o.key_dir = f.keys;
	put_file(f.log, (const uint8_t *)"K8AL\0\0\0\1 0123456789abcdef01234567", 32);
	assert_int_equal(audit_log_open(&o, &l), 0);
	assert_int_equal(audit_log_count(l), 1);
	audit_log_close(l);
	snprintf(alog, sizeof(alog), "%s.v1-*[0-9a-f]", f.log);
	assert_int_equal(glob(alog, 0, NULL, &g), 0);
	assert_int_equal(g.gl_pathc, 1);
	assert_file_is(g.gl_pathv[0], (const uint8_t *)"K8AL\0\0\0\1 0123456789abcdef01234567", 32);
	globfree(&g);
	fx_done(&f);
}

/* The archive's name already taken: nothing is overwritten or moved. */
static void test_v1_archive_name_taken(void **state)
{
	struct audit_opts o = {.head_secs = 3600};
	char alog[PATH_MAX + 64], aheads[PATH_MAX + 80];
	struct audit_log *l = NULL;
	uint8_t *log, *heads;
	size_t len, hlen;
	struct fx f;

	for (int which = 0; which < 2; which++) {
		fx_init(&f);
		o.path = f.log;
		o.key_dir = f.keys;
		fx_put_v1(&f, &log, &len, &heads, &hlen);
		snprintf(alog, sizeof(alog), "%s.v1-" V1_ID, f.log);
		snprintf(aheads, sizeof(aheads), "%s.heads", alog);
		put_file(which ? aheads : alog, (const uint8_t *)"keep me\n", 8);
		assert_int_equal(audit_log_open(&o, &l), -EEXIST);
		assert_file_is(which ? aheads : alog, (const uint8_t *)"keep me\n", 8);
		assert_int_equal(access(which ? alog : aheads, F_OK), -1);
		assert_file_is(f.log, log, len);
		assert_file_is(f.heads, heads, hlen);
		free(log);
		free(heads);
		fx_done(&f);
	}
}

/* A log path that is not UTF-8: the record could not name the archive, so
 * nothing is moved (checked before the first rename). */
static void test_v1_path_not_text(void **state)
{
	struct audit_opts o = {.head_secs = 3600};
	char sub[PATH_MAX], log[PATH_MAX + 64];
	struct audit_log *l = NULL;
	uint8_t *v1, *heads;
	size_t len, hlen;
	struct fx f;

	fx_init(&f);
	snprintf(sub, sizeof(sub), "%s/\xff", f.dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(log, sizeof(log), "%s/a.log", sub);
	assert_int_equal(read_file(V1_LOG, 1 << 20, &v1, &len), 0);
	assert_int_equal(read_file(V1_HEADS, 1 << 20, &heads, &hlen), 0);
	put_file(log, v1, len);
	o.path = log;
	o.key_dir = f.keys;
	assert_int_equal(audit_log_open(&o, &l), -EINVAL);
	assert_file_is(log, v1, len);
	snprintf(log, sizeof(log), "%s/a.log.v1-" V1_ID, sub);
	assert_int_equal(access(log, F_OK), -1);
	free(v1);
	free(heads);
	fx_done(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clean_log_verifies),
		cmocka_unit_test(test_edit_details),
		cmocka_unit_test(test_edit_prev_field),
		cmocka_unit_test(test_edit_seq_field),
		cmocka_unit_test(test_edit_breaks_framing),
		cmocka_unit_test(test_huge_length_is_not_torn),
		cmocka_unit_test(test_edit_first_record),
		cmocka_unit_test(test_swap),
		cmocka_unit_test(test_remove),
		cmocka_unit_test(test_duplicate),
		cmocka_unit_test(test_truncate_after_head),
		cmocka_unit_test(test_bad_signature),
		cmocka_unit_test(test_other_key),
		cmocka_unit_test(test_chain_rewritten),
		cmocka_unit_test(test_last_record_edited),
		cmocka_unit_test(test_heads_reordered),
		cmocka_unit_test(test_heads_missing_or_emptied),
		cmocka_unit_test(test_head_removed_from_middle),
		cmocka_unit_test(test_head_fields_signed),
		cmocka_unit_test(test_head_names_another_key),
		cmocka_unit_test(test_time_goes_backwards),
		cmocka_unit_test(test_wiped_or_cut_header),
		cmocka_unit_test(test_forged_head_size),
		cmocka_unit_test(test_cut_record_under_head),
		cmocka_unit_test(test_first_records_removed),
		cmocka_unit_test(test_last_prev_flipped),
		cmocka_unit_test(test_writer_keeps_cut_log),
		cmocka_unit_test(test_writer_rejects_raw_bytes),
		cmocka_unit_test(test_state_cache_damage),
		cmocka_unit_test(test_state_cache_used),
		cmocka_unit_test(test_pin_check),
		cmocka_unit_test(test_v1_log_archived),
		cmocka_unit_test(test_v1_only_whole_header),
		cmocka_unit_test(test_v1_archive_name_taken),
		cmocka_unit_test(test_v1_path_not_text),
		cmocka_unit_test(test_writer_refuses_tampered),
		cmocka_unit_test(test_torn_every_offset),
		cmocka_unit_test(test_concurrent_threads),
		cmocka_unit_test(test_append_many),
		cmocka_unit_test(test_concurrent_processes),
		cmocka_unit_test(test_full_disk),
		cmocka_unit_test(test_killed_writer),
		cmocka_unit_test(test_verify_with_helpers),
		cmocka_unit_test(test_key_mode),
		cmocka_unit_test(test_key_created_once),
		cmocka_unit_test(test_sign_head_on_demand),
		cmocka_unit_test(test_head_every_t_seconds),
	};
	log_set_level(LOG_ERR); /* the torn-write test cuts ~100 tails on purpose */
	return cmocka_run_group_tests_name("audit_log", tests, group_setup, group_teardown);
}
