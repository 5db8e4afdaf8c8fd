/* Checkpoint state file and memory file (snapshot.h, docs/snapshot-format.md). */
#include "vmm/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "disk/format.h"
#include "vmm/accel.h"

/* Header field offsets (docs/snapshot-format.md). */
#define H_VERSION 8
#define H_HEADER_LEN 12
#define H_NCPUS 16
#define H_NSECTIONS 20
#define H_MEM_SIZE 24
#define H_CPU_FP 32
#define H_ARCH 64
#define H_CRC 68

/* Fuzzing builds accept any checksum, so that the fuzzer gets past the
 * door to the parser behind it (the libFuzzer convention, fuzz/README.md). */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define CRC_BAD(stored, computed) ((void)(stored), (void)(computed), false)
#else
#define CRC_BAD(stored, computed) ((stored) != (computed))
#endif

#define PAGE 4096u
#define MEM_WRITE_CHUNK (1u << 20) /* one pwrite covers at most this much */

int snap_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* The section checksum covers its tag, index and length as well as the
 * data, so that a section cannot be relabelled without detection. */
static uint32_t section_crc(const uint8_t *hdr, const uint8_t *data, uint32_t len)
{
	return disk_crc32c(disk_crc32c(0, hdr, 12), data, len);
}

/* ---- writer ---- */

static void writer_reserve(struct snap_writer *w, size_t more)
{
	size_t cap;
	uint8_t *nb;

	if (w->err)
		return;
	if (more > SNAP_MAX_FILE - w->len) {
		w->err = -EFBIG;
		return;
	}
	if (w->len + more <= w->cap)
		return;
	cap = w->cap ? w->cap : 16384;
	while (cap < w->len + more)
		cap *= 2;
	nb = realloc(w->buf, cap);
	if (!nb) {
		w->err = -ENOMEM;
		return;
	}
	w->buf = nb;
	w->cap = cap;
}

void snap_writer_init(struct snap_writer *w, const struct snap_header *h)
{
	memset(w, 0, sizeof(*w));
	writer_reserve(w, SNAP_HEADER_LEN);
	if (w->err)
		return;
	memset(w->buf, 0, SNAP_HEADER_LEN);
	memcpy(w->buf, SNAP_MAGIC, SNAP_MAGIC_LEN);
	put_le32(w->buf + H_VERSION, SNAP_VERSION);
	put_le32(w->buf + H_HEADER_LEN, SNAP_HEADER_LEN);
	put_le32(w->buf + H_NCPUS, h->ncpus);
	put_le64(w->buf + H_MEM_SIZE, h->mem_size);
	memcpy(w->buf + H_CPU_FP, h->cpu_fp, SNAP_FP_LEN);
	put_le32(w->buf + H_ARCH, h->arch);
	w->len = SNAP_HEADER_LEN;
}

void snap_writer_add(struct snap_writer *w, uint32_t tag, uint32_t index, const void *data,
		     size_t len)
{
	size_t padded = ALIGN_UP(len, (size_t)8);
	uint8_t *h;

	if (!w->err && (len > SNAP_MAX_SECTION || w->nsections >= SNAP_MAX_SECTIONS))
		w->err = -EFBIG;
	writer_reserve(w, SNAP_SECTION_HDR_LEN + padded);
	if (w->err)
		return;
	h = w->buf + w->len;
	put_le32(h, tag);
	put_le32(h + 4, index);
	put_le32(h + 8, (uint32_t)len);
	if (len)
		memcpy(h + SNAP_SECTION_HDR_LEN, data, len);
	memset(h + SNAP_SECTION_HDR_LEN + len, 0, padded - len);
	put_le32(h + 12, section_crc(h, h + SNAP_SECTION_HDR_LEN, (uint32_t)len));
	w->len += SNAP_SECTION_HDR_LEN + padded;
	if (tag != SNAP_SEC_END)
		w->nsections++;
}

int snap_writer_finish(struct snap_writer *w)
{
	snap_writer_add(w, SNAP_SEC_END, 0, NULL, 0);
	if (w->err)
		return w->err;
	put_le32(w->buf + H_NSECTIONS, w->nsections);
	put_le32(w->buf + H_CRC, disk_crc32c(0, w->buf, H_CRC));
	return 0;
}

