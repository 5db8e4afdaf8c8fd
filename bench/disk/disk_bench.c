/* Sequential 1 MiB writes and reads through the layered disk, side by side
 * with plain pwrite/pread on a file in the same folder, in the same run.
 *
 *   disk_bench [DIR] [SIZE_MIB] [REPEATS]
 *
 * Each case is run REPEATS times, interleaved with the others; the median is
 * printed.  Writes are measured twice: ending with a flush (fdatasync, in the
 * time: mostly the storage under the VM), and into the page cache only (the
 * library's own cost shows).
 * Reads are measured with the page cache hot (the library's own cost shows)
 * and with the file's pages dropped (POSIX_FADV_DONTNEED, this file only),
 * after one unmeasured pass of the same kind. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/util.h"
#include "disk/disk.h"

#define CHUNK (1u << 20)
#define MAX_REP 15

static char dir[512];
static uint64_t size;
static uint8_t *buf;
/* 1 MiB as 256 guest pages that are not next to each other in memory, as a
 * virtqueue chain hands them over. */
#define PAGES (CHUNK / 4096)
static uint8_t *scatter;
static struct iovec pages[PAGES];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "disk_bench: %s: %s\n", what, strerror(rc < 0 ? -rc : rc));
	exit(1);
}

static const char *path(const char *name)
{
	static char p[4][1024];
	static int i;
	char *b = p[i++ % 4];
	snprintf(b, sizeof(p[0]), "%s/%s", dir, name);
	return b;
}

static void drop_cache(const char *name)
{
	int fd = open(path(name), O_RDONLY);
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

/* ---- plain file ---- */

static bool sync_writes = true;

static double raw_write(bool fresh)
{
	int fd;
	double t0;

	if (fresh)
		unlink(path("raw.img"));
	fd = open(path("raw.img"), O_RDWR | O_CREAT, 0600);
	if (fd < 0)
		die("raw open", errno);
	/* As disk_create does before the disk's timed part: commit the
	 * unlink of the old file (freeing its blocks) outside the timing. */
	if (fresh && fsync(fd))
		die("fsync", errno);
	t0 = now();
	for (uint64_t off = 0; off < size; off += CHUNK)
		if (pwrite(fd, buf, CHUNK, (off_t)off) != CHUNK)
			die("pwrite", errno);
	if (sync_writes && fdatasync(fd))
		die("fdatasync", errno);
	t0 = now() - t0;
	close(fd);
	return t0;
}

static double raw_read(bool cold)
{
	int fd;
	double t0;

	if (cold)
		drop_cache("raw.img");
	fd = open(path("raw.img"), O_RDONLY);
	t0 = now();
	for (uint64_t off = 0; off < size; off += CHUNK)
		if (pread(fd, buf, CHUNK, (off_t)off) != CHUNK)
			die("pread", errno);
	t0 = now() - t0;
	close(fd);
	return t0;
}

/* ---- layered disk ---- */

static struct disk *open_disk(const char *name)
{
	char err[DISK_ERR_LEN];
	struct disk *d;
	int rc = disk_open(&d, path(name), 0, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "disk_bench: %s\n", err);
		exit(1);
	}
	return d;
}

static double disk_seq_write(const char *name, bool fresh)
{
	struct disk_create_opts o = {.size = size};
	char err[DISK_ERR_LEN];
	struct disk *d;
	double t0;
	int rc;

	if (fresh) {
		unlink(path(name));
		rc = disk_create(path(name), NULL, &o, err, sizeof(err));
		if (rc)
			die(err, rc);
	}
	d = open_disk(name);
	t0 = now();
	for (uint64_t off = 0; off < size; off += CHUNK)
		if ((rc = disk_write(d, buf, CHUNK, off)))
			die("disk_write", rc);
	if (sync_writes && (rc = disk_flush(d)))
		die("disk_flush", rc);
	t0 = now() - t0;
	if ((rc = disk_close(d)))
		die("disk_close", rc);
	return t0;
}

static double disk_seq_read(const char *name, const char *cached_file)
{
	struct disk *d;
	double t0;
	int rc;

	if (cached_file)
		drop_cache(cached_file);
	d = open_disk(name);
	t0 = now();
	for (uint64_t off = 0; off < size; off += CHUNK)
		if ((rc = disk_read(d, buf, CHUNK, off)))
			die("disk_read", rc);
	t0 = now() - t0;
	disk_close(d);
	return t0;
}

