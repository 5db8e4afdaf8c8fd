/* The layered disk against a plain in-memory buffer: thousands of random
 * writes and reads (flat and in iovec pieces), discards, flushes, reopens, snapshots, forks and rewinds;
 * and a child process killed with SIGKILL while writing, after which every
 * write it had flushed must be there.
 *
 * KOSA8_DISK_SEED and KOSA8_DISK_OPS override the seed and the op count. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
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
	snprintf(dir, sizeof(dir), "%s/kosa8-diskm-XXXXXX", t && *t ? t : "/tmp");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static uint64_t rnd_below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static void fill_random(uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(rnd() >> 40);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static void make_base(const char *path, const uint8_t *b, uint64_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write_all(fd, b, size), 0);
	close(fd);
}

static struct disk *open_ok(const char *top)
{
	struct disk *d = NULL;
	int rc = disk_open(&d, top, 0, err, sizeof(err));
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

static void compare(struct disk *d, const uint8_t *model, uint64_t off, uint64_t len,
		    unsigned op)
{
	uint8_t *b = malloc(len ? len : 1);
	assert_int_equal(disk_read(d, b, len, off), 0);
	for (uint64_t i = 0; i < len; i++) {
		if (b[i] != model[off + i])
			fail_msg("op %u: byte %llu reads %u, model has %u", op,
				 (unsigned long long)(off + i), b[i], model[off + i]);
	}
	free(b);
}

/* ---- randomized model test ---- */

#define MAX_CKPT 512

struct frozen {
	char name[32];
	uint8_t *model; /* disk contents when frozen */
	uint32_t crc;   /* of the whole file: frozen layers never change */
};

struct mstate {
	struct disk *d;
	uint8_t *model;
	uint64_t size;
	uint32_t csz;
	char top[32];
	unsigned next_name;
	struct frozen ck[MAX_CKPT];
	unsigned nck;
	unsigned counts[8];
};

static uint32_t file_crc(const char *path)
{
	uint8_t *b;
	size_t n;
	uint32_t c;

	assert_int_equal(read_file(path, 1ULL << 30, &b, &n), 0);
	c = disk_crc32c(0, b, n);
	free(b);
	return c;
}

/* A range biased towards the interesting cases: sector-aligned, cluster
 * edges, the very end of the disk. */
static void rnd_range(const struct mstate *s, uint64_t *off, uint64_t *len)
{
	uint64_t max = 3ULL * s->csz;

	switch (rnd_below(4)) {
	case 0: /* 512-byte sectors, as the device will send */
		*off = rnd_below(s->size / 512) * 512;
		*len = (1 + rnd_below(max / 512)) * 512;
		break;
	case 1: /* whole clusters */
		*off = rnd_below(s->size / s->csz + 1) * s->csz;
		*len = (1 + rnd_below(3)) * s->csz;
		break;
	case 2: /* near the end */
		*off = s->size - 1 - rnd_below(2 * s->csz);
		*len = 1 + rnd_below(2 * s->csz);
		break;
	default:
		*off = rnd_below(s->size);
		*len = 1 + rnd_below(max);
	}
	if (*off >= s->size)
		*off = s->size - 1;
	if (*len > s->size - *off)
		*len = s->size - *off;
}

/* Cuts [b, b+len) into pieces as a virtqueue chain would: usually a few,
 * sometimes hundreds, some empty.  Returns the count. */
#define MAX_PIECES 1024
static int split(uint8_t *b, uint64_t len, struct iovec *iov)
{
	int n = rnd_below(3) ? 1 + (int)rnd_below(8) : 1 + (int)rnd_below(MAX_PIECES);
	uint64_t left = len;

	for (int i = 0; i < n; i++) {
		uint64_t k = i == n - 1 ? left : rnd_below(4) == 0 ? 0 : rnd_below(left / (uint64_t)(n - i) * 2 + 1);
		if (k > left)
			k = left;
		iov[i] = (struct iovec){b, k};
		b += k;
		left -= k;
	}
	return n;
}

static int do_write(struct disk *d, uint8_t *b, uint64_t len, uint64_t off)
{
	struct iovec iov[MAX_PIECES];

	if (rnd_below(2))
		return disk_write(d, b, len, off);
	return disk_writev(d, iov, split(b, len, iov), off);
}

static int do_read(struct disk *d, uint8_t *b, uint64_t len, uint64_t off)
{
	struct iovec iov[MAX_PIECES];

	if (rnd_below(2))
		return disk_read(d, b, len, off);
	return disk_readv(d, iov, split(b, len, iov), off);
}

