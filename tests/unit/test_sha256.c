/* The streaming SHA-256 the VMM uses instead of OpenSSL (src/common/sha256.c):
 * FIPS 180-2 known answers and OpenSSL's EVP digest over every length
 * around the block and padding edges, fed in pieces of every size, in
 * both implementations this machine can run (the SHA extensions, C). */
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/sha256.h"

static void unhex32(const char *s, uint8_t out[32])
{
	for (int i = 0; i < 32; i++)
		assert_int_equal(sscanf(s + 2 * i, "%2hhx", &out[i]), 1);
}

static void evp(const uint8_t *d, size_t len, uint8_t out[32])
{
	unsigned n = 0;

	assert_int_equal(EVP_Digest(d, len, out, &n, EVP_sha256(), NULL), 1);
	assert_int_equal(n, 32);
}

/* Runs fn with the C rounds, then with the CPU's if it has them; returns
 * how many implementations ran. */
static int for_each_impl(void (*fn)(void))
{
	int n = 1;

	assert_true(sha256_use_ni(false));
	fn();
	if (sha256_use_ni(true)) {
		fn();
		n++;
	} else {
		assert_false(sha256_cpu_has_ni());
	}
	return n;
}

static void known_answers(void)
{
	static const struct {
		const char *msg, *hex;
	} v[] = {
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		/* FIPS 180-2 B.1 and B.2 (56 bytes: the padding takes a second block) */
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
		/* FIPS 180-4's 896-bit example */
		{"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
		 "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
	};
	uint8_t want[32], got[32];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		unhex32(v[i].hex, want);
		sha256(v[i].msg, strlen(v[i].msg), got);
		assert_memory_equal(got, want, 32);
	}
}

static void test_known_answers(void **state)
{
	(void)state;
	for_each_impl(known_answers);
}

/* FIPS 180-2 B.3: a million 'a', fed 1000 at a time. */
static void million_a(void)
{
	uint8_t want[32], got[32], chunk[1000];
	struct sha256 c;

	memset(chunk, 'a', sizeof(chunk));
	sha256_init(&c);
	for (int i = 0; i < 1000; i++)
		sha256_update(&c, chunk, sizeof(chunk));
	sha256_final(&c, got);
	unhex32("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", want);
	assert_memory_equal(got, want, 32);
}

static void test_million_a(void **state)
{
	(void)state;
	for_each_impl(million_a);
}

/* Every length up to four blocks and a few beyond (the 55/56/64-byte
 * padding edges included), whole and in pieces of 1..67 bytes, against
 * OpenSSL. */
static void against_openssl(void)
{
	enum { MAX = 300 };
	uint8_t d[MAX], want[32], got[32];
	struct sha256 c;

	for (size_t i = 0; i < MAX; i++)
		d[i] = (uint8_t)(i * 131 + 7);
	for (size_t len = 0; len <= MAX; len++) {
		evp(d, len, want);
		sha256(d, len, got);
		assert_memory_equal(got, want, 32);
		for (size_t piece = 1; piece <= 67; piece += 3) {
			sha256_init(&c);
			for (size_t off = 0; off < len; off += piece)
				sha256_update(&c, d + off, len - off < piece ? len - off : piece);
			sha256_final(&c, got);
			assert_memory_equal(got, want, 32);
		}
	}
}

static void test_against_openssl(void **state)
{
	(void)state;
	for_each_impl(against_openssl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_answers),
		cmocka_unit_test(test_million_a),
		cmocka_unit_test(test_against_openssl),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