void snap_writer_free(struct snap_writer *w)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
}

void snap_memory_desc_encode(const struct snap_memory_desc *d, uint8_t out[SNAP_MEMORY_DESC_LEN])
{
	put_le64(out, d->size);
	put_le64(out + 8, d->data_bytes);
	put_le32(out + 16, d->page_size);
	put_le32(out + 20, d->flags);
	put_le32(out + 24, d->depth);
	put_le32(out + 28, 0);
	memcpy(out + 32, d->id, SNAP_MEM_ID_LEN);
}

/* ---- parser ---- */

static int parse_header(const uint8_t *buf, size_t len, struct snap_header *h,
			uint32_t *nsections, char *err, size_t errlen)
{
	uint32_t version;

	if (len < SNAP_MAGIC_LEN || memcmp(buf, SNAP_MAGIC, SNAP_MAGIC_LEN))
		return snap_fail(err, errlen, -EINVAL, "not a kosa8 checkpoint (bad magic)");
	if (len < SNAP_HEADER_LEN)
		return snap_fail(err, errlen, -EINVAL, "checkpoint state file is truncated (%zu bytes)", len);
	version = get_le32(buf + H_VERSION);
	if (version < 1 || version > SNAP_VERSION)
		return snap_fail(err, errlen, -EPROTO,
			    "checkpoint format version %u; this kosa8 reads versions 1 to %u", version,
			    SNAP_VERSION);
	if (CRC_BAD(get_le32(buf + H_CRC), disk_crc32c(0, buf, H_CRC)))
		return snap_fail(err, errlen, -EBADMSG, "checkpoint header checksum mismatch (corrupt file)");
	if (get_le32(buf + H_HEADER_LEN) != SNAP_HEADER_LEN)
		return snap_fail(err, errlen, -EINVAL, "checkpoint header has unknown fields");
	h->version = version;
	h->arch = get_le32(buf + H_ARCH);
	if (h->arch != SNAP_ARCH_X86_64 && h->arch != SNAP_ARCH_ARM64)
		return snap_fail(err, errlen, -EINVAL,
			    "checkpoint is of an unknown architecture (%u)", h->arch);
	h->ncpus = get_le32(buf + H_NCPUS);
	h->mem_size = get_le64(buf + H_MEM_SIZE);
	memcpy(h->cpu_fp, buf + H_CPU_FP, SNAP_FP_LEN);
	*nsections = get_le32(buf + H_NSECTIONS);
	if (h->ncpus < 1 || h->ncpus > SNAP_MAX_CPUS)
		return snap_fail(err, errlen, -EINVAL, "checkpoint has %u vCPUs (1..%d)", h->ncpus,
			    SNAP_MAX_CPUS);
	if (h->mem_size < PAGE || h->mem_size % PAGE)
		return snap_fail(err, errlen, -EINVAL, "checkpoint memory size is not a whole number of pages");
	if (*nsections > SNAP_MAX_SECTIONS)
		return snap_fail(err, errlen, -EINVAL, "checkpoint claims %u sections (at most %d)",
			    *nsections, SNAP_MAX_SECTIONS);
	return 0;
}

/* One section at buf[*off]; advances *off only when it is whole and sound. */
static int parse_section(const uint8_t *buf, size_t len, size_t *off, struct snap_section *s,
			 uint32_t n, char *err, size_t errlen)
{
	const uint8_t *h = buf + *off;
	size_t padded;

	if (len - *off < SNAP_SECTION_HDR_LEN)
		return snap_fail(err, errlen, -EINVAL, "checkpoint state file is truncated (section %u)", n);
	s->tag = get_le32(h);
	s->index = get_le32(h + 4);
	s->len = get_le32(h + 8);
	if (s->len > SNAP_MAX_SECTION)
		return snap_fail(err, errlen, -EINVAL, "checkpoint section %u is too large (%u bytes)", n,
			    s->len);
	padded = ALIGN_UP((size_t)s->len, (size_t)8);
	if (len - *off - SNAP_SECTION_HDR_LEN < padded)
		return snap_fail(err, errlen, -EINVAL, "checkpoint state file is truncated (section %u)", n);
	s->data = h + SNAP_SECTION_HDR_LEN;
	if (CRC_BAD(get_le32(h + 12), section_crc(h, s->data, s->len)))
		return snap_fail(err, errlen, -EBADMSG,
			    "checkpoint section %u (tag 0x%x) checksum mismatch (corrupt file)", n,
			    s->tag);
	for (size_t i = s->len; i < padded; i++)
		if (s->data[i])
			return snap_fail(err, errlen, -EINVAL, "checkpoint section %u has non-zero padding", n);
	*off += SNAP_SECTION_HDR_LEN + padded;
	return 0;
}

