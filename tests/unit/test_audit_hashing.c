/* The verifier's fast paths: kosa8's own SHA-256 rounds (src/audit/sha256.c)
 * against FIPS 180-2 known answers and OpenSSL's EVP digest, and the
 * windowed, streamed verifier (prehash.c, verify.c) at the places where it
 * differs from a plain walk: window and buffer boundaries, heads that end
 * exactly there, records near the size limit, helper threads, a torn tail
 * left out by a snapshot, tampering found at the same record as in memory. */
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "audit/audit.h"
#include "audit/bundle.h"
#include "audit/prehash.h"
#include "audit/sha256.h"
#include "audit/verify.h"
#include "common/util.h"

/* ---- SHA-256 ---- */

static void unhex32(const char *s, uint8_t out[32])
{
	assert_int_equal(audit_unhex(s, 64, out, 32), 0);
}

static void evp_prefixed(uint8_t prefix, const uint8_t *d, size_t len, uint8_t out[32])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned n = 0;

	assert_non_null(c);
	assert_int_equal(EVP_DigestInit_ex(c, EVP_sha256(), NULL), 1);
	assert_int_equal(EVP_DigestUpdate(c, &prefix, 1), 1);
	assert_int_equal(EVP_DigestUpdate(c, d, len), 1);
	assert_int_equal(EVP_DigestFinal_ex(c, out, &n), 1);
	assert_int_equal(n, 32);
	EVP_MD_CTX_free(c);
}

/* Each implementation this machine can run: the CPU's rounds (if it has
 * the SHA extensions) and OpenSSL.  Returns how many were tried. */
static int for_each_impl(void (*fn)(void))
{
	int n = 0;

	if (audit_sha256_use_cpu(true)) {
		assert_string_equal(audit_sha256_impl(), "sha-ni");
		fn();
		n++;
	}
	assert_true(audit_sha256_use_cpu(false));
	assert_string_equal(audit_sha256_impl(), "openssl");
	fn();
	n++;
	audit_sha256_use_cpu(true); /* back to the default where possible */
	return n;
}

static void known_answers(void)
{
	uint8_t want[32], got[32], got2[32];

	/* FIPS 180-2 appendix B.1: SHA-256("abc"), here as 'a' || "bc" */
	unhex32("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", want);
	audit_sha256_pre('a', (const uint8_t *)"bc", 2, got);
	assert_memory_equal(got, want, 32);
	/* RFC 6962 / 9162: the hash of the empty leaf, SHA-256(0x00) */
	unhex32("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d", want);
	audit_sha256_pre(0x00, NULL, 0, got);
	assert_memory_equal(got, want, 32);
	/* FIPS 180-2 B.2, 56 bytes: the padding needs a second block */
	unhex32("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", want);
	audit_sha256_pre2('a', (const uint8_t *)"bcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 55,
			  (const uint8_t *)"bc", 2, got, got2);
	assert_memory_equal(got, want, 32);
	unhex32("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", want);
	assert_memory_equal(got2, want, 32);
}

static void test_sha256_known_answers(void **state)
{
	assert_true(for_each_impl(known_answers) >= 1);
}

static uint8_t Data[4096 + 64];

/* Four at a time: equal lengths (as leaves and nodes mostly are) and four
 * unequal ones, so that each of the four runs on alone past the others. */
static void four_against_evp(uint8_t prefix, size_t len, size_t len2)
{
	const size_t lens[2][4] = {{len, len, len, len},
				   {len, len2, (len * 3 + 1) % 1153, (len2 + 130) % 1153}};
	uint8_t want[4][32], got[4][32];
	uint8_t *const out[4] = {got[0], got[1], got[2], got[3]};
	const uint8_t *in[4];

	for (int v = 0; v < 2; v++) {
		for (int i = 0; i < 4; i++) {
			in[i] = Data + (size_t)(17 * i + v) % 64 + 64 * (size_t)i;
			evp_prefixed(prefix, in[i], lens[v][i], want[i]);
		}
		memset(got, 0, sizeof(got));
		audit_sha256_pre4(prefix, in, lens[v], out);
		for (int i = 0; i < 4; i++)
			assert_memory_equal(got[i], want[i], 32);
	}
}