/* Page-cache-only overwrites and hot reads in 4 KiB pieces: plain
 * pwritev/preadv, the disk's vectored calls, and one disk call per piece. */
enum piece_mode { PLAIN_V, DISK_V, DISK_EACH };

static double pieces(enum piece_mode m, bool write)
{
	struct disk *d = m == PLAIN_V ? NULL : open_disk("delta");
	int fd = m == PLAIN_V ? open(path("raw.img"), O_RDWR) : -1;
	double t0 = now();
	int rc = 0;

	for (uint64_t off = 0; off < size && !rc; off += CHUNK) {
		if (m == PLAIN_V)
			rc = (write ? pwritev(fd, pages, PAGES, (off_t)off)
				    : preadv(fd, pages, PAGES, (off_t)off)) == CHUNK ? 0 : -EIO;
		else if (m == DISK_V)
			rc = write ? disk_writev(d, pages, PAGES, off) : disk_readv(d, pages, PAGES, off);
		for (unsigned i = 0; m == DISK_EACH && i < PAGES && !rc; i++)
			rc = write ? disk_write(d, pages[i].iov_base, 4096, off + 4096 * i)
				   : disk_read(d, pages[i].iov_base, 4096, off + 4096 * i);
	}
	t0 = now() - t0;
	if (rc)
		die("pieces", rc);
	if (fd >= 0)
		close(fd);
	if (d)
		disk_close(d);
	return t0;
}

/* Reads of a fresh delta over a raw base: every byte falls through. */
static void make_over_base(void)
{
	char err[DISK_ERR_LEN];
	int rc;

	unlink(path("over"));
	rc = disk_create(path("over"), path("raw.img"), NULL, err, sizeof(err));
	if (rc)
		die(err, rc);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[n / 2];
}

enum {
	RAW_W_NEW, DISK_W_NEW, RAW_W_OVER, DISK_W_OVER,
	RAW_C_NEW, DISK_C_NEW, RAW_C_OVER, DISK_C_OVER,
	RAW_R_HOT, DISK_R_HOT, DISK_R_BASE_HOT, RAW_R_COLD, DISK_R_COLD, DISK_R_BASE_COLD,
	RAW_PW, DISK_PW, EACH_PW, RAW_PR, DISK_PR, EACH_PR, NCASES
};
static const char *const names[NCASES] = {
	"plain file: write a new file + fdatasync",
	"disk: write new clusters of a new delta + flush",
	"plain file: overwrite in place + fdatasync",
	"disk: overwrite clusters of the top in place + flush",
	"plain file: write a new file, page cache only (no sync)",
	"disk: write new clusters of a new delta, page cache only (no flush)",
	"plain file: overwrite in place, page cache only (no sync)",
	"disk: overwrite clusters in place, page cache only (no flush)",
	"plain file: read, page cache hot",
	"disk: read the top delta, page cache hot",
	"disk: read through an empty delta to a raw base, page cache hot",
	"plain file: read, page cache dropped",
	"disk: read the top delta, page cache dropped",
	"disk: read through an empty delta to a raw base, page cache dropped",
	"plain file: pwritev of 256 scattered 4 KiB pieces, in place, page cache only",
	"disk: disk_writev of the same pieces, in place, page cache only",
	"disk: one disk_write per 4 KiB piece, in place, page cache only",
	"plain file: preadv of 256 scattered 4 KiB pieces, page cache hot",
	"disk: disk_readv of the same pieces, page cache hot",
	"disk: one disk_read per 4 KiB piece, page cache hot",
};
/* The plain-file case each one is compared with. */
static const int baseline[NCASES] = {
	RAW_W_NEW, RAW_W_NEW, RAW_W_OVER, RAW_W_OVER,
	RAW_C_NEW, RAW_C_NEW, RAW_C_OVER, RAW_C_OVER,
	RAW_R_HOT, RAW_R_HOT, RAW_R_HOT, RAW_R_COLD, RAW_R_COLD, RAW_R_COLD,
	RAW_PW, RAW_PW, RAW_PW, RAW_PR, RAW_PR, RAW_PR,
};

/* Pairs run in alternating order from round to round, so that neither side
 * always pays for the other's write-back; writes settle (syncfs and a
 * pause) before reads. */
