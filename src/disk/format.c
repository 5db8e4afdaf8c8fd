/* Encoding and validation of delta headers and map sectors.  Every byte of
 * the input is untrusted (a delta may be truncated, corrupt, or anything at
 * all): decoding checks before it uses, and the fuzz target fuzz_disk.c
 * drives it. */
#include "disk/format.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

/* Fuzzing builds accept wrong checksums, so that the fuzzer reaches the
 * checks behind them; production builds never define this. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define CRC_BAD(stored, computed) ((void)(stored), (void)(computed), false)
#else
#define CRC_BAD(stored, computed) ((stored) != (computed))
#endif

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum ext4
 * and iSCSI use, good at catching burst errors in small blocks. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
		crc_table[i] = c;
	}
}

uint32_t disk_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	pthread_once(&crc_once, crc_init);
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

void disk_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	log_debug("disk: %s", err);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* Byte offsets in the header core. */
enum {
	H_MAGIC = 0, H_VERSION = 8, H_HDR_SIZE = 12, H_FLAGS = 16, H_CLUSTER_BITS = 20,
	H_SIZE = 24, H_UUID = 32, H_PARENT_KIND = 48, H_PATH_LEN = 52,
	H_PARENT_SIZE = 56, H_PARENT_ID = 64, H_MAP_OFFSET = 80, H_MAP_SECTORS = 88,
	H_DATA_OFFSET = 96, H_PATH_CRC = 104, H_RESERVED = 108, H_CRC = 508,
};

void disk_header_layout(struct disk_header *h)
{
	uint64_t csz = 1ULL << h->cluster_bits;
	uint64_t map_end;

	h->map_sectors = (disk_header_clusters(h) + DISK_MAP_PER_SECTOR - 1) / DISK_MAP_PER_SECTOR;
	map_end = DISK_MAP_OFFSET + h->map_sectors * DISK_MAP_SECTOR;
	h->data_offset = (map_end + csz - 1) & ~(csz - 1);
}

void disk_header_encode(const struct disk_header *h, uint8_t out[DISK_HDR_SIZE])
{
	memset(out, 0, DISK_HDR_SIZE);
	memcpy(out + H_MAGIC, DISK_MAGIC, DISK_MAGIC_LEN);
	put32(out + H_VERSION, h->version);
	put32(out + H_HDR_SIZE, DISK_HDR_SIZE);
	put32(out + H_FLAGS, h->flags);
	put32(out + H_CLUSTER_BITS, h->cluster_bits);
	put64(out + H_SIZE, h->size);
	memcpy(out + H_UUID, h->uuid, 16);
	put32(out + H_PARENT_KIND, h->parent_kind);
	put32(out + H_PATH_LEN, h->parent_path_len);
	put64(out + H_PARENT_SIZE, h->parent_size);
	memcpy(out + H_PARENT_ID, h->parent_id, 16);
	put64(out + H_MAP_OFFSET, DISK_MAP_OFFSET);
	put64(out + H_MAP_SECTORS, h->map_sectors);
	put64(out + H_DATA_OFFSET, h->data_offset);
	memcpy(out + DISK_HDR_CORE, h->parent_path, h->parent_path_len);
	put32(out + H_PATH_CRC, disk_crc32c(0, out + DISK_HDR_CORE, DISK_PATH_AREA));
	put32(out + H_CRC, disk_crc32c(0, out, H_CRC));
}