/* Every length across the first 18 block boundaries, two prefixes, odd
 * alignments, and pairs of unequal lengths (one message runs on alone). */
static void against_evp(void)
{
	uint8_t want[32], want2[32], got[32], got2[32];

	for (size_t len = 0; len <= 1100; len++) {
		size_t len2 = (len * 7 + 13) % 1153, a = len % 7, b = 64 + len % 5;
		uint8_t prefix = len & 1 ? 0x01 : 0x00;

		evp_prefixed(prefix, Data + a, len, want);
		evp_prefixed(prefix, Data + b, len2, want2);
		audit_sha256_pre(prefix, Data + a, len, got);
		assert_memory_equal(got, want, 32);
		audit_sha256_pre2(prefix, Data + a, len, Data + b, len2, got, got2);
		assert_memory_equal(got, want, 32);
		assert_memory_equal(got2, want2, 32);
		four_against_evp(prefix, len, len2);
	}
}

static void test_sha256_matches_openssl(void **state)
{
	srandom(7);
	for (size_t i = 0; i < sizeof(Data); i++)
		Data[i] = (uint8_t)random();
	assert_true(for_each_impl(against_evp) >= 1);
}

/* ---- the windowed, streamed verifier ---- */

struct fx {
	char dir[256], log[PATH_MAX], heads[PATH_MAX], keys[PATH_MAX];
	uint8_t pub[AUDIT_PUBKEY_LEN];
	struct audit_log *l;
};

static void fx_open(struct fx *f)
{
	struct audit_opts o = {.head_every = 1u << 30, .head_secs = 3600, .no_sync = true};

	snprintf(f->dir, sizeof(f->dir), "/tmp/kosa8-audit-hash-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->log, sizeof(f->log), "%s/audit.log", f->dir);
	snprintf(f->heads, sizeof(f->heads), "%s/audit.log.heads", f->dir);
	snprintf(f->keys, sizeof(f->keys), "%s/keys", f->dir);
	o.path = f->log;
	o.key_dir = f->keys;
	assert_int_equal(audit_log_open(&o, &f->l), 0);
	assert_int_equal(audit_log_public_key(f->l, f->pub), 0);
}

static void fx_done(struct fx *f)
{
	char cmd[PATH_MAX + 16];

	if (f->l)
		audit_log_close(f->l);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
}

/* Appends until the log holds `upto` records; details of `pad` bytes. */
static void append_to(struct fx *f, uint64_t upto, size_t pad)
{
	char *det = malloc(pad + 64);
	struct audit_event ev = {"sb-hash", "agent", "exec", det};

	assert_non_null(det);
	while (audit_log_count(f->l) < upto) {
		int n = snprintf(det, pad + 64, "{\"i\":%llu,\"pad\":\"",
				 (unsigned long long)audit_log_count(f->l));
		memset(det + n, 'x', pad);
		strcpy(det + n + pad, "\"}");
		assert_int_equal(audit_log_append(f->l, &ev, NULL), 0);
	}
	free(det);
}

static void sign_at(struct fx *f, uint64_t size)
{
	append_to(f, size, 40);
	assert_int_equal(audit_log_sign_head(f->l, NULL), 0);
}

static void set_threads(int n)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", n);
	assert_int_equal(setenv("KOSA8_VERIFY_THREADS", v, 1), 0);
}

/* The file verifier (streamed), the in-memory one and a snapshot agree
 * with each other and with a plain Merkle root of the leaves they return. */
