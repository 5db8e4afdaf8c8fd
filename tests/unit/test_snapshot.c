/* Checkpoint state file (format, every corruption detected) and the sparse
 * memory file mapped back copy-on-write. */
#include <errno.h>
#include <fcntl.h>
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

#include "disk/format.h"
#include "hw/guest_mem.h"
#include "vmm/accel.h"
#include "vmm/snapshot.h"

#define NCPUS 2

static const uint32_t vcpu_recs[] = {ACCEL_REC_MP_STATE, ACCEL_REC_REGS, ACCEL_REC_SREGS,
				     ACCEL_REC_LAPIC, ACCEL_REC_MSRS};
static const uint32_t vm_recs[] = {ACCEL_REC_PIC_MASTER, ACCEL_REC_PIC_SLAVE, ACCEL_REC_IOAPIC,
				   ACCEL_REC_PIT, ACCEL_REC_CLOCK};

/* A complete state file: every required section, with recognisable data
 * (each byte derived from tag, index and position). */
static void build(struct snap_writer *w, uint64_t mem_size, bool with_memory)
{
	struct snap_header h = {.ncpus = NCPUS, .mem_size = mem_size};
	struct snap_memory_desc md = {.size = mem_size, .data_bytes = 8192, .page_size = 4096};
	uint8_t data[300], mdb[SNAP_MEMORY_DESC_LEN];
	const char chain[] = "/images/base.img\n/sb/disk-1.k8d\n";

	for (int i = 0; i < SNAP_FP_LEN; i++)
		h.cpu_fp[i] = (uint8_t)(0xa0 + i);
	snap_writer_init(w, &h);
	for (uint32_t c = 0; c < NCPUS; c++) {
		for (size_t r = 0; r < sizeof(vcpu_recs) / sizeof(vcpu_recs[0]); r++) {
			size_t len = 37 + 11 * r;
			for (size_t i = 0; i < len; i++)
				data[i] = (uint8_t)(vcpu_recs[r] * 7 + c * 3 + i);
			snap_writer_add(w, SNAP_SEC_VCPU | vcpu_recs[r], c, data, len);
		}
	}
	for (size_t r = 0; r < sizeof(vm_recs) / sizeof(vm_recs[0]); r++) {
		memset(data, (int)vm_recs[r], 64);
		snap_writer_add(w, SNAP_SEC_VM | vm_recs[r], 0, data, 64);
	}
	snap_writer_add(w, SNAP_SEC_DISK, 0, chain, strlen(chain));
	snap_memory_desc_encode(&md, mdb);
	if (with_memory)
		snap_writer_add(w, SNAP_SEC_MEMORY, 0, mdb, sizeof(mdb));
	assert_int_equal(snap_writer_finish(w), 0);
}

static void test_round_trip(void **state)
{
	struct snap_writer w;
	struct snapshot s;
	struct snap_memory_desc md;
	const struct snap_section *sec;
	char err[SNAP_ERR_LEN] = "", storage[256];
	const char *paths[4];

	build(&w, 64 << 20, true);
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), 0);
	assert_int_equal(s.h.version, SNAP_VERSION);
	assert_int_equal(s.h.ncpus, NCPUS);
	assert_int_equal(s.h.mem_size, 64 << 20);
	for (int i = 0; i < SNAP_FP_LEN; i++)
		assert_int_equal(s.h.cpu_fp[i], 0xa0 + i);
	/* 2 vCPUs x 5 + 5 VM records + disk + memory */
	assert_int_equal(s.nsections, 2 * 5 + 5 + 2);
	sec = snapshot_find(&s, SNAP_SEC_VCPU | ACCEL_REC_SREGS, 1);
	assert_non_null(sec);
	assert_int_equal(sec->len, 37 + 11 * 2);
	for (size_t i = 0; i < sec->len; i++)
		assert_int_equal(sec->data[i], (uint8_t)(ACCEL_REC_SREGS * 7 + 3 + i));
	assert_null(snapshot_find(&s, SNAP_SEC_VCPU | ACCEL_REC_SREGS, 2));
	assert_null(snapshot_find(&s, SNAP_SEC_SERIAL, 0));
	assert_int_equal(snapshot_disk_chain(snapshot_find(&s, SNAP_SEC_DISK, 0), storage,
					     sizeof(storage), paths, 4), 2);
	assert_string_equal(paths[0], "/images/base.img");
	assert_string_equal(paths[1], "/sb/disk-1.k8d");
	assert_int_equal(snapshot_memory_desc(snapshot_find(&s, SNAP_SEC_MEMORY, 0), &md), 0);
	assert_int_equal(md.size, 64 << 20);
	assert_int_equal(md.data_bytes, 8192);
	snapshot_free(&s);
	snap_writer_free(&w);
}