static const uint32_t x86_vcpu_required[] = {ACCEL_REC_MP_STATE, ACCEL_REC_REGS,
					     ACCEL_REC_SREGS, ACCEL_REC_LAPIC, 0};
static const uint32_t x86_vm_required[] = {ACCEL_REC_PIC_MASTER, ACCEL_REC_PIC_SLAVE,
					   ACCEL_REC_IOAPIC, ACCEL_REC_PIT, ACCEL_REC_CLOCK, 0};
static const uint32_t arm64_vcpu_required[] = {ACCEL_REC_MP_STATE, ACCEL_REC_ARM64_REGS,
					       ACCEL_REC_ARM64_GIC_CPU, 0};
static const uint32_t arm64_vm_required[] = {ACCEL_REC_ARM64_GIC_DIST, 0};

/* Sections every restore needs, checked here so that a loader never meets
 * a half checkpoint.  The records are the checkpoint's architecture's,
 * whichever this build is (a foreign one is refused by name later). */
static int check_required(const struct snapshot *s, char *err, size_t errlen)
{
	bool arm64 = s->h.arch == SNAP_ARCH_ARM64;
	const uint32_t *vcpu_required = arm64 ? arm64_vcpu_required : x86_vcpu_required;
	const uint32_t *vm_required = arm64 ? arm64_vm_required : x86_vm_required;
	struct snap_memory_desc md;

	for (uint32_t c = 0; c < s->h.ncpus; c++)
		for (size_t i = 0; vcpu_required[i]; i++)
			if (!snapshot_find(s, SNAP_SEC_VCPU | vcpu_required[i], c))
				return snap_fail(err, errlen, -EINVAL,
					    "checkpoint lacks vCPU %u's state (record %u)", c,
					    vcpu_required[i]);
	for (size_t i = 0; vm_required[i]; i++)
		if (!snapshot_find(s, SNAP_SEC_VM | vm_required[i], 0))
			return snap_fail(err, errlen, -EINVAL, "checkpoint lacks the VM's state (record %u)",
				    vm_required[i]);
	if (snapshot_memory_desc(snapshot_find(s, SNAP_SEC_MEMORY, 0), &md) < 0 ||
	    md.size != s->h.mem_size || (s->h.version < 2 && md.flags))
		return snap_fail(err, errlen, -EINVAL, "checkpoint's memory description is missing or wrong");
	if (md.flags & SNAP_MEM_LAYER) {
		uint8_t id[SNAP_MEM_ID_LEN];
		char name[SNAP_MAX_PARENT_NAME + 1];
		uint64_t *pages = NULL;
		int rc = snapshot_memory_parent(s, id, name);
		if (!rc)
			rc = snapshot_memory_pages(s, &pages);
		free(pages);
		if (rc)
			return snap_fail(err, errlen, -EINVAL,
				    "checkpoint's memory layer names no valid parent or page map");
	}
	return 0;
}

int snapshot_parse(const uint8_t *buf, size_t len, struct snapshot *out, char *err, size_t errlen)
{
	struct snap_section end;
	uint32_t n = 0;
	size_t off = SNAP_HEADER_LEN;
	int rc;

	memset(out, 0, sizeof(*out));
	if (len > SNAP_MAX_FILE)
		return snap_fail(err, errlen, -EFBIG, "checkpoint state file is too large");
	if ((rc = parse_header(buf, len, &out->h, &n, err, errlen)))
		return rc;
	out->secs = calloc(n ? n : 1, sizeof(*out->secs));
	if (!out->secs)
		return snap_fail(err, errlen, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		if ((rc = parse_section(buf, len, &off, &out->secs[i], i, err, errlen)))
			goto bad;
		if (out->secs[i].tag == SNAP_SEC_END) {
			rc = snap_fail(err, errlen, -EINVAL, "checkpoint ends after %u of %u sections", i, n);
			goto bad;
		}
		out->nsections = i + 1;
	}
	if ((rc = parse_section(buf, len, &off, &end, n, err, errlen)))
		goto bad;
	if (end.tag != SNAP_SEC_END || end.len != 0 || off != len) {
		rc = snap_fail(err, errlen, -EINVAL, "checkpoint has more data than its header says");
		goto bad;
	}
	if ((rc = check_required(out, err, errlen)))
		goto bad;
	return 0;
bad:
	snapshot_free(out);
	return rc;
}