static void verify_all_ways(struct fx *f, uint64_t records)
{
	struct audit_head *hv;
	size_t bad;
	int heads;
	struct audit_verify_result a, b, c;
	struct audit_snapshot s;
	merkle_hash *la = NULL, *lb = NULL, root;
	uint8_t *log, *hd;
	size_t len, hlen;

	assert_int_equal(read_file(f->log, 1u << 30, &log, &len), 0);
	assert_int_equal(read_file(f->heads, 1u << 30, &hd, &hlen), 0);
	heads = audit_heads_parse_all(hd, hlen, &hv, &bad);
	assert_true(heads > 0);
	free(hv);
	for (int t = 1; t <= 3; t++) {
		set_threads(t);
		assert_int_equal(audit_verify_files(f->log, f->heads, f->pub, &a, &la), 0);
		assert_int_equal(audit_verify(log, len, hd, hlen, f->pub, &b, &lb), 0);
		assert_int_equal(audit_snapshot_read(f->log, 1u << 30, &s), 0);
		assert_int_equal(audit_snapshot_verify(&s, f->pub, &c, NULL), 0);
		audit_snapshot_free(&s);
		assert_int_equal(a.records, records);
		assert_int_equal(b.records, records);
		assert_int_equal(c.records, records);
		assert_int_equal(a.heads, (uint64_t)heads);
		assert_int_equal(b.heads, (uint64_t)heads);
		assert_int_equal(a.bytes, len);
		assert_memory_equal(la, lb, records * sizeof(merkle_hash));
		merkle_root(la, records, root);
		assert_memory_equal(a.root, root, 32);
		assert_memory_equal(b.root, root, 32);
		assert_memory_equal(c.root, root, 32);
		free(la);
		free(lb);
		la = lb = NULL;
	}
	unsetenv("KOSA8_VERIFY_THREADS");
	free(log);
	free(hd);
}

/* Heads at 0, at either side of every window boundary and at odd places:
 * each root folds a different mix of frontier and window nodes. */
static void test_heads_at_window_edges(void **state)
{
	static const uint64_t at[] = {1, 2, 3, 64, 65, 4095, 4096, 4097, 5000, 8191, 8192, 12288, 12289};
	struct fx f = {0};

	fx_open(&f);
	assert_int_equal(audit_log_sign_head(f.l, NULL), 0); /* the empty tree's head */
	for (size_t i = 0; i < ARRAY_SIZE(at); i++)
		sign_at(&f, at[i]);
	append_to(&f, 12300, 40);
	verify_all_ways(&f, 12300);
	fx_done(&f);
}

/* Records from tiny to the largest allowed, so that the 4 MiB read buffer
 * ends inside records and windows end early at unaligned positions. */
static void test_big_records_stream(void **state)
{
	struct fx f = {0};
	uint64_t n = 0;

	fx_open(&f);
	for (int round = 0; round < 6; round++) {
		append_to(&f, n += 700 + 300 * (uint64_t)round, 40);
		append_to(&f, n += 1, AUDIT_REC_MAX - 200);
		append_to(&f, n += 3, 900000);
		sign_at(&f, n += 17);
	}
	append_to(&f, n += 5000, 10);
	verify_all_ways(&f, n);
	fx_done(&f);
}

/* A record changed at a window's last and first positions: the streamed
 * verifier names the same record as the in-memory one. */
static void test_tamper_at_window_edges(void **state)
{
	static const uint64_t victims[] = {4095, 4096, 8192};
	struct fx f = {0};
	struct audit_verify_result r;
	struct audit_record rec;
	uint8_t *log, *heads;
	size_t len, hlen;
	FILE *out;

	fx_open(&f);
	sign_at(&f, 5000);
	sign_at(&f, 9000);
	audit_log_close(f.l);
	f.l = NULL;
	for (size_t v = 0; v < ARRAY_SIZE(victims); v++) {
		size_t off = AUDIT_HDR_LEN;
		assert_int_equal(read_file(f.log, 1u << 30, &log, &len), 0);
		assert_int_equal(read_file(f.heads, 1u << 30, &heads, &hlen), 0);
		for (uint64_t i = 0; i < victims[v]; i++)
			off += (size_t)audit_record_parse(log + off, len - off, &rec);
		log[off + 70] ^= 0x01; /* in the names: the chain breaks after it */
		out = fopen(f.log, "w");
		assert_non_null(out);
		assert_int_equal(fwrite(log, 1, len, out), len);
		assert_int_equal(fclose(out), 0);
		for (int t = 1; t <= 2; t++) {
			set_threads(t);
			assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &r, NULL), -EBADMSG);
			assert_int_equal(r.problem, AUDIT_EDITED);
			assert_int_equal(r.bad_seq, victims[v]);
			assert_int_equal(audit_verify(log, len, heads, hlen, f.pub, &r, NULL), -EBADMSG);
			assert_int_equal(r.bad_seq, victims[v]);
		}
		log[off + 70] ^= 0x01;
		out = fopen(f.log, "w");
		assert_non_null(out);
		assert_int_equal(fwrite(log, 1, len, out), len);
		assert_int_equal(fclose(out), 0);
		free(log);
		free(heads);
	}
	unsetenv("KOSA8_VERIFY_THREADS");
	fx_done(&f);
}