/* Every single changed byte anywhere in the file is refused: each one is
 * under the header checksum, a section checksum, or a padding check. */
static void test_every_byte_flip_detected(void **state)
{
	struct snap_writer w;
	struct snapshot s;
	char err[SNAP_ERR_LEN];

	build(&w, 64 << 20, true);
	for (size_t i = 0; i < w.len; i++) {
		w.buf[i] ^= 0x10;
		err[0] = '\0';
		if (snapshot_parse(w.buf, w.len, &s, err, sizeof(err)) == 0)
			fail_msg("a flipped byte at offset %zu was accepted", i);
		assert_true(strlen(err) > 10);
		w.buf[i] ^= 0x10;
	}
	snap_writer_free(&w);
}

static void test_every_truncation_detected(void **state)
{
	struct snap_writer w;
	struct snapshot s;
	char err[SNAP_ERR_LEN];

	build(&w, 64 << 20, true);
	for (size_t len = 0; len < w.len; len++) {
		int rc = snapshot_parse(w.buf, len, &s, err, sizeof(err));
		if (rc == 0)
			fail_msg("a file truncated to %zu of %zu bytes was accepted", len, w.len);
		if (len >= SNAP_HEADER_LEN)
			assert_non_null(strstr(err, "truncated"));
	}
	snap_writer_free(&w);
}

static void reseal_header(uint8_t *buf)
{
	uint32_t crc = disk_crc32c(0, buf, 68);

	for (int i = 0; i < 4; i++)
		buf[68 + i] = (uint8_t)(crc >> (8 * i));
}

static void test_other_version_and_bad_header(void **state)
{
	struct snap_writer w;
	struct snapshot s;
	char err[SNAP_ERR_LEN];

	build(&w, 64 << 20, true);
	w.buf[8] = 3; /* version 3, header checksum made valid again */
	reseal_header(w.buf);
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "version 3"));
	w.buf[8] = 0;
	reseal_header(w.buf);
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), -EPROTO);
	w.buf[8] = 1; /* version 1 files still load */
	reseal_header(w.buf);
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), 0);
	snapshot_free(&s);
	w.buf[16] = 0; /* zero vCPUs */
	reseal_header(w.buf);
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "vCPUs"));
	w.buf[16] = NCPUS;
	w.buf[0] = 'X';
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not a kosa8 checkpoint"));
	snap_writer_free(&w);
}

/* A checkpoint names its architecture; each build refuses the other's by
 * name, and an arm64 checkpoint needs arm64's records, not x86's. */
static void build_arm64(struct snap_writer *w)
{
	struct snap_header h = {.arch = SNAP_ARCH_ARM64, .ncpus = 1, .mem_size = 1 << 20};
	struct snap_memory_desc md = {.size = 1 << 20, .page_size = 4096};
	uint8_t data[64] = {1}, mdb[SNAP_MEMORY_DESC_LEN];

	snap_writer_init(w, &h);
	snap_writer_add(w, SNAP_SEC_VCPU | ACCEL_REC_MP_STATE, 0, data, 4);
	snap_writer_add(w, SNAP_SEC_VCPU | ACCEL_REC_ARM64_REGS, 0, data, 16);
	snap_writer_add(w, SNAP_SEC_VCPU | ACCEL_REC_ARM64_GIC_CPU, 0, data, 16);
	snap_writer_add(w, SNAP_SEC_VM | ACCEL_REC_ARM64_GIC_DIST, 0, data, 16);
	snap_memory_desc_encode(&md, mdb);
	snap_writer_add(w, SNAP_SEC_MEMORY, 0, mdb, sizeof(mdb));
	assert_int_equal(snap_writer_finish(w), 0);
}

static void test_architecture(void **state)
{
	struct snap_writer w;
	struct snapshot s;
	char err[SNAP_ERR_LEN] = "";

	/* x86-64 is 0: every file written before the field existed. */
	build(&w, 64 << 20, true);
	assert_int_equal(w.buf[64], 0);
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), 0);
	assert_int_equal(s.h.arch, SNAP_ARCH_X86_64);
	assert_int_equal(snapshot_check_arch(&s.h, err, sizeof(err)), 0);
	snapshot_free(&s);
	w.buf[64] = 7; /* an architecture no kosa8 knows */
	reseal_header(w.buf);
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "unknown architecture (7)"));
	/* x86's records under an arm64 header are a half checkpoint. */
	w.buf[64] = SNAP_ARCH_ARM64;
	reseal_header(w.buf);
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "lacks vCPU 0's state"));
	snap_writer_free(&w);

	build_arm64(&w);
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), 0);
	assert_int_equal(s.h.arch, SNAP_ARCH_ARM64);
	/* This build is x86-64's (the unit tests run there): refused, named. */
	assert_int_equal(snapshot_check_arch(&s.h, err, sizeof(err)), -ENOEXEC);
	assert_string_equal(err, "checkpoint is of an arm64 VM; this kosa8 runs x86-64 VMs: "
				 "restore it on an arm64 host");
	snapshot_free(&s);
	snap_writer_free(&w);
}

