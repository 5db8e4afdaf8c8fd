/* One layer of a disk chain: a raw base image or a delta file with its map
 * held in memory.  Private to src/disk/ (and its tests and fuzz target). */
#ifndef KOSA8_DISK_LAYER_H
#define KOSA8_DISK_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "disk/disk.h"
#include "disk/format.h"

/* The in-memory map is two-level and sparse, so that an empty delta over a
 * 64 GiB disk costs a few hundred bytes: a directory of groups, a group of
 * sector pointers, a sector of 63 entries (the on-disk sector, decoded). */
#define DISK_GROUP_SECTORS 512u

struct disk_map_sec {
	uint64_t e[DISK_MAP_PER_SECTOR];
	bool dirty;
};

struct disk_offlist {
	uint64_t *v;
	size_t n, cap;
};

struct disk_layer {
	int fd;
	char *path;        /* absolute, resolved */
	bool raw;          /* raw base image: no header, no map */
	bool writable;     /* the top of a writable chain */
	uint64_t file_size;
	struct disk_header h;
	uint64_t ngroups;
	struct disk_map_sec ***dir;
	/* Writable top only. */
	struct disk_offlist dirty;   /* sector indices to write at the next flush */
	struct disk_offlist free;    /* file offsets of clusters free for reuse now */
	struct disk_offlist pending; /* freed since the last flush: reusable after it */
	uint64_t next_alloc;         /* where the file grows */
};

/* Opens path as a layer: a delta (header and map validated), or, if
 * allow_raw, any regular file as a raw image.  Takes an flock (exclusive if
 * writable, else shared; -EBUSY if someone holds a conflicting one). */
int disk_layer_open(struct disk_layer **out, const char *path, bool writable, bool allow_raw,
		    struct disk_stats *st, char *err, size_t errlen);
/* The same on an already open descriptor (taken over, closed on failure by
 * the caller), without locking; name is for messages only. */
int disk_layer_open_fd(struct disk_layer **out, int fd, const char *name, bool writable,
		       bool allow_raw, struct disk_stats *st, char *err, size_t errlen);
void disk_layer_free(struct disk_layer *l);

static inline uint64_t disk_layer_csz(const struct disk_layer *l)
{
	return 1ULL << l->h.cluster_bits;
}

uint64_t disk_layer_get(const struct disk_layer *l, uint64_t cluster);
int disk_layer_set(struct disk_layer *l, uint64_t cluster, uint64_t ent);

/* Cluster allocation in the top's file.  release(now=true) is for a cluster
 * that no durable map ever referenced; otherwise it waits for the next flush. */
int disk_layer_alloc(struct disk_layer *l, uint64_t *off);
int disk_layer_release(struct disk_layer *l, uint64_t off, bool now);
/* Writes the dirty map sectors (the caller syncs before and after). */
int disk_layer_write_map(struct disk_layer *l, struct disk_stats *st);
/* After a flush made the map durable, freed clusters become reusable. */
int disk_layer_commit_frees(struct disk_layer *l);

/* Pieces per preadv/pwritev (Linux's IOV_MAX) and new clusters per run. */
#define DISK_RUN_IOV 1024
#define DISK_RUN_MAP 256

/* Bytes waiting to go to the top in one pwritev, and the new mappings that
 * enter the map only once it succeeded. */
struct disk_run {
	uint64_t foff;
	uint64_t len;
	int niov;
	unsigned nmap;
	struct iovec iov[DISK_RUN_IOV];
	uint64_t cluster[DISK_RUN_MAP];
	uint64_t off[DISK_RUN_MAP];
};

struct disk {
	struct disk_layer *layers[DISK_MAX_LAYERS]; /* [0] is the bottom */
	unsigned n;
	bool writable;
	bool broken;   /* a sync failed: the kernel may have dropped dirty pages */
	bool unsynced; /* data written or holes punched since the last sync */
	uint8_t *bounce; /* one cluster, for copy-up */
	uint8_t *zeros;  /* one cluster of zeros, for partial discards */
	struct disk_stats st;
	struct disk_run run;
};

static inline struct disk_layer *disk_top(const struct disk *d)
{
	return d->layers[d->n - 1];
}

/* A disk made of l alone (taken over), its parent ignored: reads below it
 * are zeros.  For the fuzz target and tests of a single file. */
int disk_open_layer_alone(struct disk **out, struct disk_layer *l);

int disk_base_id_fd(int fd, const char *path, const struct stat *st, uint8_t id[16],
		    char *err, size_t errlen);

int disk_pread_full(int fd, void *buf, size_t len, uint64_t off);
int disk_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

#endif