/* A torn last record: the snapshot leaves it out (and says how much), the
 * file verifier reports it as a note, not a failure. */
static void test_torn_tail_streamed(void **state)
{
	struct fx f = {0};
	struct audit_verify_result r;
	struct audit_snapshot s;
	uint8_t *log;
	size_t len, before;
	FILE *out;

	fx_open(&f);
	sign_at(&f, 6000);
	audit_log_close(f.l);
	f.l = NULL;
	assert_int_equal(read_file(f.log, 1u << 30, &log, &len), 0);
	before = len;
	out = fopen(f.log, "a");
	assert_non_null(out);
	assert_int_equal(fwrite(log + AUDIT_HDR_LEN, 1, 100, out), 100); /* a record's first 100 bytes */
	assert_int_equal(fclose(out), 0);
	assert_int_equal(audit_snapshot_read(f.log, 1u << 30, &s), 0);
	assert_int_equal(s.log_len, before);
	assert_int_equal(s.torn_bytes, 100);
	assert_int_equal(audit_snapshot_verify(&s, f.pub, &r, NULL), 0);
	assert_int_equal(r.records, 6000);
	audit_snapshot_free(&s);
	assert_int_equal(audit_verify_files(f.log, f.heads, f.pub, &r, NULL), 0);
	assert_true(r.torn_tail);
	assert_int_equal(r.torn_offset, before);
	assert_int_equal(r.records, 6000);
	free(log);
	fx_done(&f);
}

/* prehash_extend over an unaligned window equals adding leaf by leaf. */
static void test_unaligned_window_extend(void **state)
{
	struct fx f = {0};
	struct prehash *ph;
	struct prehash_window w;
	struct merkle_frontier a, b;
	merkle_hash ra, rb;
	uint8_t *log;
	size_t len, off = AUDIT_HDR_LEN;
	struct audit_record r;

	fx_open(&f);
	append_to(&f, 3000, 40);
	audit_log_close(f.l);
	f.l = NULL;
	assert_int_equal(read_file(f.log, 1u << 30, &log, &len), 0);
	for (int i = 0; i < 77; i++)
		off += (size_t)audit_record_parse(log + off, len - off, &r);
	assert_int_equal(prehash_start(&ph, 2, NULL, 0, f.pub), 0);
	/* as if records 0..76 were a window before, and the next starts at 77 */
	merkle_frontier_init(&a);
	{
		size_t o = AUDIT_HDR_LEN;
		for (int i = 0; i < 77; i++) {
			merkle_hash h;
			int n = audit_record_parse(log + o, len - o, &r);
			merkle_leaf_hash(log + o, (size_t)n, h);
			merkle_frontier_add(&a, h);
			o += (size_t)n;
		}
	}
	prehash_fill(ph, log + off, len - off, off, 77, &w);
	assert_int_equal(w.n, 3000 - 77);
	for (size_t t = 0; t <= w.n; t += t < 200 ? 1 : 97) {
		b = a;
		prehash_extend(&w, t, &b);
		merkle_frontier_root(&b, rb);
		{
			struct merkle_frontier c = a;
			for (size_t i = 0; i < t; i++)
				merkle_frontier_add(&c, w.leaf[i]);
			merkle_frontier_root(&c, ra);
		}
		assert_memory_equal(ra, rb, 32);
	}
	prehash_stop(ph);
	free(log);
	fx_done(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256_known_answers),
		cmocka_unit_test(test_sha256_matches_openssl),
		cmocka_unit_test(test_heads_at_window_edges),
		cmocka_unit_test(test_big_records_stream),
		cmocka_unit_test(test_tamper_at_window_edges),
		cmocka_unit_test(test_torn_tail_streamed),
		cmocka_unit_test(test_unaligned_window_extend),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