/* The pair records arm64's registers and GIC state are kept in. */
static void test_accel_pairs(void **state)
{
	struct accel_pairs p = {0};
	uint64_t v64 = 0x1122334455667788ull, id;
	uint8_t v16[16], v4[4] = {9, 8, 7, 6};
	const uint8_t *val;
	size_t off = 0;

	for (int i = 0; i < 16; i++)
		v16[i] = (uint8_t)(0xf0 + i);
	accel_pairs_add(&p, (3ull << ACCEL_PAIR_SIZE_SHIFT) | 1, &v64);
	accel_pairs_add(&p, (4ull << ACCEL_PAIR_SIZE_SHIFT) | 2, v16);
	accel_pairs_add(&p, (2ull << ACCEL_PAIR_SIZE_SHIFT) | 3, v4);
	assert_int_equal(p.err, 0);
	assert_int_equal(p.len, 8 + 8 + 8 + 16 + 8 + 4);
	assert_int_equal(accel_pairs_next(p.buf, p.len, &off, &id, &val), 1);
	assert_int_equal(id & 0xff, 1);
	assert_memory_equal(val, &v64, 8);
	assert_int_equal(accel_pairs_next(p.buf, p.len, &off, &id, &val), 1);
	assert_memory_equal(val, v16, 16);
	assert_int_equal(accel_pairs_next(p.buf, p.len, &off, &id, &val), 1);
	assert_memory_equal(val, v4, 4);
	assert_int_equal(accel_pairs_next(p.buf, p.len, &off, &id, &val), 0);
	/* Every cut short of the end is refused, never read past. */
	for (size_t cut = 1; cut < p.len; cut++) {
		int rc;
		off = 0;
		while ((rc = accel_pairs_next(p.buf, cut, &off, &id, &val)) == 1)
			assert_true(val + accel_pair_size(id) <= p.buf + cut);
		if (cut != 16 && cut != 40)
			assert_int_equal(rc, -EINVAL);
	}
	/* A size beyond the largest register (2^9 bytes) is refused. */
	off = 0;
	v64 = 9ull << ACCEL_PAIR_SIZE_SHIFT;
	memcpy(p.buf, &v64, 8);
	assert_int_equal(accel_pairs_next(p.buf, p.len, &off, &id, &val), -EINVAL);
	accel_pairs_add(&p, v64, v16);
	assert_int_equal(p.err, -EINVAL);
	free(p.buf);
}

static void test_trailing_and_missing(void **state)
{
	struct snap_writer w;
	struct snapshot s;
	char err[SNAP_ERR_LEN];
	uint8_t *longer;

	build(&w, 64 << 20, true);
	longer = calloc(1, w.len + 8);
	assert_non_null(longer);
	memcpy(longer, w.buf, w.len);
	assert_int_equal(snapshot_parse(longer, w.len + 8, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "more data"));
	free(longer);
	snap_writer_free(&w);

	build(&w, 64 << 20, false); /* well formed, but no memory section */
	assert_int_equal(snapshot_parse(w.buf, w.len, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "memory"));
	snap_writer_free(&w);
}

static void test_disk_chain_bad(void **state)
{
	struct snap_section sec;
	char storage[64];
	const char *paths[2];

	sec = (struct snap_section){.len = 5, .data = (const uint8_t *)"a\n\nb\n"};
	assert_int_equal(snapshot_disk_chain(&sec, storage, sizeof(storage), paths, 2), -EINVAL);
	sec = (struct snap_section){.len = 3, .data = (const uint8_t *)"a\nb"};
	assert_int_equal(snapshot_disk_chain(&sec, storage, sizeof(storage), paths, 2), -EINVAL);
	sec = (struct snap_section){.len = 6, .data = (const uint8_t *)"a\nb\nc\n"};
	assert_int_equal(snapshot_disk_chain(&sec, storage, sizeof(storage), paths, 2), -EINVAL);
	assert_int_equal(snapshot_disk_chain(NULL, storage, sizeof(storage), paths, 2), -EINVAL);
}