static void pair(double t[NCASES][MAX_REP], int r, int a, double (*fa)(void), int b,
		 double (*fb)(void))
{
	if (r % 2) {
		t[b][r] = fb();
		t[a][r] = fa();
	} else {
		t[a][r] = fa();
		t[b][r] = fb();
	}
}

static double w_raw_new(void) { return raw_write(true); }
static double w_disk_new(void) { return disk_seq_write("delta", true); }
static double w_raw_over(void) { return raw_write(false); }
static double w_disk_over(void) { return disk_seq_write("delta", false); }
static double r_raw_hot(void) { raw_read(false); return raw_read(false); }
static double r_disk_hot(void) { disk_seq_read("delta", NULL); return disk_seq_read("delta", NULL); }
/* Under a VM, a read that misses the guest's page cache may still hit the
 * host's: one unmeasured pass first, so both sides start from the same place. */
static double r_raw_cold(void) { raw_read(true); return raw_read(true); }
static double r_disk_cold(void) { disk_seq_read("delta", "delta"); return disk_seq_read("delta", "delta"); }

static void settle(void)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd >= 0) {
		syncfs(fd);
		close(fd);
	}
	sleep(1);
}

static void one_round(double t[NCASES][MAX_REP], int r)
{
	pair(t, r, RAW_W_NEW, w_raw_new, DISK_W_NEW, w_disk_new);
	pair(t, r, RAW_W_OVER, w_raw_over, DISK_W_OVER, w_disk_over);
	sync_writes = false;
	settle();
	pair(t, r, RAW_C_NEW, w_raw_new, DISK_C_NEW, w_disk_new);
	settle();
	pair(t, r, RAW_C_OVER, w_raw_over, DISK_C_OVER, w_disk_over);
	sync_writes = true;
	make_over_base();
	settle();
	pair(t, r, RAW_R_HOT, r_raw_hot, DISK_R_HOT, r_disk_hot);
	t[DISK_R_BASE_HOT][r] = disk_seq_read("over", NULL);
	pair(t, r, RAW_R_COLD, r_raw_cold, DISK_R_COLD, r_disk_cold);
	disk_seq_read("over", "raw.img");
	t[DISK_R_BASE_COLD][r] = disk_seq_read("over", "raw.img");
	settle();
	pieces(PLAIN_V, false); /* warm both files */
	pieces(DISK_V, false);
	for (int k = 0; k < 3; k++) {
		int c = (k + r) % 3; /* rotate who goes first */
		t[RAW_PW + c][r] = pieces((enum piece_mode)c, true);
		t[RAW_PR + c][r] = pieces((enum piece_mode)c, false);
	}
}

int main(int argc, char **argv)
{
	double t[NCASES][MAX_REP];
	int reps;
	uint64_t mib;

	snprintf(dir, sizeof(dir), "%s", argc > 1 ? argv[1] : "/tmp");
	mib = argc > 2 ? strtoull(argv[2], NULL, 0) : 512;
	reps = argc > 3 ? atoi(argv[3]) : 5;
	if (reps < 1 || reps > MAX_REP || !mib)
		die("usage: disk_bench [DIR] [SIZE_MIB] [REPEATS<=15]", EINVAL);
	size = mib * MiB;
	buf = aligned_alloc(4096, CHUNK);
	scatter = aligned_alloc(4096, 2 * CHUNK);
	for (unsigned i = 0; i < CHUNK; i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	for (unsigned i = 0; i < PAGES; i++)
		pages[i] = (struct iovec){scatter + 8192 * i, 4096};
	memset(scatter, 0x3c, 2 * CHUNK);
	for (int r = 0; r < reps; r++)
		one_round(t, r);
	printf("%llu MiB in 1 MiB requests, median of %d runs, folder %s\n\n",
	       (unsigned long long)mib, reps, dir);
	printf("| case | MB/s | ratio to plain file |\n|---|---:|---:|\n");
	for (int c = 0; c < NCASES; c++) {
		double mbs = (double)size / 1e6 / median(t[c], reps);
		double base = (double)size / 1e6 / median(t[baseline[c]], reps);
		printf("| %s | %.0f | %.2f |\n", names[c], mbs, mbs / base);
	}
	unlink(path("raw.img"));
	unlink(path("raw.img.kosa8-id"));
	unlink(path("delta"));
	unlink(path("over"));
	return 0;
}