static void op_write(struct mstate *s)
{
	uint64_t off, len;
	uint8_t *b;

	rnd_range(s, &off, &len);
	b = malloc(len);
	fill_random(b, len);
	assert_int_equal(do_write(s->d, b, len, off), 0);
	memcpy(s->model + off, b, len);
	free(b);
}

static void op_read(struct mstate *s, unsigned op)
{
	uint64_t off, len;
	uint8_t *b;

	rnd_range(s, &off, &len);
	b = malloc(len);
	assert_int_equal(do_read(s->d, b, len, off), 0);
	for (uint64_t i = 0; i < len; i++) {
		if (b[i] != s->model[off + i])
			fail_msg("op %u: byte %llu reads %u, model has %u", op,
				 (unsigned long long)(off + i), b[i], s->model[off + i]);
	}
	free(b);
}

static void op_discard(struct mstate *s)
{
	uint64_t off, len;

	rnd_range(s, &off, &len);
	assert_int_equal(disk_discard(s->d, off, len), 0);
	memset(s->model + off, 0, len);
}

static void next_top(struct mstate *s)
{
	snprintf(s->top, sizeof(s->top), "L%u", s->next_name++);
}

static void freeze_record(struct mstate *s, const char *name)
{
	struct frozen *f;

	if (s->nck == MAX_CKPT)
		return;
	f = &s->ck[s->nck++];
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->model = malloc(s->size);
	memcpy(f->model, s->model, s->size);
	f->crc = file_crc(P(name));
}

static void op_snapshot(struct mstate *s)
{
	char old[32];

	if (s->nck == MAX_CKPT || disk_layer_count(s->d) >= DISK_MAX_LAYERS - 1)
		return;
	snprintf(old, sizeof(old), "%s", s->top);
	next_top(s);
	if (disk_snapshot(s->d, P(s->top), err, sizeof(err)))
		fail_msg("snapshot: %s", err);
	freeze_record(s, old);
}

/* A second child of the layer just frozen; continue on it. */
static void op_fork(struct mstate *s)
{
	unsigned n = s->nck;

	op_snapshot(s);
	if (s->nck == n)
		return;
	assert_int_equal(disk_close(s->d), 0);
	next_top(s);
	create_ok(P(s->top), P(s->ck[n].name), 0, 0);
	s->d = open_ok(P(s->top));
}

static void op_rewind(struct mstate *s)
{
	struct frozen *f;

	if (!s->nck)
		return;
	f = &s->ck[rnd_below(s->nck)];
	assert_int_equal(disk_close(s->d), 0);
	next_top(s);
	create_ok(P(s->top), P(f->name), 0, 0);
	s->d = open_ok(P(s->top));
	memcpy(s->model, f->model, s->size);
}

static void op_reopen(struct mstate *s)
{
	assert_int_equal(disk_close(s->d), 0);
	s->d = open_ok(P(s->top));
}

static void run_model(uint64_t size, uint32_t csz, bool with_base)
{
	uint64_t seed = env_u64("KOSA8_DISK_SEED", 0x6b6f736138ULL ^ size ^ csz);
	unsigned ops = (unsigned)env_u64("KOSA8_DISK_OPS", 1000);
	struct mstate s = {.size = (size + 511) & ~511ULL, .csz = csz};

	print_message("seed 0x%llx, %u ops, size %llu, cluster %u%s\n", (unsigned long long)seed,
		      ops, (unsigned long long)s.size, csz, with_base ? ", over a raw base" : "");
	rng_state = seed | 1;
	s.model = calloc(1, s.size);
	next_top(&s);
	if (with_base) {
		fill_random(s.model, size);
		make_base(P("base.img"), s.model, size);
		create_ok(P(s.top), P("base.img"), 0, csz);
	} else {
		create_ok(P(s.top), NULL, s.size, csz);
	}
	s.d = open_ok(P(s.top));
	for (unsigned i = 0; i < ops; i++) {
		unsigned r = (unsigned)rnd_below(100);
		if (r < 40) {
			op_write(&s);
		} else if (r < 65) {
			op_read(&s, i);
		} else if (r < 77) {
			op_discard(&s);
		} else if (r < 85) {
			assert_int_equal(disk_flush(s.d), 0);
		} else if (r < 90) {
			op_reopen(&s);
		} else if (r < 95) {
			op_snapshot(&s);
		} else if (r < 97) {
			op_fork(&s);
		} else {
			op_rewind(&s);
		}
		s.counts[r < 40 ? 0 : r < 65 ? 1 : r < 77 ? 2 : r < 85 ? 3 : r < 90 ? 4 : r < 95 ? 5 : r < 97 ? 6 : 7]++;
		if (i % 500 == 499)
			compare(s.d, s.model, 0, s.size, i);
	}
	compare(s.d, s.model, 0, s.size, ops);
	print_message("writes %u reads %u discards %u flushes %u reopens %u snapshots %u forks %u "
		      "rewinds %u; %u frozen layers, chain of %u\n", s.counts[0], s.counts[1],
		      s.counts[2], s.counts[3], s.counts[4], s.counts[5], s.counts[6], s.counts[7],
		      s.nck, disk_layer_count(s.d));
	assert_int_equal(disk_close(s.d), 0);
	/* Every frozen layer is byte for byte what it was when frozen, and
	 * still reads as the disk did then. */
	for (unsigned i = 0; i < s.nck; i++) {
		struct disk *d;
		assert_int_equal(file_crc(P(s.ck[i].name)), s.ck[i].crc);
		assert_int_equal(disk_open(&d, P(s.ck[i].name), DISK_RDONLY, err, sizeof(err)), 0);
		compare(d, s.ck[i].model, 0, s.size, ops + i);
		assert_int_equal(disk_close(d), 0);
		free(s.ck[i].model);
	}
	assert_true(s.nck >= 3);
	free(s.model);
}

