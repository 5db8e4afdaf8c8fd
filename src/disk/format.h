/* On-disk format of a kosa8 delta file (docs/disk-format.md), and the pure
 * encode/decode functions for it.  Private to src/disk/ (and its tests and
 * fuzz target): nothing here touches a file descriptor.
 *
 *   [0, 512)        header core, CRC32C at 508
 *   [512, 4096)     parent path area, CRC32C in the core
 *   [4096, data)    map: 512-byte sectors of 63 entries, CRC32C each
 *   [data, ...)     clusters, cluster-aligned, file sparse */
#ifndef KOSA8_DISK_FORMAT_H
#define KOSA8_DISK_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DISK_MAGIC "KOSA8DLT"
#define DISK_MAGIC_LEN 8
#define DISK_VERSION 1
#define DISK_HDR_SIZE 4096u
#define DISK_HDR_CORE 512u
#define DISK_PATH_AREA (DISK_HDR_SIZE - DISK_HDR_CORE)
#define DISK_PATH_MAX (DISK_PATH_AREA - 1)
#define DISK_MAP_OFFSET 4096u
#define DISK_MAP_SECTOR 512u
#define DISK_MAP_PER_SECTOR 63u
#define DISK_MIN_CLUSTER_BITS 12u
#define DISK_MAX_CLUSTER_BITS 21u
/* ext4 cannot hold a bigger file with 4 KiB blocks; it also bounds the map. */
#define DISK_MAX_SIZE (16ULL << 40)

#define DISK_FLAG_FROZEN 0x1u
#define DISK_FLAGS_KNOWN DISK_FLAG_FROZEN

enum disk_parent_kind {
	DISK_PARENT_NONE = 0,
	DISK_PARENT_RAW = 1,
	DISK_PARENT_DELTA = 2,
};

/* Map entries.  A present entry is the cluster's file offset (cluster
 * aligned, so its low bits are free) with DISK_ENT_PRESENT in bit 1. */
#define DISK_ENT_ABSENT 0ULL
#define DISK_ENT_ZERO 1ULL
#define DISK_ENT_PRESENT 2ULL
#define DISK_ENT_IS_PRESENT(e) (((e) & 3ULL) == DISK_ENT_PRESENT)
#define DISK_ENT_OFFSET(e) ((e) & ~3ULL)

struct disk_header {
	uint32_t version;
	uint32_t flags;
	uint32_t cluster_bits;
	uint32_t parent_kind;
	uint64_t size;         /* virtual size */
	uint64_t parent_size;  /* raw: file size; delta: its virtual size */
	uint64_t map_sectors;
	uint64_t data_offset;
	uint8_t uuid[16];
	uint8_t parent_id[16]; /* raw: SHA-256 prefix of the contents; delta: its uuid */
	uint32_t parent_path_len;
	char parent_path[DISK_PATH_MAX + 1]; /* NUL-terminated */
};

uint32_t disk_crc32c(uint32_t crc, const void *buf, size_t len);

/* Fills the derived fields (map_sectors, data_offset) for size/cluster_bits. */
void disk_header_layout(struct disk_header *h);
static inline uint64_t disk_header_clusters(const struct disk_header *h)
{
	return (h->size + (1ULL << h->cluster_bits) - 1) >> h->cluster_bits;
}

void disk_header_encode(const struct disk_header *h, uint8_t out[DISK_HDR_SIZE]);
/* Validates every field and both checksums.  len is how many bytes the file
 * has (at most DISK_HDR_SIZE are looked at).  -EINVAL for a file that is not
 * a delta, -ENOTSUP for another version or unknown flags, -EUCLEAN for a
 * corrupt one; err says which. */
int disk_header_decode(const uint8_t *buf, size_t len, struct disk_header *h,
		       char *err, size_t errlen);

/* Map sector idx of a file with header h: 63 little-endian entries, the
 * sector index, CRC32C seeded with the file's uuid (a sector copied from
 * another delta does not pass).  An all-zero sector was never written. */
void disk_map_encode(const struct disk_header *h, uint64_t idx,
		     const uint64_t ents[DISK_MAP_PER_SECTOR], uint8_t out[DISK_MAP_SECTOR]);
/* Returns 1 if the sector holds entries (decoded into ents), 0 if it is all
 * zeros (never written), -EUCLEAN if it is corrupt.  Present offsets are
 * checked against data_offset and file_size. */
int disk_map_decode(const struct disk_header *h, uint64_t idx, const uint8_t in[DISK_MAP_SECTOR],
		    uint64_t file_size, uint64_t ents[DISK_MAP_PER_SECTOR],
		    char *err, size_t errlen);

bool disk_is_delta(const uint8_t *buf, size_t len);

void disk_seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
