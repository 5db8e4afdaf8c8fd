/* Checkpoint files: the state file's format (docs/snapshot-format.md) and
 * the sparse guest-memory file.
 *
 * A checkpoint is a directory holding two files:
 *   state    header + checksummed sections (vCPUs, irqchip, PIT, clock,
 *            devices, disk chain, memory description), written last
 *   memory   guest RAM as one sparse file, zero pages left as holes
 * The directory is built under a temporary name and renamed into place
 * after everything in it was fsync'ed, so a crash or kill in the middle of
 * a checkpoint leaves earlier checkpoints, and no half-written one, behind.
 *
 * The parser takes bytes from a file anyone may have edited: it checks
 * every length against the buffer before reading, and says what is wrong
 * in one line (err).  It is fuzzed by fuzz/fuzz_snapshot.c. */
#ifndef KOSA8_SNAPSHOT_H
#define KOSA8_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/guest_mem.h"

#define SNAP_MAGIC "KOSA8SNP"
#define SNAP_MAGIC_LEN 8
#define SNAP_VERSION 2               /* 2: memory layers; version 1 files still load */
#define SNAP_HEADER_LEN 72
#define SNAP_SECTION_HDR_LEN 16
#define SNAP_FP_LEN 32              /* CPU feature fingerprint: SHA-256 */
#define SNAP_MAX_SECTION (16u << 20) /* bounds what a bad length can make us do */
#define SNAP_MAX_SECTIONS 4096
#define SNAP_MAX_FILE (64u << 20)
#define SNAP_MAX_CPUS 254
#define SNAP_ERR_LEN 256

#define SNAP_STATE_FILE "state"
#define SNAP_MEMORY_FILE "memory"

/* Section tags.  Accelerator records (accel.h) keep their own tag in the
 * low byte: per-vCPU ones (index = vCPU id) under SNAP_SEC_VCPU, per-VM
 * ones (index 0) under SNAP_SEC_VM. */
enum snap_tag {
	SNAP_SEC_VCPU = 0x1000,      /* | accel tag */
	SNAP_SEC_VM = 0x2000,        /* | accel tag */
	SNAP_SEC_SERIAL = 0x3001,    /* struct serial8250_state */
	SNAP_SEC_RNG = 0x3002,       /* struct virtio_mmio_state */
	SNAP_SEC_BLK = 0x3003,       /* struct virtio_mmio_state */
	SNAP_SEC_VSOCK = 0x3004,     /* struct virtio_vsock_state */
	SNAP_SEC_PL011 = 0x3005,     /* arm64: struct pl011_state */
	SNAP_SEC_DISK = 0x4001,      /* disk chain: layer paths, bottom first, '\n' after each */
	SNAP_SEC_MEMORY = 0x4002,    /* struct snap_memory_desc */
	SNAP_SEC_MEMORY_PARENT = 0x4003, /* layers: parent's memory id (16) + its directory's name */
	SNAP_SEC_MEMORY_PAGES = 0x4004,  /* layers: one bit per page, set for pages the layer holds */
	SNAP_SEC_END = 0xffff,       /* last, empty */
};

/* The architecture whose VM a checkpoint holds (header field at offset
 * 64, 0 in every file written before arm64 existed).  Its records are that
 * architecture's; a VMM built for another refuses the checkpoint. */
enum snap_arch {
	SNAP_ARCH_X86_64 = 0,
	SNAP_ARCH_ARM64 = 1,
};
#if defined(__aarch64__)
#define SNAP_ARCH_HOST SNAP_ARCH_ARM64
#else
#define SNAP_ARCH_HOST SNAP_ARCH_X86_64
#endif

struct snap_header {
	uint32_t version;
	uint32_t arch;           /* enum snap_arch */
	uint32_t ncpus;
	uint64_t mem_size;
	uint8_t cpu_fp[SNAP_FP_LEN];
};

/* The memory file as the state file describes it (little-endian on disk).
 *
 * A full memory file holds all of RAM.  A layer (SNAP_MEM_LAYER) holds only
 * the pages written since its parent checkpoint, which is a sibling
 * directory named in SNAP_SEC_MEMORY_PARENT; SNAP_SEC_MEMORY_PAGES says which
 * pages the layer holds (a held page that is a hole in the file is zero).
 * RAM is the bottom full file with each layer above it laid over it in turn
 * (snapshot_mem.h). */
#define SNAP_MEM_LAYER 1u
#define SNAP_MAX_MEM_DEPTH 16        /* layers above a full file; the next checkpoint is full */
#define SNAP_MEM_ID_LEN 16
#define SNAP_MAX_PARENT_NAME 255
struct snap_memory_desc {
	uint64_t size;           /* bytes, equal to the header's mem_size */
	uint64_t data_bytes;     /* bytes written (not holes), informational */
	uint32_t page_size;      /* granularity of the holes */
	uint32_t flags;          /* SNAP_MEM_LAYER or 0 */
	uint32_t depth;          /* 0 for a full file, parent's depth + 1 for a layer */
	uint8_t id[SNAP_MEM_ID_LEN]; /* names this memory view (all zero in version 1) */
};
#define SNAP_MEMORY_DESC_V1_LEN 24
#define SNAP_MEMORY_DESC_LEN 48