bool disk_is_delta(const uint8_t *buf, size_t len)
{
	return len >= DISK_MAGIC_LEN && !memcmp(buf, DISK_MAGIC, DISK_MAGIC_LEN);
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Geometry: cluster size, virtual size and the derived layout fields. */
static int check_geometry(const uint8_t *buf, struct disk_header *h, char *err, size_t errlen)
{
	struct disk_header want;

	if (get32(buf + H_HDR_SIZE) != DISK_HDR_SIZE || get64(buf + H_MAP_OFFSET) != DISK_MAP_OFFSET) {
		disk_seterr(err, errlen, "bad header or map placement");
		return -EUCLEAN;
	}
	if (h->cluster_bits < DISK_MIN_CLUSTER_BITS || h->cluster_bits > DISK_MAX_CLUSTER_BITS) {
		disk_seterr(err, errlen, "bad cluster size 2^%u", h->cluster_bits);
		return -EUCLEAN;
	}
	if (!h->size || h->size % 512 || h->size > DISK_MAX_SIZE) {
		disk_seterr(err, errlen, "bad virtual size %llu", (unsigned long long)h->size);
		return -EUCLEAN;
	}
	want = *h;
	disk_header_layout(&want);
	if (want.map_sectors != h->map_sectors || want.data_offset != h->data_offset) {
		disk_seterr(err, errlen, "map geometry does not match the virtual size");
		return -EUCLEAN;
	}
	return 0;
}

static int check_parent(const uint8_t *buf, struct disk_header *h, char *err, size_t errlen)
{
	const uint8_t *area = buf + DISK_HDR_CORE;

	if (CRC_BAD(get32(buf + H_PATH_CRC), disk_crc32c(0, area, DISK_PATH_AREA))) {
		disk_seterr(err, errlen, "parent path checksum mismatch");
		return -EUCLEAN;
	}
	if (h->parent_kind > DISK_PARENT_DELTA) {
		disk_seterr(err, errlen, "unknown parent kind %u", h->parent_kind);
		return -EUCLEAN;
	}
	if (h->parent_kind == DISK_PARENT_NONE) {
		if (h->parent_path_len || h->parent_size || !all_zero(h->parent_id, 16)) {
			disk_seterr(err, errlen, "parent fields set without a parent");
			return -EUCLEAN;
		}
	} else if (!h->parent_path_len || h->parent_path_len > DISK_PATH_MAX ||
		   memchr(area, 0, h->parent_path_len) || h->parent_size > h->size) {
		disk_seterr(err, errlen, "bad parent path or size");
		return -EUCLEAN;
	}
	if (!all_zero(area + h->parent_path_len, DISK_PATH_AREA - h->parent_path_len)) {
		disk_seterr(err, errlen, "garbage after the parent path");
		return -EUCLEAN;
	}
	memcpy(h->parent_path, area, h->parent_path_len);
	h->parent_path[h->parent_path_len] = '\0';
	return 0;
}

int disk_header_decode(const uint8_t *buf, size_t len, struct disk_header *h,
		       char *err, size_t errlen)
{
	int rc;

	memset(h, 0, sizeof(*h));
	if (!disk_is_delta(buf, len)) {
		disk_seterr(err, errlen, "not a kosa8 delta (bad magic)");
		return -EINVAL;
	}
	if (len < DISK_HDR_SIZE) {
		disk_seterr(err, errlen, "truncated header (%zu of %u bytes)", len, DISK_HDR_SIZE);
		return -EUCLEAN;
	}
	h->version = get32(buf + H_VERSION);
	if (h->version != DISK_VERSION) {
		disk_seterr(err, errlen, "format version %u, this kosa8 reads version %u",
			    h->version, DISK_VERSION);
		return -ENOTSUP;
	}
	if (CRC_BAD(get32(buf + H_CRC), disk_crc32c(0, buf, H_CRC))) {
		disk_seterr(err, errlen, "header checksum mismatch");
		return -EUCLEAN;
	}
	h->flags = get32(buf + H_FLAGS);
	if (h->flags & ~DISK_FLAGS_KNOWN) {
		disk_seterr(err, errlen, "unknown header flags 0x%x", h->flags & ~DISK_FLAGS_KNOWN);
		return -ENOTSUP;
	}
	if (!all_zero(buf + H_RESERVED, H_CRC - H_RESERVED)) {
		disk_seterr(err, errlen, "reserved header bytes are not zero");
		return -EUCLEAN;
	}
	h->cluster_bits = get32(buf + H_CLUSTER_BITS);
	h->size = get64(buf + H_SIZE);
	h->map_sectors = get64(buf + H_MAP_SECTORS);
	h->data_offset = get64(buf + H_DATA_OFFSET);
	memcpy(h->uuid, buf + H_UUID, 16);
	h->parent_kind = get32(buf + H_PARENT_KIND);
	h->parent_path_len = get32(buf + H_PATH_LEN);
	h->parent_size = get64(buf + H_PARENT_SIZE);
	memcpy(h->parent_id, buf + H_PARENT_ID, 16);
	rc = check_geometry(buf, h, err, errlen);
	if (!rc)
		rc = check_parent(buf, h, err, errlen);
	return rc;
}

void disk_map_encode(const struct disk_header *h, uint64_t idx,
		     const uint64_t ents[DISK_MAP_PER_SECTOR], uint8_t out[DISK_MAP_SECTOR])
{
	for (unsigned i = 0; i < DISK_MAP_PER_SECTOR; i++)
		put64(out + 8 * i, ents[i]);
	put32(out + 504, (uint32_t)idx);
	put32(out + 508, disk_crc32c(disk_crc32c(0, h->uuid, 16), out, 508));
}

static int check_entry(const struct disk_header *h, uint64_t cluster, uint64_t e,
		       uint64_t file_size, char *err, size_t errlen)
{
	uint64_t csz = 1ULL << h->cluster_bits;
	uint64_t off = DISK_ENT_OFFSET(e);

	if (e == DISK_ENT_ABSENT)
		return 0;
	if (cluster >= disk_header_clusters(h)) {
		disk_seterr(err, errlen, "map entry for cluster %llu past the end of the disk",
			    (unsigned long long)cluster);
		return -EUCLEAN;
	}
	if (e == DISK_ENT_ZERO)
		return 0;
	if (!DISK_ENT_IS_PRESENT(e) || off % csz || off < h->data_offset ||
	    off > file_size || file_size - off < csz) {
		disk_seterr(err, errlen, "map entry for cluster %llu is invalid or past the end of the file",
			    (unsigned long long)cluster);
		return -EUCLEAN;
	}
	return 0;
}

int disk_map_decode(const struct disk_header *h, uint64_t idx, const uint8_t in[DISK_MAP_SECTOR],
		    uint64_t file_size, uint64_t ents[DISK_MAP_PER_SECTOR],
		    char *err, size_t errlen)
{
	uint32_t crc;
	int rc;

	if (all_zero(in, DISK_MAP_SECTOR))
		return 0;
	crc = disk_crc32c(disk_crc32c(0, h->uuid, 16), in, 508);
	if (CRC_BAD(get32(in + 508), crc) || get32(in + 504) != (uint32_t)idx) {
		disk_seterr(err, errlen, "map sector %llu is corrupt (checksum or index mismatch)",
			    (unsigned long long)idx);
		return -EUCLEAN;
	}
	for (unsigned i = 0; i < DISK_MAP_PER_SECTOR; i++) {
		ents[i] = get64(in + 8 * i);
		rc = check_entry(h, idx * DISK_MAP_PER_SECTOR + i, ents[i], file_size, err, errlen);
		if (rc)
			return rc;
	}
	return 1;
}