static void test_model_64k_over_base(void **state)
{
	run_model(3 * MiB + 1234, 64 * 1024, true);
}

static void test_model_4k_over_base(void **state)
{
	run_model(MiB + 100, 4096, true);
}

static void test_model_16k_blank(void **state)
{
	run_model(2 * MiB, 16 * 1024, false);
}

/* ---- SIGKILL after flush ---- */

/* Round r touches only region r, with writes, overwrites, partial-cluster
 * writes and discards; the same sequence is replayed on the model. */
#define REGION (256 * KiB)
#define ROUNDS 24
#define KILL_DISK (ROUNDS * REGION)

typedef int (*wr_fn)(void *t, const uint8_t *b, uint64_t len, uint64_t off);
typedef int (*dc_fn)(void *t, uint64_t off, uint64_t len);

static int model_write(void *t, const uint8_t *b, uint64_t len, uint64_t off)
{
	memcpy((uint8_t *)t + off, b, len);
	return 0;
}

static int model_discard(void *t, uint64_t off, uint64_t len)
{
	memset((uint8_t *)t + off, 0, len);
	return 0;
}

static int disk_write_fn(void *t, const uint8_t *b, uint64_t len, uint64_t off)
{
	return disk_write(t, b, len, off);
}

static int disk_discard_fn(void *t, uint64_t off, uint64_t len)
{
	return disk_discard(t, off, len);
}

static int apply_round(unsigned r, void *t, wr_fn wr, dc_fn dc)
{
	uint8_t *b = malloc(REGION);
	uint64_t base = (uint64_t)r * REGION;
	int rc = 0;

	rng_state = 0x5eed0000ULL + r;
	for (int i = 0; i < 8 && !rc; i++) {
		uint64_t off = rnd_below(REGION), len = 1 + rnd_below(REGION - off);
		if (i % 4 == 3) {
			rc = dc(t, base + off, len);
		} else {
			fill_random(b, len);
			rc = wr(t, b, len, base + off);
		}
	}
	free(b);
	return rc;
}

struct report {
	unsigned round;
	unsigned top;
};

/* Never returns: writes and flushes round after round, snapshotting every
 * fourth, telling the parent each round that flush made durable. */
static void child_writer(int wfd)
{
	char name[32];
	struct disk *d;
	unsigned top = 0;

	snprintf(name, sizeof(name), "T%u", top);
	if (disk_open(&d, P(name), 0, err, sizeof(err)))
		_exit(2);
	for (unsigned r = 0;; r = (r + 1) % ROUNDS) {
		struct report rep = {r, top};
		if (apply_round(r, d, disk_write_fn, disk_discard_fn) || disk_flush(d))
			_exit(3);
		if (r % 4 == 3) {
			snprintf(name, sizeof(name), "T%u", ++top);
			if (disk_snapshot(d, P(name), err, sizeof(err)))
				_exit(4);
			rep.top = top;
		}
		if (write(wfd, &rep, sizeof(rep)) != sizeof(rep))
			_exit(5);
		if (r == ROUNDS - 1)
			_exit(0); /* one pass is enough: later rounds would rewrite regions */
	}
}

/* Opens the newest top that opens: a kill inside a snapshot may leave a
 * newer delta whose parent was never frozen, which must be refused. */
static struct disk *reopen_after_kill(unsigned reported_top, unsigned *opened)
{
	struct disk *d = NULL;
	char name[32];