void snapshot_free(struct snapshot *s)
{
	free(s->secs);
	memset(s, 0, sizeof(*s));
}

const struct snap_section *snapshot_find(const struct snapshot *s, uint32_t tag, uint32_t index)
{
	for (uint32_t i = 0; i < s->nsections; i++)
		if (s->secs[i].tag == tag && s->secs[i].index == index)
			return &s->secs[i];
	return NULL;
}

int snapshot_memory_desc(const struct snap_section *sec, struct snap_memory_desc *out)
{
	memset(out, 0, sizeof(*out));
	if (!sec || (sec->len != SNAP_MEMORY_DESC_LEN && sec->len != SNAP_MEMORY_DESC_V1_LEN))
		return -EINVAL;
	out->size = get_le64(sec->data);
	out->data_bytes = get_le64(sec->data + 8);
	out->page_size = get_le32(sec->data + 16);
	out->flags = get_le32(sec->data + 20);
	if (sec->len == SNAP_MEMORY_DESC_LEN) {
		out->depth = get_le32(sec->data + 24);
		if (get_le32(sec->data + 28))
			return -EINVAL;
		memcpy(out->id, sec->data + 32, SNAP_MEM_ID_LEN);
	}
	if (out->page_size != PAGE || (out->flags & ~SNAP_MEM_LAYER) || out->data_bytes > out->size)
		return -EINVAL;
	/* A layer sits on something; a full file on nothing. */
	if ((out->flags & SNAP_MEM_LAYER) ? (out->depth < 1 || out->depth > SNAP_MAX_MEM_DEPTH)
					  : out->depth != 0)
		return -EINVAL;
	return 0;
}

/* The parent is a sibling directory: a plain name, so that a layer can
 * never point outside the directory its checkpoints live in. */
static bool parent_name_ok(const uint8_t *p, size_t n)
{
	if (n < 1 || n > SNAP_MAX_PARENT_NAME || (n == 1 && p[0] == '.') ||
	    (n == 2 && p[0] == '.' && p[1] == '.'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
		      (p[i] >= '0' && p[i] <= '9') || p[i] == '.' || p[i] == '_' || p[i] == '-'))
			return false;
	return true;
}

bool snapshot_name_ok(const char *name)
{
	return parent_name_ok((const uint8_t *)name, strlen(name));
}

int snapshot_memory_parent(const struct snapshot *s, uint8_t id[SNAP_MEM_ID_LEN], char *name)
{
	const struct snap_section *sec = snapshot_find(s, SNAP_SEC_MEMORY_PARENT, 0);
	size_t n;

	if (!sec || sec->len <= SNAP_MEM_ID_LEN)
		return -EINVAL;
	n = sec->len - SNAP_MEM_ID_LEN;
	if (!parent_name_ok(sec->data + SNAP_MEM_ID_LEN, n))
		return -EINVAL;
	memcpy(id, sec->data, SNAP_MEM_ID_LEN);
	memcpy(name, sec->data + SNAP_MEM_ID_LEN, n);
	name[n] = '\0';
	return 0;
}

int snapshot_memory_pages(const struct snapshot *s, uint64_t **pages)
{
	const struct snap_section *sec = snapshot_find(s, SNAP_SEC_MEMORY_PAGES, 0);
	uint64_t npages = s->h.mem_size / PAGE, nwords = (npages + 63) / 64;

	*pages = NULL;
	if (!sec || sec->len != (npages + 7) / 8)
		return -EINVAL;
	/* Bits past the last page would name pages that do not exist. */
	if ((npages % 8) && (sec->data[sec->len - 1] >> (npages % 8)))
		return -EINVAL;
	if (!(*pages = calloc(nwords, sizeof(uint64_t))))
		return -ENOMEM;
	for (uint32_t i = 0; i < sec->len; i++)
		(*pages)[i / 8] |= (uint64_t)sec->data[i] << (8 * (i % 8));
	return 0;
}

