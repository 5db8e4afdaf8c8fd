/* Layered copy-on-write disk: behaviour of the chain on real files, and
 * refusal of every wrong, corrupt or truncated file.  The randomized model
 * test and the SIGKILL test are in test_disk_model.c. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
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

#include "common/util.h"
#include "disk/disk.h"
#include "disk/format.h"

static char dir[1024];
static char err[DISK_ERR_LEN];

static const char *P(const char *name)
{
	static char bufs[8][PATH_MAX];
	static int i;
	char *b = bufs[i++ % 8];
	snprintf(b, PATH_MAX, "%s/%s", dir, name);
	return b;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static int setup(void **state)
{
	const char *t = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/kosa8-disk-XXXXXX", t && *t ? t : "/tmp");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint8_t pattern(uint64_t off, uint32_t seed)
{
	uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ULL + seed * 0xD1B54A32D192ED03ULL;

	x ^= x >> 31;
	x *= 0xBF58476D1CE4E5B9ULL;
	return (uint8_t)(x >> 56) | 1; /* never zero, so zeros are visible */
}

static void make_base(const char *path, uint64_t size, uint32_t seed)
{
	uint8_t *b = malloc(size);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_non_null(b);
	assert_true(fd >= 0);
	for (uint64_t i = 0; i < size; i++)
		b[i] = pattern(i, seed);
	assert_int_equal(write_all(fd, b, size), 0);
	close(fd);
	free(b);
}

/* A new file renamed over path: what rebuilding or copying an image does. */
static void replace_base(const char *path, uint64_t size, uint32_t seed)
{
	char tmp[PATH_MAX + 8];

	snprintf(tmp, sizeof(tmp), "%s.new", path);
	make_base(tmp, size, seed);
	assert_int_equal(rename(tmp, path), 0);
}

static struct disk *open_ok(const char *top, unsigned flags)
{
	struct disk *d = NULL;
	int rc = disk_open(&d, top, flags, err, sizeof(err));
	if (rc)
		fail_msg("disk_open(%s): %d %s", top, rc, err);
	return d;
}

static void create_ok(const char *path, const char *parent, uint64_t size, uint32_t csz)
{
	struct disk_create_opts o = {.size = size, .cluster_size = csz};
	int rc = disk_create(path, parent, &o, err, sizeof(err));
	if (rc)
		fail_msg("disk_create(%s): %d %s", path, rc, err);
}

/* Asserts that [off, off+len) reads as base pattern seed (0: zeros). */
static void expect_pattern(struct disk *d, uint64_t off, uint64_t len, uint32_t seed)
{
	uint8_t *b = malloc(len);
	assert_int_equal(disk_read(d, b, len, off), 0);
	for (uint64_t i = 0; i < len; i++) {
		uint8_t want = seed ? pattern(off + i, seed) : 0;
		if (b[i] != want)
			fail_msg("byte %llu: got %u want %u", (unsigned long long)(off + i), b[i], want);
	}
	free(b);
}

static void write_pattern(struct disk *d, uint64_t off, uint64_t len, uint32_t seed)
{
	uint8_t *b = malloc(len);
	for (uint64_t i = 0; i < len; i++)
		b[i] = pattern(off + i, seed);
	assert_int_equal(disk_write(d, b, len, off), 0);
	free(b);
}

