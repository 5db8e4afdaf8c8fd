/* Streaming SHA-256 (sha256.h): FIPS 180-4 section 6.2, one 64-byte block
 * at a time, on the SHA extensions (sha256_x86.h) or in portable C. */
#include "common/sha256.h"

#include <string.h>

const uint32_t sha256_k[64] __attribute__((aligned(16))) = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5,
	0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
	0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
	0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5,
	0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* H0..H7 (FIPS 180-4 5.3.3). */
static const uint32_t h0[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static inline uint32_t ror(uint32_t x, unsigned n)
{
	return x >> n | x << (32 - n);
}

static inline uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Blocks in portable C: the message schedule kept as a 16-word ring. */
static void blocks_c(uint32_t h[8], const uint8_t *p, size_t n)
{
	for (; n; n--, p += 64) {
		uint32_t w[16], v[8], t1, t2;

		memcpy(v, h, sizeof(v));
		for (int i = 0; i < 64; i++) {
			if (i < 16) {
				w[i] = be32(p + 4 * i);
			} else {
				uint32_t a = w[(i + 1) & 15], b = w[(i + 14) & 15];
				w[i & 15] += (ror(a, 7) ^ ror(a, 18) ^ a >> 3) + w[(i + 9) & 15] +
					     (ror(b, 17) ^ ror(b, 19) ^ b >> 10);
			}
			t1 = v[7] + (ror(v[4], 6) ^ ror(v[4], 11) ^ ror(v[4], 25)) +
			     ((v[4] & v[5]) ^ (~v[4] & v[6])) + sha256_k[i] + w[i & 15];
			t2 = (ror(v[0], 2) ^ ror(v[0], 13) ^ ror(v[0], 22)) +
			     ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
			memmove(v + 1, v, 7 * sizeof(v[0]));
			v[4] += t1;
			v[0] = t1 + t2;
		}
		for (int i = 0; i < 8; i++)
			h[i] += v[i];
	}
}

#if defined(__x86_64__)
#include <cpuid.h>

#include "common/sha256_x86.h"

bool sha256_cpu_has_ni(void)
{
	unsigned a, b, c, d;

	/* SSSE3 and SSE4.1 (leaf 1, ECX bits 9 and 19) for the shuffles and
	 * blends, SHA (leaf 7, EBX bit 29) for the rounds. */
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & 1u << 9) || !(c & 1u << 19))
		return false;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return false;
	return b & 1u << 29;
}

/* The state moves between h[] (A..H) and the lanes the instructions want
 * (A B E F / C D G H) once per call, not per block. */
NI static void blocks_ni(uint32_t h[8], const uint8_t *p, size_t n)
{
	__m128i abcd = _mm_loadu_si128((const __m128i *)h), efgh = _mm_loadu_si128((const __m128i *)(h + 4));
	struct ni_state s;

	/* lanes low to high: A B C D, E F G H -> F E B A, H G D C */
	abcd = _mm_shuffle_epi32(abcd, 0xb1); /* B A D C */
	efgh = _mm_shuffle_epi32(efgh, 0x1b); /* H G F E */
	s.abef = _mm_alignr_epi8(abcd, efgh, 8);
	s.cdgh = _mm_blend_epi16(efgh, abcd, 0xf0);
	for (; n; n--, p += 64)
		ni_block(&s, p);
	abcd = _mm_shuffle_epi32(s.abef, 0x1b); /* A B E F */
	efgh = _mm_shuffle_epi32(s.cdgh, 0xb1); /* G H C D */
	_mm_storeu_si128((__m128i *)h, _mm_blend_epi16(abcd, efgh, 0xf0));
	_mm_storeu_si128((__m128i *)(h + 4), _mm_alignr_epi8(efgh, abcd, 8));
}
#else
bool sha256_cpu_has_ni(void)
{
	return false;
}

static void blocks_ni(uint32_t h[8], const uint8_t *p, size_t n)
{
	blocks_c(h, p, n);
}
#endif

enum { USE_UNKNOWN, USE_NI, USE_C };
static int use; /* atomic: set once from cpuid, or by a test */

static void blocks(uint32_t h[8], const uint8_t *p, size_t n)
{
	int u = __atomic_load_n(&use, __ATOMIC_RELAXED);

	if (u == USE_UNKNOWN) {
		u = sha256_cpu_has_ni() ? USE_NI : USE_C;
		__atomic_store_n(&use, u, __ATOMIC_RELAXED);
	}
	if (u == USE_NI)
		blocks_ni(h, p, n);
	else
		blocks_c(h, p, n);
}

bool sha256_use_ni(bool on)
{
	if (on && !sha256_cpu_has_ni())
		return false;
	__atomic_store_n(&use, on ? USE_NI : USE_C, __ATOMIC_RELAXED);
	return true;
}

void sha256_init(struct sha256 *c)
{
	memcpy(c->h, h0, sizeof(h0));
	c->bytes = 0;
}

void sha256_update(struct sha256 *c, const void *data, size_t len)
{
	const uint8_t *p = data;
	size_t have = c->bytes % 64, whole;

	c->bytes += len;
	if (have) {
		size_t take = len < 64 - have ? len : 64 - have;
		memcpy(c->buf + have, p, take);
		p += take;
		len -= take;
		if (have + take < 64)
			return;
		blocks(c->h, c->buf, 1);
	}
	whole = len / 64;
	if (whole)
		blocks(c->h, p, whole);
	memcpy(c->buf, p + whole * 64, len % 64);
}

void sha256_final(struct sha256 *c, uint8_t out[SHA256_LEN])
{
	uint64_t bits = c->bytes * 8;
	size_t have = c->bytes % 64;

	/* 0x80, zeros, and the length in bits as the block's last 8 bytes */
	c->buf[have++] = 0x80;
	if (have > 56) {
		memset(c->buf + have, 0, 64 - have);
		blocks(c->h, c->buf, 1);
		have = 0;
	}
	memset(c->buf + have, 0, 56 - have);
	for (int i = 0; i < 8; i++)
		c->buf[63 - i] = (uint8_t)(bits >> (8 * i));
	blocks(c->h, c->buf, 1);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(c->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)c->h[i];
	}
}

void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN])
{
	struct sha256 c;

	sha256_init(&c);
	sha256_update(&c, data, len);
	sha256_final(&c, out);
}