int snapshot_disk_chain(const struct snap_section *sec, char *storage, size_t storage_len,
			const char **paths, int max)
{
	int n = 0;
	char *p, *nl;

	if (!sec || sec->len == 0 || (size_t)sec->len >= storage_len ||
	    sec->data[sec->len - 1] != '\n' || memchr(sec->data, '\0', sec->len))
		return -EINVAL;
	memcpy(storage, sec->data, sec->len);
	storage[sec->len] = '\0';
	for (p = storage; *p; p = nl + 1) {
		nl = strchr(p, '\n');
		if (nl == p || n >= max)
			return -EINVAL; /* an empty path, or more layers than we follow */
		*nl = '\0';
		paths[n++] = p;
	}
	return n;
}

const char *snapshot_arch_name(uint32_t arch)
{
	switch (arch) {
	case SNAP_ARCH_X86_64: return "x86-64";
	case SNAP_ARCH_ARM64: return "arm64";
	default: return "unknown";
	}
}

int snapshot_check_arch(const struct snap_header *h, char *err, size_t errlen)
{
	if (h->arch == SNAP_ARCH_HOST)
		return 0;
	/* Registers, interrupt controller and devices differ throughout:
	 * nothing of the one can be loaded into the other. */
	return snap_fail(err, errlen, -ENOEXEC,
			 "checkpoint is of an %s VM; this kosa8 runs %s VMs: restore it on an %s host",
			 snapshot_arch_name(h->arch), snapshot_arch_name(SNAP_ARCH_HOST),
			 snapshot_arch_name(h->arch));
}