struct snap_section {
	uint32_t tag, index, len;
	const uint8_t *data;     /* points into the parsed buffer */
};

struct snapshot {
	struct snap_header h;
	uint32_t nsections;      /* END not counted */
	struct snap_section *secs;
};

/* Parses and checks a whole state file: magic, version, header checksum,
 * every section's checksum and bounds, the END section, no trailing bytes,
 * and the mandatory sections (each vCPU's registers, the VM's, memory).
 * out->secs points into buf, which must outlive it. */
int snapshot_parse(const uint8_t *buf, size_t len, struct snapshot *out, char *err,
		   size_t errlen);
void snapshot_free(struct snapshot *s);
const struct snap_section *snapshot_find(const struct snapshot *s, uint32_t tag, uint32_t index);

/* "x86-64", "arm64", or "unknown". */
const char *snapshot_arch_name(uint32_t arch);
/* Whether this build's VMM can restore a checkpoint of h's architecture;
 * if not, err says whose it is and where it can run (-ENOEXEC). */
int snapshot_check_arch(const struct snap_header *h, char *err, size_t errlen);

/* Reads DIR/state and parses it (the buffer is returned for the sections). */
int snapshot_load(const char *dir, uint8_t **buf, struct snapshot *out, char *err,
		  size_t errlen);

/* Decodes the disk chain section into up to max layer paths (pointers into
 * storage, which must hold len+1 bytes).  Returns the count or -EINVAL. */
int snapshot_disk_chain(const struct snap_section *sec, char *storage, size_t storage_len,
			const char **paths, int max);
int snapshot_memory_desc(const struct snap_section *sec, struct snap_memory_desc *out);
/* A layer's parent: its memory id and directory name (a plain name, no '/',
 * not "." or ".."; name holds SNAP_MAX_PARENT_NAME + 1).  -EINVAL if bad. */
bool snapshot_name_ok(const char *name);
int snapshot_memory_parent(const struct snapshot *s, uint8_t id[SNAP_MEM_ID_LEN], char *name);
/* A layer's page map as words of 64 pages each (bit i of word w is page
 * 64w + i), malloc'd into *pages; -EINVAL if missing or the wrong size. */
int snapshot_memory_pages(const struct snapshot *s, uint64_t **pages);
/* Calls fn for each run [first, end) of set bits among npages of such a
 * page map. */
void snapshot_page_runs(const uint64_t *bits, uint64_t npages,
			void (*fn)(uint64_t first, uint64_t end, void *arg), void *arg);

/* Builds a state file in memory.  Errors stick: check snap_writer_finish. */
struct snap_writer {
	uint8_t *buf;
	size_t len, cap;
	uint32_t nsections;
	int err;
};

void snap_writer_init(struct snap_writer *w, const struct snap_header *h);
void snap_writer_add(struct snap_writer *w, uint32_t tag, uint32_t index, const void *data,
		     size_t len);
/* Appends END and seals the header.  Returns 0 or the first error. */
int snap_writer_finish(struct snap_writer *w);
void snap_writer_free(struct snap_writer *w);

void snap_memory_desc_encode(const struct snap_memory_desc *d, uint8_t out[SNAP_MEMORY_DESC_LEN]);

/* Writes len bytes to a new file at path (O_EXCL) and fsyncs it. */
int snapshot_write_new_file(const char *path, const void *buf, size_t len);

/* Writes guest RAM to a new sparse file at path: pages of zeros become
 * holes.  For a memfd only the ranges the kernel reports as data are read
 * (SEEK_DATA), so untouched RAM costs nothing.  Sets *data_bytes. */
int snapshot_write_memory(const char *path, const struct guest_mem *m, uint64_t *data_bytes);

/* The same for a live fork's frozen memfd (guest_mem_freeze), read
 * through a mapping of its own while the VM runs on.  Sets *data_bytes. */
int snapshot_write_frozen(const char *path, int fd, uint64_t size, uint64_t *data_bytes);
/* Copies RAM that is a private view (m->from_file) into fd, a RAM-sized
 * file, page for page: only the pages that can hold data are written. */
int snapshot_copy_private(int fd, const struct guest_mem *m, uint64_t *data_bytes);
/* Bytes of a memfd the kernel holds data for (SEEK_DATA): what a full
 * memory file of it takes at most, known without reading it. */
uint64_t snapshot_memfd_data_bytes(int fd, uint64_t size);

/* Writes a memory layer to a new sparse file at path: of the pages set in
 * pages (one bit per page of RAM), those holding data; the rest are holes
 * (a held page that is a hole reads as zero).  Sets *data_bytes. */
int snapshot_write_memory_layer(const char *path, const struct guest_mem *m,
				const uint64_t *pages, uint64_t *data_bytes);
/* Adds a layer's page map section (SNAP_SEC_MEMORY_PAGES). */
void snapshot_add_pages(struct snap_writer *w, const uint64_t *pages, uint64_t npages);

/* Opens /proc/self/pagemap for later checkpoints of a restored VM, before
 * a jail without /proc is entered. */
int snapshot_preopen_pagemap(void);

/* Puts a message in err (if any) and returns code: the one error style of
 * the checkpoint code. */
int snap_fail(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* fsync of a directory (after creating or renaming entries in it). */
int snapshot_fsync_dir(const char *dir);

#endif