/* RAM with a few written pages: the file is sparse (only those pages take
 * space), reads back equal, and a private mapping of it takes writes
 * without changing the file. */
static void test_memory_file(void **state)
{
	const uint64_t size = 32 << 20;
	struct guest_mem m, r;
	char dir[] = "/tmp/kosa8-test-snap-XXXXXX", path[128];
	uint64_t data = 0;
	struct stat st;
	uint8_t b;
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/memory", dir);
	assert_int_equal(guest_mem_create(&m, size), 0);
	memset(m.base + 4096 * 3, 0x5a, 4096);
	memset(m.base + 20 * (1 << 20), 0xc3, 3 * 4096);
	m.base[size - 1] = 0x77;
	memset(m.base + 8 * (1 << 20), 0, 4096); /* touched but zero: still a hole */
	assert_int_equal(snapshot_write_memory(path, &m, &data), 0);
	assert_int_equal(data, 5 * 4096);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, size);
	assert_true((uint64_t)st.st_blocks * 512 <= 64 * 4096); /* sparse (fs may round up) */
	assert_int_equal(snapshot_write_memory(path, &m, &data), -EEXIST);

	assert_int_equal(guest_mem_open_file(&r, path, size), 0);
	assert_int_equal(memcmp(r.base, m.base, size), 0);
	r.base[4096 * 3] = 0x11; /* copy-on-write: the file keeps 0x5a */
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, 4096 * 3), 1);
	assert_int_equal(b, 0x5a);
	close(fd);
	guest_mem_destroy(&r);
	assert_int_equal(guest_mem_open_file(&r, path, size + 4096), -EINVAL);
	guest_mem_destroy(&m);
	unlink(path);
	rmdir(dir);
}

/* A restored VM's RAM (private view of a file) checkpointed again: what
 * the file had, minus what the guest zeroed, plus what it wrote. */
static void test_memory_file_of_restored_ram(void **state)
{
	const uint64_t size = 32 << 20;
	struct guest_mem m, r, r2;
	char dir[] = "/tmp/kosa8-test-snap-XXXXXX", p1[128], p2[128];
	uint64_t data = 0;

	assert_non_null(mkdtemp(dir));
	snprintf(p1, sizeof(p1), "%s/memory1", dir);
	snprintf(p2, sizeof(p2), "%s/memory2", dir);
	assert_int_equal(guest_mem_create(&m, size), 0);
	memset(m.base + 4096 * 3, 0x5a, 4096);
	memset(m.base + (20 << 20), 0xc3, 3 * 4096);
	m.base[size - 1] = 0x77;
	assert_int_equal(snapshot_write_memory(p1, &m, &data), 0);
	guest_mem_destroy(&m);

	assert_int_equal(guest_mem_open_file(&r, p1, size), 0);
	assert_true(r.from_file);
	memset(r.base + 4096 * 3, 0x11, 100);        /* copy-on-write of a file page */
	memset(r.base + 4096 * 100, 0x22, 4096);     /* a page the file has as a hole */
	memset(r.base + (20 << 20), 0, 4096);        /* a file page zeroed */
	assert_int_equal(snapshot_write_memory(p2, &r, &data), 0);
	assert_int_equal(data, 5 * 4096);
	assert_int_equal(guest_mem_open_file(&r2, p2, size), 0);
	assert_int_equal(memcmp(r.base, r2.base, size), 0);
	guest_mem_destroy(&r2);
	guest_mem_destroy(&r);
	unlink(p1);
	unlink(p2);
	rmdir(dir);
}

static void test_write_new_file_exclusive(void **state)
{
	char dir[] = "/tmp/kosa8-test-snap-XXXXXX", path[128];

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/state", dir);
	assert_int_equal(snapshot_write_new_file(path, "abc", 3), 0);
	assert_int_equal(snapshot_write_new_file(path, "abc", 3), -EEXIST);
	assert_int_equal(snapshot_fsync_dir(dir), 0);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_every_byte_flip_detected),
		cmocka_unit_test(test_every_truncation_detected),
		cmocka_unit_test(test_other_version_and_bad_header),
		cmocka_unit_test(test_architecture),
		cmocka_unit_test(test_accel_pairs),
		cmocka_unit_test(test_trailing_and_missing),
		cmocka_unit_test(test_disk_chain_bad),
		cmocka_unit_test(test_memory_file),
		cmocka_unit_test(test_memory_file_of_restored_ram),
		cmocka_unit_test(test_write_new_file_exclusive),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
