/* Prefixed SHA-256 (sha256.h): FIPS 180-4 rounds on the x86 SHA extensions
 * (common/sha256_x86.h) where the CPU has them, OpenSSL elsewhere.
 *
 * The low-level SHA256_* calls are deprecated in OpenSSL 3 in favour of EVP,
 * but EVP's per-call dispatch costs more than hashing a 65-byte node. */
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include "audit/sha256.h"

#include <openssl/sha.h>
#include <string.h>

#include "common/sha256.h"

#if defined(__x86_64__)
/* For the SHA extensions' rounds (below), which read the message in blocks:
 * the padded message prefix || data || 0x80 || zeros || bit length, in
 * 64-byte blocks.  Whole blocks of data are read in place; the first block
 * (it holds the prefix) and the last one or two (padding) are assembled in
 * a small buffer. */
struct msg {
	const uint8_t *data;
	size_t len;     /* of data */
	size_t total;   /* prefix + data */
	size_t nblocks; /* after padding */
	uint8_t prefix;
};

static void msg_init(struct msg *m, uint8_t prefix, const uint8_t *data, size_t len)
{
	m->data = data;
	m->len = len;
	m->total = len + 1;
	/* at least one 0x80 byte and the 8-byte length after the message */
	m->nblocks = (m->total + 8) / 64 + 1;
	m->prefix = prefix;
}

static inline __attribute__((always_inline)) const uint8_t *msg_block(const struct msg *m, size_t j,
								    uint8_t buf[64])
{
	size_t start = 64 * j, from, to;
	uint64_t bits = (uint64_t)m->total * 8;

	if (j && start + 64 <= m->total)
		return m->data + start - 1; /* the prefix shifts data by one byte */
	if (j == 0 && m->total >= 64) { /* the usual first block: no padding */
		buf[0] = m->prefix;
		memcpy(buf + 1, m->data, 63);
		return buf;
	}
	memset(buf, 0, 64);
	from = start;
	if (j == 0) {
		buf[0] = m->prefix;
		from = 1;
	}
	to = start + 64 < m->total ? start + 64 : m->total;
	if (from < to)
		memcpy(buf + (from - start), m->data + from - 1, to - from);
	if (m->total >= start && m->total < start + 64)
		buf[m->total - start] = 0x80;
	if (j == m->nblocks - 1)
		for (int i = 0; i < 8; i++)
			buf[63 - i] = (uint8_t)(bits >> (8 * i));
	return buf;
}
#endif

static void pre_openssl(uint8_t prefix, const uint8_t *data, size_t len, uint8_t *out)
{
	SHA256_CTX c;

	SHA256_Init(&c);
	SHA256_Update(&c, &prefix, 1);
	if (len)
		SHA256_Update(&c, data, len);
	SHA256_Final(out, &c);
}

#if defined(__x86_64__)
#include "common/sha256_x86.h"

/* One block each into two states, their instructions interleaved. */
NI static void ni_block2(struct ni_state *restrict s, struct ni_state *restrict t, const uint8_t *p,
		       const uint8_t *q)
{
	struct ni_state sin = *s, tin = *t;
	__m128i w[4], v[4], k;

#pragma GCC unroll 16
	for (int g = 0; g < 16; g++) {
		if (g < 4) {
			w[g] = bswap32x4(_mm_loadu_si128((const __m128i *)(p + 16 * g)));
			v[g] = bswap32x4(_mm_loadu_si128((const __m128i *)(q + 16 * g)));
		} else {
			NI_SCHEDULE(w, g);
			NI_SCHEDULE(v, g);
		}
		k = _mm_load_si128((const __m128i *)&sha256_k[4 * g]);
		NI_ROUNDS4(*s, _mm_add_epi32(w[g & 3], k));
		NI_ROUNDS4(*t, _mm_add_epi32(v[g & 3], k));
	}
	s->abef = _mm_add_epi32(s->abef, sin.abef);
	s->cdgh = _mm_add_epi32(s->cdgh, sin.cdgh);
	t->abef = _mm_add_epi32(t->abef, tin.abef);
	t->cdgh = _mm_add_epi32(t->cdgh, tin.cdgh);
}

/* One block each into four states.  Two messages do not fill the round
 * instruction's pipeline: measured on the development VM's EPYC, 25 ns per
 * block two at a time, 22 ns four at a time (40 ns one at a time). */
NI static void ni_block4(struct ni_state st[restrict 4], const uint8_t *const p[4])
{
	struct ni_state in[4] = {st[0], st[1], st[2], st[3]};
	__m128i w[4][4], k;

#pragma GCC unroll 16
	for (int g = 0; g < 16; g++) {
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++) {
			if (g < 4)
				w[i][g] = bswap32x4(_mm_loadu_si128((const __m128i *)(p[i] + 16 * g)));
			else
				NI_SCHEDULE(w[i], g);
		}
		k = _mm_load_si128((const __m128i *)&sha256_k[4 * g]);
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++)
			NI_ROUNDS4(st[i], _mm_add_epi32(w[i][g & 3], k));
	}
	for (int i = 0; i < 4; i++) {
		st[i].abef = _mm_add_epi32(st[i].abef, in[i].abef);
		st[i].cdgh = _mm_add_epi32(st[i].cdgh, in[i].cdgh);
	}
}