static uint64_t file_blocks(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

static void test_read_through(void **state)
{
	struct disk *d;

	make_base(P("base.img"), MiB + 1000, 7);
	create_ok(P("top"), P("base.img"), 0, 0);
	d = open_ok(P("top"), 0);
	assert_int_equal(disk_size(d), MiB + 1024);
	assert_int_equal(disk_layer_count(d), 2);
	assert_non_null(strstr(disk_layer_path(d, 0), "/base.img"));
	assert_non_null(strstr(disk_layer_path(d, 1), "/top"));
	assert_null(disk_layer_path(d, 2));
	expect_pattern(d, 0, MiB + 1000, 7);
	expect_pattern(d, MiB + 1000, 24, 0); /* past the base: zeros */
	expect_pattern(d, 12345, 3, 7);
	assert_int_equal(disk_close(d), 0);
}

static void test_write_overwrite(void **state)
{
	struct disk *d;
	struct disk_stats st;
	uint8_t x[100];

	make_base(P("base.img"), 4 * MiB, 1);
	create_ok(P("top"), P("base.img"), 0, 0);
	d = open_ok(P("top"), 0);
	write_pattern(d, 0, 256 * KiB, 2);           /* four whole clusters, no copy-up */
	expect_pattern(d, 0, 256 * KiB, 2);
	memset(x, 0xAB, sizeof(x));
	assert_int_equal(disk_write(d, x, sizeof(x), 50), 0); /* in place */
	disk_get_stats(d, &st);
	assert_int_equal(st.copy_ups, 0);
	assert_int_equal(st.clusters_alloc, 4);
	expect_pattern(d, 0, 50, 2);
	expect_pattern(d, 150, 256 * KiB - 150, 2);
	expect_pattern(d, 256 * KiB, 4 * MiB - 256 * KiB, 1);
	assert_int_equal(disk_close(d), 0);

	/* Durable across reopen; the base was never written. */
	d = open_ok(P("top"), DISK_RDONLY);
	assert_int_equal(disk_read(d, x, sizeof(x), 50), 0);
	for (size_t i = 0; i < sizeof(x); i++)
		assert_int_equal(x[i], 0xAB);
	expect_pattern(d, 150, 256 * KiB - 150, 2);
	assert_int_equal(disk_write(d, x, 1, 0), -EROFS);
	assert_int_equal(disk_close(d), 0);
	d = NULL;
	{
		int fd = open(P("base.img"), O_RDONLY);
		uint8_t *b = malloc(4 * MiB);
		assert_int_equal(read_full(fd, b, 4 * MiB), 4 * MiB);
		for (uint64_t i = 0; i < 4 * MiB; i++)
			assert_int_equal(b[i], pattern(i, 1));
		free(b);
		close(fd);
	}
}

static void test_partial_cluster(void **state)
{
	struct disk *d;
	struct disk_stats st;

	make_base(P("base.img"), 2 * MiB, 3);
	create_ok(P("top"), P("base.img"), 0, 0);
	d = open_ok(P("top"), 0);
	write_pattern(d, 64 * KiB + 1000, 512, 4);             /* inside one cluster */
	write_pattern(d, 3 * 64 * KiB - 100, 300, 5);          /* straddles two */
	disk_get_stats(d, &st);
	assert_int_equal(st.copy_ups, 3);
	assert_int_equal(disk_close(d), 0);
	d = open_ok(P("top"), 0);
	expect_pattern(d, 0, 64 * KiB + 1000, 3);
	expect_pattern(d, 64 * KiB + 1000, 512, 4);
	expect_pattern(d, 64 * KiB + 1512, 2 * 64 * KiB - 1612, 3);
	expect_pattern(d, 3 * 64 * KiB - 100, 300, 5);
	expect_pattern(d, 3 * 64 * KiB + 200, 2 * MiB - 3 * 64 * KiB - 200, 3);
	assert_int_equal(disk_close(d), 0);
}

static void test_discard(void **state)
{
	struct disk *d;
	uint64_t before, after;
	struct stat st1, st2;

	make_base(P("base.img"), 4 * MiB, 9);
	create_ok(P("top"), P("base.img"), 0, 0);
	d = open_ok(P("top"), 0);
	/* Over lower data only: the range must read zeros, not the base. */
	assert_int_equal(disk_discard(d, 64 * KiB, 64 * KiB), 0);
	assert_int_equal(disk_discard(d, 1000, 20000), 0);            /* partial */
	assert_int_equal(disk_discard(d, 200 * KiB + 7, 100 * KiB), 0); /* spans */
	expect_pattern(d, 0, 1000, 9);
	expect_pattern(d, 1000, 20000, 0);
	expect_pattern(d, 21000, 64 * KiB - 21000, 9);
	expect_pattern(d, 64 * KiB, 64 * KiB, 0);
	expect_pattern(d, 128 * KiB, 72 * KiB + 7, 9);
	expect_pattern(d, 200 * KiB + 7, 100 * KiB, 0);
	expect_pattern(d, 300 * KiB + 7, 4 * MiB - 300 * KiB - 7, 9);

	/* Discarding written clusters gives the space back. */
	write_pattern(d, 2 * MiB, 2 * MiB, 10);
	assert_int_equal(disk_flush(d), 0);
	before = file_blocks(P("top"));
	assert_int_equal(stat(P("top"), &st1), 0);
	assert_int_equal(disk_discard(d, 2 * MiB, 2 * MiB), 0);
	assert_int_equal(disk_flush(d), 0);
	after = file_blocks(P("top"));
	/* ext4 may spend a block on the extent tree for the new holes. */
	if (before < after + 2 * MiB - 64 * KiB)
		fail_msg("discard freed %lld bytes (before %llu)", (long long)(before - after),
			 (unsigned long long)before);
	expect_pattern(d, 2 * MiB, 2 * MiB, 0);
	/* Freed clusters are reused (after the flush made the discard durable). */
	write_pattern(d, 2 * MiB, 1 * MiB, 11);
	assert_int_equal(disk_close(d), 0);
	assert_int_equal(stat(P("top"), &st2), 0);
	assert_true(st2.st_size <= st1.st_size);

	d = open_ok(P("top"), 0);
	expect_pattern(d, 64 * KiB, 64 * KiB, 0);
	expect_pattern(d, 2 * MiB, MiB, 11);
	expect_pattern(d, 3 * MiB, MiB, 0);
	assert_int_equal(disk_close(d), 0);
}

/* What a snapshot costs must not depend on the disk size or the data in it. */
static void snap_cost(const char *name, uint64_t size, uint64_t written, struct disk_stats *cost,
		      uint64_t *new_blocks)
{
	char a[64], b[64];
	struct disk_stats s0, s1;
	struct disk *d;

	snprintf(a, sizeof(a), "%s.0", name);
	snprintf(b, sizeof(b), "%s.1", name);
	create_ok(P(a), NULL, size, 0);
	d = open_ok(P(a), 0);
	for (uint64_t off = 0; off < written; off += MiB)
		write_pattern(d, off * 8 % size, MiB, 12);
	assert_int_equal(disk_flush(d), 0);
	disk_get_stats(d, &s0);
	assert_int_equal(disk_snapshot(d, P(b), err, sizeof(err)), 0);
	disk_get_stats(d, &s1);
	assert_int_equal(disk_layer_count(d), 2);
	expect_pattern(d, 0, MiB, 12);
	write_pattern(d, 0, 4096, 13);          /* the new top takes writes */
	expect_pattern(d, 0, 4096, 13);
	assert_int_equal(disk_close(d), 0);
	memset(cost, 0, sizeof(*cost));
	cost->data_writes = s1.data_writes - s0.data_writes;
	cost->map_writes = s1.map_writes - s0.map_writes;
	cost->header_writes = s1.header_writes - s0.header_writes;
	cost->syncs = s1.syncs - s0.syncs;
	cost->map_bytes_loaded = s1.map_bytes_loaded - s0.map_bytes_loaded;
	*new_blocks = file_blocks(P(b));
}

static void test_snapshot_o1(void **state)
{
	struct disk_stats small, big;
	uint64_t small_blocks, big_blocks;

	snap_cost("small", 1 * MiB, 1 * MiB, &small, &small_blocks);
	snap_cost("big", 64 * GiB, 32 * MiB, &big, &big_blocks);
	assert_memory_equal(&small, &big, sizeof(small));
	assert_int_equal(small.data_writes, 0);
	assert_int_equal(small.map_writes, 0);
	assert_int_equal(small.map_bytes_loaded, 0);
	assert_int_equal(small.header_writes, 2); /* new header, frozen flag */
	assert_int_equal(small.syncs, 4);         /* new file, folder, freeze, open */
	/* After one 4 KiB write and close: header, one map sector, one cluster. */
	assert_int_equal(small_blocks, big_blocks);
	assert_true(big_blocks <= 4096 + 4096 + 64 * KiB);
}

static void test_fork(void **state)
{
	struct disk *a, *b, *p;

	make_base(P("base.img"), 2 * MiB, 20);
	create_ok(P("d0"), P("base.img"), 0, 0);
	a = open_ok(P("d0"), 0);
	write_pattern(a, 0, MiB, 21);
	assert_int_equal(disk_snapshot(a, P("a1"), err, sizeof(err)), 0);
	/* d0 is frozen: no writer, no second top on it. */
	assert_int_equal(disk_open(&p, P("d0"), 0, err, sizeof(err)), -EROFS);
	assert_non_null(strstr(err, "frozen"));
	create_ok(P("b1"), P("d0"), 0, 0);
	b = open_ok(P("b1"), 0);
	assert_int_equal(disk_layer_count(b), 3);
	write_pattern(a, 100 * KiB, 300 * KiB, 22);
	write_pattern(b, 200 * KiB, 300 * KiB, 23);
	assert_int_equal(disk_discard(b, 0, 64 * KiB), 0);
	expect_pattern(a, 0, 100 * KiB, 21);
	expect_pattern(a, 100 * KiB, 300 * KiB, 22);
	expect_pattern(a, 400 * KiB, 624 * KiB, 21);
	expect_pattern(a, MiB, MiB, 20);
	expect_pattern(b, 0, 64 * KiB, 0);
	expect_pattern(b, 64 * KiB, 136 * KiB, 21);
	expect_pattern(b, 200 * KiB, 300 * KiB, 23);
	expect_pattern(b, 500 * KiB, 524 * KiB, 21);
	assert_int_equal(disk_close(a), 0);
	assert_int_equal(disk_close(b), 0);
	/* The frozen layer still reads as it was when frozen. */
	p = open_ok(P("d0"), DISK_RDONLY);
	expect_pattern(p, 0, MiB, 21);
	assert_int_equal(disk_close(p), 0);
}

static void test_rewind(void **state)
{
	struct disk *d;

	make_base(P("base.img"), MiB, 30);
	create_ok(P("t0"), P("base.img"), 0, 0);
	d = open_ok(P("t0"), 0);
	write_pattern(d, 0, 4096, 31);
	assert_int_equal(disk_snapshot(d, P("t1"), err, sizeof(err)), 0); /* checkpoint */
	write_pattern(d, 0, MiB, 32);
	assert_int_equal(disk_snapshot(d, P("t2"), err, sizeof(err)), 0);
	write_pattern(d, 0, 10, 33);
	assert_int_equal(disk_close(d), 0);
	/* Rewind to the checkpoint: a new empty top over t0, the rest dropped. */
	create_ok(P("r1"), P("t0"), 0, 0);
	unlink(P("t1"));
	unlink(P("t2"));
	d = open_ok(P("r1"), 0);
	expect_pattern(d, 0, 4096, 31);
	expect_pattern(d, 4096, MiB - 4096, 30);
	assert_int_equal(disk_close(d), 0);
}

static void test_no_parent_and_grow(void **state)
{
	struct disk *d;
	struct disk_create_opts o = {0};

	assert_int_equal(disk_create(P("x"), NULL, &o, err, sizeof(err)), -EINVAL);
	o.size = 1000;
	assert_int_equal(disk_create(P("x"), NULL, &o, err, sizeof(err)), -EINVAL);
	o.size = 1024;
	o.cluster_size = 3000;
	assert_int_equal(disk_create(P("x"), NULL, &o, err, sizeof(err)), -EINVAL);
	create_ok(P("blank"), NULL, 10 * MiB + 512, 4096);
	d = open_ok(P("blank"), 0);
	expect_pattern(d, 0, 10 * MiB + 512, 0);
	write_pattern(d, 10 * MiB, 512, 40); /* the short last cluster */
	expect_pattern(d, 10 * MiB, 512, 40);
	assert_int_equal(disk_discard(d, 10 * MiB, 512), 0);
	expect_pattern(d, 10 * MiB, 512, 0);
	assert_int_equal(disk_close(d), 0);

	/* A disk larger than its base: the rest reads zeros and takes writes. */
	make_base(P("base.img"), MiB, 41);
	create_ok(P("big"), P("base.img"), 3 * MiB, 0);
	d = open_ok(P("big"), 0);
	expect_pattern(d, 0, MiB, 41);
	expect_pattern(d, MiB, 2 * MiB, 0);
	write_pattern(d, MiB - 10, 20, 42);
	expect_pattern(d, MiB - 10, 20, 42);
	assert_int_equal(disk_close(d), 0);
}

static void test_ranges(void **state)
{
	struct disk *d;
	uint8_t b[16];

	create_ok(P("r"), NULL, MiB, 0);
	d = open_ok(P("r"), 0);
	assert_int_equal(disk_read(d, b, 0, MiB), 0);
	assert_int_equal(disk_read(d, b, 1, MiB), -ERANGE);
	assert_int_equal(disk_read(d, b, 16, MiB - 8), -ERANGE);
	assert_int_equal(disk_read(d, b, 16, UINT64_MAX - 4), -ERANGE);
	assert_int_equal(disk_write(d, b, 16, MiB - 15), -ERANGE);
	assert_int_equal(disk_discard(d, MiB, 1), -ERANGE);
	assert_int_equal(disk_discard(d, 1, UINT64_MAX), -ERANGE);
	assert_int_equal(disk_read(d, NULL, 16, 0), -EINVAL);
	assert_int_equal(disk_write(d, NULL, 16, 0), -EINVAL);
	assert_int_equal(disk_open(&d, P("r"), 0x80, err, sizeof(err)), -EINVAL);
	assert_int_equal(disk_close(d), 0);
}

static void test_locking(void **state)
{
	struct disk *a, *b;

	make_base(P("base.img"), MiB, 50);
	create_ok(P("top"), P("base.img"), 0, 0);
	a = open_ok(P("top"), 0);
	assert_int_equal(disk_open(&b, P("top"), 0, err, sizeof(err)), -EBUSY);
	assert_non_null(strstr(err, "in use"));
	assert_int_equal(disk_open(&b, P("top"), DISK_RDONLY, err, sizeof(err)), -EBUSY);
	assert_int_equal(disk_freeze(P("top"), err, sizeof(err)), -EBUSY);
	assert_int_equal(disk_create(P("child"), P("top"), NULL, err, sizeof(err)), -EBUSY);
	assert_int_equal(disk_close(a), 0);
	/* Not frozen: no delta may be made over it. */
	assert_int_equal(disk_create(P("child"), P("top"), NULL, err, sizeof(err)), -EBUSY);
	assert_non_null(strstr(err, "not frozen"));
	assert_int_equal(disk_freeze(P("top"), err, sizeof(err)), 0);
	assert_int_equal(disk_freeze(P("top"), err, sizeof(err)), 0);
	create_ok(P("child"), P("top"), 0, 0);
	/* Two chains may share frozen layers; freezing again is a no-op. */
	a = open_ok(P("child"), 0);
	b = open_ok(P("top"), DISK_RDONLY);
	assert_int_equal(disk_freeze(P("top"), err, sizeof(err)), 0);
	assert_int_equal(disk_close(b), 0);
	assert_int_equal(disk_close(a), 0);
}

static void test_wrong_parent(void **state)
{
	struct disk *d;

	make_base(P("base.img"), MiB, 60);
	create_ok(P("top"), P("base.img"), 0, 0);
	/* Same size, other contents, new file (a rebuilt image). */
	replace_base(P("base.img"), MiB, 61);
	assert_int_equal(disk_open(&d, P("top"), 0, err, sizeof(err)), -ESTALE);
	assert_non_null(strstr(err, "other contents"));
	/* Other size. */
	replace_base(P("base.img"), MiB + 512, 60);
	assert_int_equal(disk_open(&d, P("top"), 0, err, sizeof(err)), -ESTALE);
	assert_non_null(strstr(err, "bytes"));
	/* The right contents again (a copy): accepted, the id is recomputed. */
	replace_base(P("base.img"), MiB, 60);
	d = open_ok(P("top"), 0);
	assert_int_equal(disk_close(d), 0);
	/* Gone. */
	unlink(P("base.img"));
	assert_int_equal(disk_open(&d, P("top"), 0, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "parent of"));

	/* A delta parent replaced by another frozen delta of the same name. */
	create_ok(P("p"), NULL, MiB, 0);
	assert_int_equal(disk_freeze(P("p"), err, sizeof(err)), 0);
	create_ok(P("c"), P("p"), 0, 0);
	unlink(P("p"));
	create_ok(P("p"), NULL, MiB, 0);
	assert_int_equal(disk_freeze(P("p"), err, sizeof(err)), 0);
	assert_int_equal(disk_open(&d, P("c"), 0, err, sizeof(err)), -ESTALE);
	assert_non_null(strstr(err, "not the delta"));
	/* A raw file where a delta parent was. */
	unlink(P("p"));
	make_base(P("p"), MiB, 62);
	assert_int_equal(disk_open(&d, P("c"), 0, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "magic"));
}

static void test_unfrozen_lower_refused(void **state)
{
	uint8_t hdr[DISK_HDR_SIZE];
	struct disk_header h;
	struct disk *d;
	int fd;

	create_ok(P("p"), NULL, MiB, 0);
	assert_int_equal(disk_freeze(P("p"), err, sizeof(err)), 0);
	create_ok(P("c"), P("p"), 0, 0);
	/* Clear the flag behind the library's back (an interrupted snapshot). */
	fd = open(P("p"), O_RDWR);
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	assert_int_equal(disk_header_decode(hdr, sizeof(hdr), &h, err, sizeof(err)), 0);
	h.flags = 0;
	disk_header_encode(&h, hdr);
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	close(fd);
	assert_int_equal(disk_open(&d, P("c"), 0, err, sizeof(err)), -EUCLEAN);
	assert_non_null(strstr(err, "not frozen"));
}

/* A chain that loops back on itself (only a hand-edited header can do
 * that) stops at the layer limit with a clear error. */
static void test_chain_loop(void **state)
{
	uint8_t hdr[DISK_HDR_SIZE];
	struct disk_header hp, hc;
	struct disk *d;
	int fd;

	create_ok(P("p"), NULL, MiB, 0);
	assert_int_equal(disk_freeze(P("p"), err, sizeof(err)), 0);
	create_ok(P("c"), P("p"), 0, 0);
	assert_int_equal(disk_freeze(P("c"), err, sizeof(err)), 0);
	fd = open(P("c"), O_RDONLY);
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	close(fd);
	assert_int_equal(disk_header_decode(hdr, sizeof(hdr), &hc, err, sizeof(err)), 0);
	fd = open(P("p"), O_RDWR);
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	assert_int_equal(disk_header_decode(hdr, sizeof(hdr), &hp, err, sizeof(err)), 0);
	hp.parent_kind = DISK_PARENT_DELTA;
	hp.parent_size = hc.size;
	memcpy(hp.parent_id, hc.uuid, 16);
	strcpy(hp.parent_path, "c");
	hp.parent_path_len = 1;
	disk_header_encode(&hp, hdr);
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	close(fd);
	assert_int_equal(disk_open(&d, P("c"), DISK_RDONLY, err, sizeof(err)), -ELOOP);
	assert_non_null(strstr(err, "deeper than"));
}

static void test_parent_path_rules(void **state)
{
	char moved[PATH_MAX + 8], hdr[DISK_HDR_SIZE];
	struct disk *d;
	int fd;

	make_base(P("base.img"), MiB, 70);
	assert_int_equal(mkdir(P("sub"), 0755), 0);
	create_ok(P("top"), P("base.img"), 0, 0);     /* same folder: by name */
	create_ok(P("sub/top"), P("base.img"), 0, 0); /* elsewhere: absolute */
	fd = open(P("top"), O_RDONLY);
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	close(fd);
	assert_string_equal(hdr + 512, "base.img");
	fd = open(P("sub/top"), O_RDONLY);
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	close(fd);
	assert_true(hdr[512] == '/');
	assert_non_null(strstr(hdr + 512, "/base.img"));
	/* A folder of layers moves whole. */
	assert_int_equal(unlink(P("sub/top")), 0);
	assert_int_equal(rmdir(P("sub")), 0);
	snprintf(moved, sizeof(moved), "%s.moved", dir);
	assert_int_equal(rename(dir, moved), 0);
	memcpy(dir + strlen(dir), ".moved", 7);
	d = open_ok(P("top"), 0);
	expect_pattern(d, 0, MiB, 70);
	assert_int_equal(disk_close(d), 0);
}

static void test_base_id(void **state)
{
	uint8_t a[16], b[16];
	char side[PATH_MAX];
	int fd;

	make_base(P("base.img"), 3 * MiB, 80);
	snprintf(side, sizeof(side), "%s.kosa8-id", P("base.img"));
	/* A file changed within the last clock ticks is not cached (a
	 * replacement in the same tick would look the same)... */
	assert_int_equal(disk_base_id(P("base.img"), a, err, sizeof(err)), 0);
	assert_int_equal(access(side, F_OK), -1);
	/* ...an older one is: its ctime has aged past the limit. */
	sleep(3);
	assert_int_equal(disk_base_id(P("base.img"), a, err, sizeof(err)), 0);
	assert_int_equal(access(side, R_OK), 0);
	assert_int_equal(disk_base_id(P("base.img"), b, err, sizeof(err)), 0);
	assert_memory_equal(a, b, 16);
	/* A damaged cache is not believed. */
	fd = open(side, O_WRONLY);
	assert_int_equal(pwrite(fd, "0", 1, strlen("kosa8-base-id 2\nsize ")), 1);
	close(fd);
	assert_int_equal(disk_base_id(P("base.img"), b, err, sizeof(err)), 0);
	assert_memory_equal(a, b, 16);
	/* Neither is a cache for other contents. */
	replace_base(P("base.img"), 3 * MiB, 81);
	assert_int_equal(disk_base_id(P("base.img"), b, err, sizeof(err)), 0);
	assert_memory_not_equal(a, b, 16);
	assert_int_equal(disk_base_id(P("nope"), b, err, sizeof(err)), -ENOENT);
}

/* A delta with a parent, data, discards and a flushed map. */
static void make_full_delta(void)
{
	struct disk *d;

	make_base(P("base.img"), 2 * MiB, 90);
	create_ok(P("top"), P("base.img"), 0, 0);
	d = open_ok(P("top"), 0);
	write_pattern(d, 0, 300 * KiB, 91);
	write_pattern(d, MiB + 5, 100, 92);
	assert_int_equal(disk_discard(d, 1536 * KiB, 128 * KiB), 0);
	assert_int_equal(disk_close(d), 0);
	d = open_ok(P("top"), 0); /* the unflipped file is fine */
	assert_int_equal(disk_close(d), 0);
}

static void flip_and_expect_refusal(int fd, uint64_t off, uint8_t mask)
{
	struct disk *d = NULL;
	uint8_t b, nb;
	int rc;

	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	nb = b ^ mask;
	assert_int_equal(pwrite(fd, &nb, 1, (off_t)off), 1);
	rc = disk_open(&d, P("top"), 0, err, sizeof(err));
	if (rc >= 0)
		fail_msg("flipping byte %llu (mask %02x) was not noticed", (unsigned long long)off, mask);
	assert_null(d);
	assert_true(err[0] != '\0');
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
}

static void test_corrupt_header_every_byte(void **state)
{
	int fd;

	make_full_delta();
	fd = open(P("top"), O_RDWR);
	for (uint64_t i = 0; i < DISK_HDR_SIZE; i++) {
		flip_and_expect_refusal(fd, i, 0x01);
		flip_and_expect_refusal(fd, i, 0x80);
	}
	close(fd);
}

static void test_corrupt_map_every_byte(void **state)
{
	int fd;

	make_full_delta();
	fd = open(P("top"), O_RDWR);
	/* Clusters 0..4, 16, 24, 25 are mapped: all in map sector 0. */
	for (uint64_t i = DISK_MAP_OFFSET; i < DISK_MAP_OFFSET + DISK_MAP_SECTOR; i++)
		flip_and_expect_refusal(fd, i, 0x10);
	close(fd);
}

static void test_other_version_and_flags(void **state)
{
	uint8_t hdr[DISK_HDR_SIZE];
	struct disk_header h;
	struct disk *d;
	int fd;

	make_full_delta();
	fd = open(P("top"), O_RDWR);
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	assert_int_equal(disk_header_decode(hdr, sizeof(hdr), &h, err, sizeof(err)), 0);
	h.version = 2;
	disk_header_encode(&h, hdr);
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	assert_int_equal(disk_open(&d, P("top"), 0, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "version 2"));
	h.version = 1;
	h.flags = 0x100;
	disk_header_encode(&h, hdr);
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	assert_int_equal(disk_open(&d, P("top"), 0, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "flags"));
	close(fd);
}

static void test_truncated(void **state)
{
	const uint64_t lens[] = {0, 1, 8, 100, 511, 512, 4095, 4096, 4097, 8192,
				 64 * KiB - 1, 64 * KiB, 64 * KiB + 4096, 128 * KiB, 300 * KiB};
	uint8_t *copy;
	size_t len;
	struct disk *d = NULL;

	make_full_delta();
	assert_int_equal(read_file(P("top"), 64 * MiB, &copy, &len), 0);
	assert_true(len > 300 * KiB);
	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		int fd = open(P("top"), O_WRONLY | O_TRUNC);
		assert_int_equal(write_all(fd, copy, lens[i]), 0);
		close(fd);
		if (disk_open(&d, P("top"), 0, err, sizeof(err)) >= 0)
			fail_msg("file truncated to %llu bytes was accepted", (unsigned long long)lens[i]);
		assert_null(d);
	}
	free(copy);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_read_through, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_overwrite, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_cluster, setup, teardown),
		cmocka_unit_test_setup_teardown(test_discard, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_o1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fork, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rewind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_parent_and_grow, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ranges, setup, teardown),
		cmocka_unit_test_setup_teardown(test_locking, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_parent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unfrozen_lower_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chain_loop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_parent_path_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_base_id, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_header_every_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_map_every_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_version_and_flags, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
	};
	return cmocka_run_group_tests_name("disk", tests, NULL, NULL);
}
