/* SHA-256 rounds on the x86 SHA extensions (FIPS 180-4 6.2.2), shared by
 * the streaming hash (sha256.c) and the audit log's hashing of two or four
 * messages side by side (audit/sha256.c).  Callers check
 * sha256_cpu_has_ni() first. */
#ifndef KOSA8_COMMON_SHA256_X86_H
#define KOSA8_COMMON_SHA256_X86_H

#include <immintrin.h>
#include <stdint.h>

#include "common/sha256.h"

#define NI __attribute__((target("sha,sse4.1")))

/* The state as the round instruction wants it: one register holds words
 * A B E F, the other C D G H (A and C in the highest lane). */
struct ni_state {
	__m128i abef, cdgh;
};

NI static inline __m128i bswap32x4(__m128i x)
{
	return _mm_shuffle_epi8(x, _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL));
}

NI static inline void ni_init(struct ni_state *s)
{
	/* H0..H7 of FIPS 180-4 5.3.3, already in ABEF / CDGH lane order */
	s->abef = _mm_set_epi32(0x6a09e667, (int)0xbb67ae85, 0x510e527f, (int)0x9b05688c);
	s->cdgh = _mm_set_epi32(0x3c6ef372, (int)0xa54ff53a, 0x1f83d9ab, 0x5be0cd19);
}

/* Four rounds.  The instruction does two rounds, taking the state as
 * (C D G H, A B E F) and returning the new A B E F; two rounds later the
 * old A B E F is exactly the new C D G H, so the registers swap roles. */
#define NI_ROUNDS4(s, wk)                                                              \
	do {                                                                           \
		(s).cdgh = _mm_sha256rnds2_epu32((s).cdgh, (s).abef, (wk));            \
		(s).abef = _mm_sha256rnds2_epu32((s).abef, (s).cdgh,                   \
						 _mm_shuffle_epi32((wk), 0x0e));       \
	} while (0)

/* W[i+16..i+19] from the last four groups of message words (FIPS 180-4
 * 6.2.2 step 1): msg1 adds sigma0, the alignr supplies W[i+9..i+12], msg2
 * adds sigma1 of the words it has just produced. */
#define NI_SCHEDULE(w, g)                                                              \
	((w)[(g) & 3] = _mm_sha256msg2_epu32(                                          \
		 _mm_add_epi32(_mm_sha256msg1_epu32((w)[(g) & 3], (w)[((g) + 1) & 3]), \
			       _mm_alignr_epi8((w)[((g) + 3) & 3], (w)[((g) + 2) & 3], 4)), \
		 (w)[((g) + 3) & 3]))

/* One 64-byte block into one state. */
NI static inline void ni_block(struct ni_state *s, const uint8_t *p)
{
	struct ni_state in = *s;
	__m128i w[4];

#pragma GCC unroll 16
	for (int g = 0; g < 16; g++) {
		if (g < 4)
			w[g] = bswap32x4(_mm_loadu_si128((const __m128i *)(p + 16 * g)));
		else
			NI_SCHEDULE(w, g);
		NI_ROUNDS4(*s, _mm_add_epi32(w[g & 3], _mm_load_si128((const __m128i *)&sha256_k[4 * g])));
	}
	s->abef = _mm_add_epi32(s->abef, in.abef);
	s->cdgh = _mm_add_epi32(s->cdgh, in.cdgh);
}

NI static inline void ni_final(const struct ni_state *s, uint8_t *out)
{
	/* back from A B E F / C D G H lanes to A B C D / E F G H, big-endian */
	__m128i abef = _mm_shuffle_epi32(s->abef, 0x1b); /* F E B A -> A B E F low to high */
	__m128i cdgh = _mm_shuffle_epi32(s->cdgh, 0xb1); /* H G D C -> G H C D */
	__m128i abcd = _mm_blend_epi16(abef, cdgh, 0xf0);
	__m128i efgh = _mm_alignr_epi8(cdgh, abef, 8);

	_mm_storeu_si128((__m128i *)out, bswap32x4(abcd));
	_mm_storeu_si128((__m128i *)(out + 16), bswap32x4(efgh));
}

#endif