NI static void pre_ni(uint8_t prefix, const uint8_t *data, size_t len, uint8_t *out)
{
	uint8_t buf[64];
	struct ni_state s;
	struct msg m;

	msg_init(&m, prefix, data, len);
	ni_init(&s);
	for (size_t j = 0; j < m.nblocks; j++)
		ni_block(&s, msg_block(&m, j, buf));
	ni_final(&s, out);
}

NI static void pre2_ni(uint8_t prefix, const uint8_t *d0, size_t l0, const uint8_t *d1, size_t l1,
		       uint8_t *out0, uint8_t *out1)
{
	uint8_t b0[64], b1[64];
	struct ni_state s, t;
	struct msg m, n;
	size_t j = 0;

	msg_init(&m, prefix, d0, l0);
	msg_init(&n, prefix, d1, l1);
	ni_init(&s);
	ni_init(&t);
	for (; j < m.nblocks && j < n.nblocks; j++)
		ni_block2(&s, &t, msg_block(&m, j, b0), msg_block(&n, j, b1));
	for (size_t i = j; i < m.nblocks; i++)
		ni_block(&s, msg_block(&m, i, b0));
	for (size_t i = j; i < n.nblocks; i++)
		ni_block(&t, msg_block(&n, i, b1));
	ni_final(&s, out0);
	ni_final(&t, out1);
}

NI static void pre4_ni(uint8_t prefix, const uint8_t *const d[4], const size_t l[4],
		       uint8_t *const out[4])
{
	uint8_t b[4][64];
	const uint8_t *p[4];
	struct ni_state st[4];
	struct msg m[4];
	size_t common, j;

	for (int i = 0; i < 4; i++) {
		msg_init(&m[i], prefix, d[i], l[i]);
		ni_init(&st[i]);
	}
	common = m[0].nblocks;
	for (int i = 1; i < 4; i++)
		common = m[i].nblocks < common ? m[i].nblocks : common;
	for (j = 0; j < common; j++) {
		for (int i = 0; i < 4; i++)
			p[i] = msg_block(&m[i], j, b[i]);
		ni_block4(st, p);
	}
	for (int i = 0; i < 4; i++) {
		for (size_t k = j; k < m[i].nblocks; k++)
			ni_block(&st[i], msg_block(&m[i], k, b[i]));
		ni_final(&st[i], out[i]);
	}
}

#else
static void pre_ni(uint8_t prefix, const uint8_t *data, size_t len, uint8_t *out)
{
	pre_openssl(prefix, data, len, out);
}

static void pre2_ni(uint8_t prefix, const uint8_t *d0, size_t l0, const uint8_t *d1, size_t l1,
		    uint8_t *out0, uint8_t *out1)
{
	pre_openssl(prefix, d0, l0, out0);
	pre_openssl(prefix, d1, l1, out1);
}

static void pre4_ni(uint8_t prefix, const uint8_t *const d[4], const size_t l[4],
		    uint8_t *const out[4])
{
	for (int i = 0; i < 4; i++)
		pre_openssl(prefix, d[i], l[i], out[i]);
}
#endif

enum { IMPL_UNKNOWN, IMPL_CPU, IMPL_OPENSSL };
static int impl; /* atomic: set once from cpuid, or by a test */

static int current(void)
{
	int i = __atomic_load_n(&impl, __ATOMIC_RELAXED);

	if (i == IMPL_UNKNOWN) {
		i = sha256_cpu_has_ni() ? IMPL_CPU : IMPL_OPENSSL;
		__atomic_store_n(&impl, i, __ATOMIC_RELAXED);
	}
	return i;
}

bool audit_sha256_use_cpu(bool on)
{
	if (on && !sha256_cpu_has_ni())
		return false;
	__atomic_store_n(&impl, on ? IMPL_CPU : IMPL_OPENSSL, __ATOMIC_RELAXED);
	return true;
}

const char *audit_sha256_impl(void)
{
	return current() == IMPL_CPU ? "sha-ni" : "openssl";
}

void audit_sha256_pre(uint8_t prefix, const uint8_t *data, size_t len, uint8_t out[AUDIT_SHA256_LEN])
{
	if (current() == IMPL_CPU)
		pre_ni(prefix, data, len, out);
	else
		pre_openssl(prefix, data, len, out);
}

void audit_sha256_pre2(uint8_t prefix, const uint8_t *d0, size_t l0, const uint8_t *d1, size_t l1,
		       uint8_t out0[AUDIT_SHA256_LEN], uint8_t out1[AUDIT_SHA256_LEN])
{
	if (current() == IMPL_CPU) {
		pre2_ni(prefix, d0, l0, d1, l1, out0, out1);
	} else {
		pre_openssl(prefix, d0, l0, out0);
		pre_openssl(prefix, d1, l1, out1);
	}
}

void audit_sha256_pre4(uint8_t prefix, const uint8_t *const d[4], const size_t l[4],
		       uint8_t *const out[4])
{
	if (current() == IMPL_CPU) {
		pre4_ni(prefix, d, l, out);
		return;
	}
	for (int i = 0; i < 4; i++)
		pre_openssl(prefix, d[i], l[i], out[i]);
}
