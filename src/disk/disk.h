/* Layered copy-on-write disk: a read-only raw base image (or nothing) at the
 * bottom, delta files above it, reads falling through from the top, writes
 * going only to the top delta.  The on-disk format is in docs/disk-format.md.
 *
 *   base.img  <-  d1 (frozen)  <-  d2 (frozen)  <-  top (writable)
 *
 * Durability: a write or discard that returned 0 is durable once a later
 * disk_flush() (or disk_snapshot()/disk_close()) returned 0.  Until then a
 * crash may keep any subset of it.  After a failed flush the disk refuses
 * further writes (-EIO): the kernel may have dropped the dirty pages.
 *
 * Threads: reads (disk_read, disk_readv) of one struct disk may run in
 * several threads at once; every other call needs the disk to itself (the
 * virtio-blk I/O threads hold a read-write lock around them).  Different
 * struct disk objects, even over the same frozen layers, are independent.  Other processes are kept out
 * by flock(): the top is locked exclusively, lower layers shared.
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure.  Those that take (err, errlen) also write a one-line message the
 * CLI can show; err may be NULL. */
#ifndef KOSA8_DISK_H
#define KOSA8_DISK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define DISK_SECTOR_SIZE 512
#define DISK_DEFAULT_CLUSTER (64 * 1024)
#define DISK_ERR_LEN 512
/* Longest chain disk_open() follows: bounds file descriptors and recursion. */
#define DISK_MAX_LAYERS 256

struct disk;

/* disk_open() flags. */
#define DISK_RDONLY 0x1u /* open the top read-only (shared lock), writes get -EROFS */

struct disk_create_opts {
	uint64_t size;         /* virtual size in bytes, a multiple of 512; 0: the
	                          parent's size rounded up to 512 (needed without parent) */
	uint32_t cluster_size; /* power of two, 4 KiB..2 MiB; 0: the parent delta's, or 64 KiB */
};

/* Creates an empty delta at path (must not exist) over parent, which is a raw
 * image, a frozen delta, or NULL for a disk that starts all zeros.  The parent
 * is recorded by name if it sits in the same directory, by absolute path
 * otherwise, together with its size and identity.  opts may be NULL. */
int disk_create(const char *path, const char *parent, const struct disk_create_opts *opts,
		char *err, size_t errlen);

/* Marks a delta read-only for ever (header flag).  A no-op on a frozen
 * delta; -EBUSY if it is not frozen and some process has it open. */
int disk_freeze(const char *path, char *err, size_t errlen);

/* Opens the chain whose top is the delta at path.  Each parent is found
 * through the header and checked by size and identity; every layer below the
 * top must be frozen. */
int disk_open(struct disk **out, const char *top, unsigned flags, char *err, size_t errlen);

/* Flushes (when writable) and frees.  Returns the flush result. */
int disk_close(struct disk *d);

uint64_t disk_size(const struct disk *d);
unsigned disk_layer_count(const struct disk *d);
/* Resolved path of layer i, 0 being the bottom (the base image, if any) and
 * disk_layer_count()-1 the top; NULL if out of range.  Valid until
 * disk_close().  A checkpoint records the top's path before disk_snapshot():
 * that file is the frozen layer afterwards. */
const char *disk_layer_path(const struct disk *d, unsigned i);

/* Byte-granular I/O; the device will use 512-byte sectors.  A request that
 * does not fit inside the disk gets -ERANGE, a NULL buffer -EINVAL. */
int disk_read(struct disk *d, void *buf, size_t len, uint64_t off);
int disk_write(struct disk *d, const void *buf, size_t len, uint64_t off);
/* The same for a buffer in pieces (at most IOV_MAX), e.g. a virtqueue
 * chain: the bytes go to the disk back to back from off, and reach the
 * kernel as one preadv/pwritev per run of file-contiguous clusters. */
int disk_readv(struct disk *d, const struct iovec *iov, int iovcnt, uint64_t off);
int disk_writev(struct disk *d, const struct iovec *iov, int iovcnt, uint64_t off);
/* The range reads as zeros afterwards, whatever lower layers hold; whole
 * clusters of the top delta are freed (holes punched). */
int disk_discard(struct disk *d, uint64_t off, uint64_t len);
int disk_flush(struct disk *d);

/* Read from the headers alone, without locks (a running VMM holds its
 * layers locked), for a caller that settles what an interrupted or failed
 * checkpoint left: whether the delta at path is frozen, and whether the
 * delta at path sits directly on the delta at parent (by identity).
 * 1 yes, 0 no (not a delta counts as no), else -errno. */
int disk_is_frozen(const char *path);
int disk_is_over(const char *path, const char *parent);

/* Checkpoint: flushes, freezes the current top and continues on a new empty
 * delta at new_top above it.  Costs a constant number of small writes and
 * syncs, whatever the disk size or the data written. */
int disk_snapshot(struct disk *d, const char *new_top, char *err, size_t errlen);

/* The identity recorded for a raw base image: the first 16 bytes of the
 * SHA-256 of its contents, cached in "<path>" DISK_BASE_ID_SUFFIX and
 * recomputed when the file's size, mtime or ctime differ from the cached
 * ones (a jailed VMM must see that file too, or it hashes the whole image
 * on every start). */
#define DISK_BASE_ID_SUFFIX ".kosa8-id"
int disk_base_id(const char *path, uint8_t id[16], char *err, size_t errlen);
/* The same, calling p->fn with the bytes hashed so far (none when the
 * sidecar is valid); a non-zero return stops it with -ECANCELED. */
struct disk_hash_progress {
	int (*fn)(void *ctx, uint64_t done, uint64_t total);
	void *ctx;
};
int disk_base_id_progress(const char *path, uint8_t id[16], const struct disk_hash_progress *p,
			  char *err, size_t errlen);

/* Counters for tests and benchmarks (what the library asked of the kernel). */
struct disk_stats {
	uint64_t data_writes;       /* pwrite calls for data */
	uint64_t data_bytes;        /* bytes written as data */
	uint64_t map_writes;        /* pwrite calls for map sectors */
	uint64_t map_bytes;         /* map bytes written */
	uint64_t header_writes;     /* header rewrites (freeze) */
	uint64_t syncs;             /* fsync/fdatasync calls */
	uint64_t map_bytes_loaded;  /* map bytes read while opening layers */
	uint64_t clusters_alloc;    /* clusters given to the top delta */
	uint64_t copy_ups;          /* partial-cluster writes that read lower layers */
	uint64_t punches;           /* holes punched by discard */
};
void disk_get_stats(const struct disk *d, struct disk_stats *st);

#endif