	for (unsigned t = ROUNDS / 4 + 1; t >= reported_top && t <= ROUNDS; t--) {
		snprintf(name, sizeof(name), "T%u", t);
		if (access(P(name), F_OK))
			continue;
		if (!disk_open(&d, P(name), 0, err, sizeof(err))) {
			*opened = t;
			return d;
		}
		assert_true(t > reported_top); /* the reported one must open */
	}
	fail_msg("no top opens: %s", err);
	return NULL;
}

static void kill_once(unsigned kill_after, const uint8_t *basebuf)
{
	struct report rep = {0, 0}, last = {0, 0};
	uint8_t *model = malloc(KILL_DISK);
	unsigned got = 0, opened = 0;
	int pfd[2], status;
	struct disk *d;
	pid_t pid;
	char name[32];

	/* Fresh chain for each run. */
	for (unsigned t = 0; t < ROUNDS; t++) {
		snprintf(name, sizeof(name), "T%u", t);
		unlink(P(name));
	}
	create_ok(P("T0"), P("base.img"), 0, 0);
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		child_writer(pfd[1]);
	}
	close(pfd[1]);
	while (got <= kill_after && read(pfd[0], &rep, sizeof(rep)) == sizeof(rep)) {
		last = rep;
		got++;
	}
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	close(pfd[0]);
	assert_true(got > 0);

	memcpy(model, basebuf, KILL_DISK);
	for (unsigned r = 0; r <= last.round; r++)
		apply_round(r, model, model_write, model_discard);
	d = reopen_after_kill(last.top, &opened);
	/* Every flushed round is intact, byte for byte. */
	compare(d, model, 0, (uint64_t)(last.round + 1) * REGION, last.round);
	/* And the recovered top takes writes again. */
	apply_round(last.round, d, disk_write_fn, disk_discard_fn);
	assert_int_equal(disk_close(d), 0);
	snprintf(name, sizeof(name), "T%u", opened);
	d = open_ok(P(name));
	compare(d, model, 0, (uint64_t)(last.round + 1) * REGION, last.round);
	assert_int_equal(disk_close(d), 0);
	print_message("killed after round %u (child %s), reopened T%u\n", last.round,
		      WIFSIGNALED(status) ? "killed" : "had finished", opened);
	free(model);
}

static void test_sigkill_after_flush(void **state)
{
	uint8_t *basebuf = malloc(KILL_DISK);
	const unsigned when[] = {0, 2, 3, 7, 14, 22};

	rng_state = 42;
	fill_random(basebuf, KILL_DISK);
	make_base(P("base.img"), basebuf, KILL_DISK);
	for (size_t i = 0; i < ARRAY_SIZE(when); i++)
		kill_once(when[i], basebuf);
	free(basebuf);
}

/* A cluster freed by a discard that was never flushed is still named by the
 * map on disk: it must not be handed to another cluster before the flush,
 * or after a crash the discarded cluster would read someone else's data. */
static void test_unflushed_discard_no_reuse(void **state)
{
	const uint64_t c = 64 * KiB;
	uint8_t *old = malloc(c), *other = malloc(c), *got = malloc(c);
	struct disk *d;
	int status;
	pid_t pid;

	rng_state = 7;
	fill_random(old, c);
	fill_random(other, c);
	create_ok(P("top"), NULL, MiB, (uint32_t)c);
	d = open_ok(P("top"));
	assert_int_equal(disk_write(d, old, c, 0), 0);
	assert_int_equal(disk_flush(d), 0);
	assert_int_equal(disk_close(d), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Discard cluster 0, write cluster 5, die without flushing. */
		if (disk_open(&d, P("top"), 0, err, sizeof(err)) || disk_discard(d, 0, c) ||
		    disk_write(d, other, c, 5 * c))
			_exit(2);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	d = open_ok(P("top"));
	assert_int_equal(disk_read(d, got, c, 0), 0);
	assert_memory_not_equal(got, other, c);
	if (memcmp(got, old, c)) {
		memset(old, 0, c);
		assert_memory_equal(got, old, c); /* the discard may have landed */
	}
	assert_int_equal(disk_close(d), 0);
	free(old);
	free(other);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_model_64k_over_base, setup, teardown),
		cmocka_unit_test_setup_teardown(test_model_4k_over_base, setup, teardown),
		cmocka_unit_test_setup_teardown(test_model_16k_blank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sigkill_after_flush, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unflushed_discard_no_reuse, setup, teardown),
	};
	return cmocka_run_group_tests_name("disk_model", tests, NULL, NULL);
}