int snapshot_load(const char *dir, uint8_t **buf, struct snapshot *out, char *err, size_t errlen)
{
	char path[4096];
	size_t len;
	int rc;

	*buf = NULL;
	if (snprintf(path, sizeof(path), "%s/%s", dir, SNAP_STATE_FILE) >= (int)sizeof(path))
		return snap_fail(err, errlen, -ENAMETOOLONG, "checkpoint path is too long");
	rc = read_file(path, SNAP_MAX_FILE, buf, &len);
	if (rc == -ENOENT)
		return snap_fail(err, errlen, rc, "%.200s is not a checkpoint (no %s file)", dir,
			    SNAP_STATE_FILE);
	if (rc == -EFBIG)
		return snap_fail(err, errlen, rc, "checkpoint state file is too large");
	if (rc)
		return snap_fail(err, errlen, rc, "cannot read %.200s: %s", path, strerror(-rc));
	rc = snapshot_parse(*buf, len, out, err, errlen);
	if (rc) {
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

/* ---- files ---- */

int snapshot_write_new_file(const char *path, const void *buf, size_t len)
{
	int fd, err = 0;

	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	if (fd < 0)
		return -errno;
	if ((err = write_all(fd, buf, len)) == 0 && fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

int snapshot_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

static bool page_is_zero(const uint8_t *p)
{
	const uint64_t *q = (const uint64_t *)p;

	for (size_t i = 0; i < PAGE / sizeof(*q); i++)
		if (q[i])
			return false;
	return true;
}

/* Writes the non-zero pages among npages from page offset start of RAM
 * (all of them, or those cand marks), runs of them coalesced into one
 * pwrite of up to MEM_WRITE_CHUNK. */
static int write_pages(int fd, const uint8_t *base, uint64_t start, uint64_t npages,
		       const uint8_t *cand, uint64_t *data_bytes)
{
	uint64_t run = start, off, end = start + npages * PAGE;

	for (off = start; off <= end; off += PAGE) {
		bool skip = off == end || (cand && !cand[(off - start) / PAGE]) ||
			    page_is_zero(base + off);
		if (!skip && off - run < MEM_WRITE_CHUNK)
			continue;
		for (uint64_t done = 0; done < off - run;) {
			ssize_t n = pwrite(fd, base + run + done, off - run - done, (off_t)(run + done));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? -errno : -EIO;
			done += (uint64_t)n;
		}
		*data_bytes += off - run;
		run = skip ? off + PAGE : off;
	}
	return 0;
}

/* Guest RAM in a memfd: the kernel knows which ranges were ever touched
 * (SEEK_DATA); the rest is holes and not even read. */
static int write_memfd(int fd, const struct guest_mem *m, uint64_t *data_bytes)
{
	uint64_t pos = 0;
	int err;

	while (pos < m->size) {
		off_t d = lseek(m->memfd, (off_t)pos, SEEK_DATA), h;
		uint64_t data, hole;
		if (d < 0)
			return errno == ENXIO ? 0 : -errno; /* ENXIO: no data after pos */
		data = (uint64_t)d & ~(uint64_t)(PAGE - 1);
		h = lseek(m->memfd, d, SEEK_HOLE);
		hole = h < 0 ? m->size : ALIGN_UP((uint64_t)h, (uint64_t)PAGE);
		if (hole > m->size)
			hole = m->size;
		if ((err = write_pages(fd, m->base, data, (hole - data) / PAGE, NULL, data_bytes)))
			return err;
		pos = hole;
	}
	return 0;
}

/* /proc/self/pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst). */
#define PM_PRESENT (1ULL << 63)
#define PM_SWAPPED (1ULL << 62)
#define PM_FILE_OR_SHARED (1ULL << 61)
#define PM_CHUNK_PAGES 512

/* Marks the pages of [off, off + n pages) that the backing file has data for. */
static void mark_file_data(int file_fd, uint64_t off, uint64_t n, uint8_t *cand)
{
	uint64_t pos = off, end = off + n * PAGE;

	while (pos < end) {
		off_t d = lseek(file_fd, (off_t)pos, SEEK_DATA), h;
		if (d < 0 || (uint64_t)d >= end)
			return;
		h = lseek(file_fd, d, SEEK_HOLE);
		if (h < 0 || (uint64_t)h > end)
			h = (off_t)end;
		for (uint64_t p = (uint64_t)d & ~(uint64_t)(PAGE - 1); p < (uint64_t)h; p += PAGE)
			cand[(p - off) / PAGE] = 1;
		pos = ALIGN_UP((uint64_t)h, (uint64_t)PAGE);
	}
}

/* /proc/self/pagemap opened before the VMM entered its jail (no /proc
 * there); it stays this process's view, as the VMM never execs. */
static int pagemap_fd = -1;

int snapshot_preopen_pagemap(void)
{
	if (pagemap_fd < 0)
		pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	return pagemap_fd < 0 ? -errno : 0;
}

/* Guest RAM that is a private view of a checkpoint's file (a restored VM):
 * a page can hold data if the file or a layer mapped over it has data
 * there, or if the guest wrote it since (then it is an anonymous copy,
 * which pagemap shows).  Other
 * pages are zero and are never touched, so the file is not read whole. */
static int write_private(int fd, const struct guest_mem *m, uint64_t *data_bytes)
{
	uint64_t pm[PM_CHUNK_PAGES];
	uint8_t cand[PM_CHUNK_PAGES];
	int pmfd, err = 0;

	pmfd = pagemap_fd >= 0 ? pagemap_fd : open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (pmfd < 0)
		return -errno;
	for (uint64_t off = 0; off < m->size && !err; off += PM_CHUNK_PAGES * PAGE) {
		uint64_t n = (m->size - off) / PAGE < PM_CHUNK_PAGES ? (m->size - off) / PAGE
								      : PM_CHUNK_PAGES;
		off_t at = (off_t)(((uintptr_t)(m->base + off) / PAGE) * sizeof(uint64_t));
		ssize_t got = pread(pmfd, pm, n * sizeof(uint64_t), at);

		if (got != (ssize_t)(n * sizeof(uint64_t))) {
			err = got < 0 ? -errno : -EIO;
			break;
		}
		memset(cand, 0, sizeof(cand));
		for (uint64_t i = 0; i < n; i++)
			if (((pm[i] & PM_PRESENT) && !(pm[i] & PM_FILE_OR_SHARED)) || (pm[i] & PM_SWAPPED))
				cand[i] = 1;
		mark_file_data(m->file_fd, off, n, cand);
		for (int l = 0; l < m->nlayers; l++)
			mark_file_data(m->layer_fds[l], off, n, cand);
		err = write_pages(fd, m->base, off, n, cand, data_bytes);
	}
	if (pmfd != pagemap_fd)
		close(pmfd);
	return err;
}

struct layer_write {
	int fd, err;
	const uint8_t *base;
	uint64_t *data_bytes;
};

void snapshot_page_runs(const uint64_t *bits, uint64_t npages,
			void (*fn)(uint64_t first, uint64_t end, void *arg), void *arg)
{
	uint64_t p = 0;

	while (p < npages) {
		uint64_t first, w = bits[p / 64] >> (p % 64);
		if (!w) {
			p = (p / 64 + 1) * 64;
			continue;
		}
		p += (uint64_t)__builtin_ctzll(w);
		if (p >= npages)
			break;
		first = p;
		while (p < npages && (bits[p / 64] >> (p % 64) & 1))
			p++;
		fn(first, p, arg);
	}
}

static void layer_run(uint64_t first, uint64_t end, void *arg)
{
	struct layer_write *l = arg;

	if (!l->err)
		l->err = write_pages(l->fd, l->base, first * PAGE, end - first, NULL, l->data_bytes);
}

/* A new sparse RAM-sized file at path, filled by one of the writers above;
 * removed again on failure. */
static int write_memory_file(const char *path, const struct guest_mem *m, const uint64_t *pages,
			     uint64_t *data_bytes)
{
	struct layer_write l = {.base = m->base, .data_bytes = data_bytes};
	int fd, err = 0;

	*data_bytes = 0;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	if (fd < 0)
		return -errno;
	l.fd = fd;
	/* The file gets its full size first: whatever is not written stays a
	 * hole and reads as zeros. */
	if (ftruncate(fd, (off_t)m->size) < 0)
		err = -errno;
	else if (pages) {
		snapshot_page_runs(pages, m->size / PAGE, layer_run, &l);
		err = l.err;
	} else if (m->memfd >= 0)
		err = write_memfd(fd, m, data_bytes);
	else if (m->from_file)
		err = write_private(fd, m, data_bytes);
	else
		err = write_pages(fd, m->base, 0, m->size / PAGE, NULL, data_bytes);
	if (!err && fsync(fd) < 0)
		err = -errno;
	close(fd);
	if (err)
		unlink(path);
	return err;
}

int snapshot_copy_private(int fd, const struct guest_mem *m, uint64_t *data_bytes)
{
	return m->from_file ? write_private(fd, m, data_bytes) : -EINVAL;
}

int snapshot_write_frozen(const char *path, int fd, uint64_t size, uint64_t *data_bytes)
{
	/* A private read-only view: a shared one of a write-sealed memfd is
	 * refused before Linux 6.7, and this one is never written anyway. */
	struct guest_mem g = {.memfd = fd, .size = size};
	int err;

	g.base = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
	if (g.base == MAP_FAILED)
		return -errno;
	err = write_memory_file(path, &g, NULL, data_bytes);
	munmap(g.base, size);
	return err;
}

uint64_t snapshot_memfd_data_bytes(int fd, uint64_t size)
{
	uint64_t pos = 0, n = 0;

	while (pos < size) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA), h;
		if (d < 0)
			break;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0 || (uint64_t)h > size)
			h = (off_t)size;
		n += (uint64_t)(h - d);
		pos = (uint64_t)h;
	}
	return n;
}

int snapshot_write_memory(const char *path, const struct guest_mem *m, uint64_t *data_bytes)
{
	return write_memory_file(path, m, NULL, data_bytes);
}

int snapshot_write_memory_layer(const char *path, const struct guest_mem *m,
				const uint64_t *pages, uint64_t *data_bytes)
{
	return write_memory_file(path, m, pages, data_bytes);
}

void snapshot_add_pages(struct snap_writer *w, const uint64_t *pages, uint64_t npages)
{
	size_t len = (size_t)((npages + 7) / 8);
	uint8_t *b = malloc(len ? len : 1);

	if (!b) {
		w->err = w->err ? w->err : -ENOMEM;
		return;
	}
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)(pages[i / 8] >> (8 * (i % 8)));
	/* Bits past the last page are not pages (the reader refuses them). */
	if (npages % 8)
		b[len - 1] &= (uint8_t)((1u << (npages % 8)) - 1);
	snap_writer_add(w, SNAP_SEC_MEMORY_PAGES, 0, b, len);
	free(b);
}
