/* Checkpoint memory in layers (vmm/snapshot_mem.h): a chain of a full file
 * and layers read back as the RAM each checkpoint saw, parents that were
 * replaced or removed refused, layers folded down when the checkpoint under
 * them is removed, and malformed layer sections refused by the parser.
 * Files only: no VM. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "hw/guest_mem.h"
#include "vmm/accel.h"
#include "vmm/snapshot.h"
#include "vmm/snapshot_mem.h"

#define NPAGES 96
#define MEM (NPAGES * 4096ULL)
#define WORDS ((NPAGES + 63) / 64)

static char root[64];

/* The RAM each checkpoint of the test saw. */
static uint8_t view[4][MEM];

static void fill(uint8_t *ram, unsigned page, unsigned gen)
{
	for (unsigned i = 0; i < 4096; i++)
		ram[page * 4096 + i] = (uint8_t)(page * 7 + gen * 31 + i % 251 + 1);
}

static void dir_of(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", root, name);
}

/* A state file with the sections every checkpoint has, and the given
 * memory sections (parent == NULL: a full file). */
static void write_state(const char *name, const struct snap_memory_desc *md, const char *parent,
			const uint8_t *parent_id, const uint64_t *pages)
{
	static const uint32_t vcpu[] = {ACCEL_REC_MP_STATE, ACCEL_REC_REGS, ACCEL_REC_SREGS,
					ACCEL_REC_LAPIC};
	static const uint32_t vmr[] = {ACCEL_REC_PIC_MASTER, ACCEL_REC_PIC_SLAVE, ACCEL_REC_IOAPIC,
				       ACCEL_REC_PIT, ACCEL_REC_CLOCK};
	struct snap_header h = {.ncpus = 1, .mem_size = MEM};
	uint8_t rec[16] = {1, 2, 3}, mdb[SNAP_MEMORY_DESC_LEN], psec[SNAP_MEM_ID_LEN + 64];
	char dir[128], path[160];
	struct snap_writer w;

	snap_writer_init(&w, &h);
	for (size_t i = 0; i < sizeof(vcpu) / sizeof(vcpu[0]); i++)
		snap_writer_add(&w, SNAP_SEC_VCPU | vcpu[i], 0, rec, sizeof(rec));
	for (size_t i = 0; i < sizeof(vmr) / sizeof(vmr[0]); i++)
		snap_writer_add(&w, SNAP_SEC_VM | vmr[i], 0, rec, sizeof(rec));
	snap_memory_desc_encode(md, mdb);
	snap_writer_add(&w, SNAP_SEC_MEMORY, 0, mdb, sizeof(mdb));
	if (parent) {
		memcpy(psec, parent_id, SNAP_MEM_ID_LEN);
		memcpy(psec + SNAP_MEM_ID_LEN, parent, strlen(parent));
		snap_writer_add(&w, SNAP_SEC_MEMORY_PARENT, 0, psec, SNAP_MEM_ID_LEN + strlen(parent));
		snapshot_add_pages(&w, pages, NPAGES);
	}
	assert_int_equal(snap_writer_finish(&w), 0);
	dir_of(dir, sizeof(dir), name);
	mkdir(dir, 0700);
	snprintf(path, sizeof(path), "%s/state", dir);
	unlink(path);
	assert_int_equal(snapshot_write_new_file(path, w.buf, w.len), 0);
	snap_writer_free(&w);
}

/* Checkpoint name with RAM = ram: full (parent NULL) or a layer of the
 * pages set in pages over parent. */
static void make_ckpt(const char *name, const uint8_t *ram, const char *parent, uint32_t depth,
		      const uint64_t *pages)
{
	struct snap_memory_desc md = {.size = MEM, .page_size = 4096, .depth = depth,
				      .flags = parent ? SNAP_MEM_LAYER : 0};
	struct guest_mem m;
	char dir[128], path[160];
	uint8_t pid[SNAP_MEM_ID_LEN];

	assert_int_equal(guest_mem_create(&m, MEM), 0);
	memcpy(m.base, ram, MEM);
	dir_of(dir, sizeof(dir), name);
	mkdir(dir, 0700);
	snprintf(path, sizeof(path), "%s/memory", dir);
	if (parent)
		assert_int_equal(snapshot_write_memory_layer(path, &m, pages, &md.data_bytes), 0);
	else
		assert_int_equal(snapshot_write_memory(path, &m, &md.data_bytes), 0);
	guest_mem_destroy(&m);
	memset(md.id, 0, sizeof(md.id));
	memcpy(md.id, name, strlen(name));
	memset(pid, 0, sizeof(pid));
	if (parent)
		memcpy(pid, parent, strlen(parent));
	write_state(name, &md, parent, pid, pages);
}

static void set_page(uint64_t *pages, unsigned p)
{
	pages[p / 64] |= 1ULL << (p % 64);
}

static const unsigned c2_pages[] = {1, 2, 10, 11, 12};
static const unsigned c3_pages[] = {2, 12, 70};

static void pages_of(uint64_t *pages, const unsigned *list, size_t n)
{
	memset(pages, 0, WORDS * sizeof(uint64_t));
	for (size_t i = 0; i < n; i++)
		set_page(pages, list[i]);
}

/* c1 full; c2 over c1 (page 2 zeroed since, others rewritten); c3 over c2
 * (page 12 zeroed, page 2 written again, page 70 new). */
static int setup(void **state)
{
	uint64_t p[WORDS];

	snprintf(root, sizeof(root), "/tmp/kosa8-test-snapmem-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	memset(view, 0, sizeof(view));
	for (unsigned pg = 0; pg < NPAGES; pg += 2)
		fill(view[1], pg, 1);
	memcpy(view[2], view[1], MEM);
	fill(view[2], 1, 2);
	memset(view[2] + 2 * 4096, 0, 4096);
	for (unsigned pg = 10; pg <= 12; pg++)
		fill(view[2], pg, 2);
	memcpy(view[3], view[2], MEM);
	fill(view[3], 2, 3);
	memset(view[3] + 12 * 4096, 0, 4096);
	fill(view[3], 70, 3);
	make_ckpt("c1", view[1], NULL, 0, NULL);
	pages_of(p, c2_pages, sizeof(c2_pages) / sizeof(c2_pages[0]));
	make_ckpt("c2", view[2], "c1", 1, p);
	pages_of(p, c3_pages, sizeof(c3_pages) / sizeof(c3_pages[0]));
	make_ckpt("c3", view[3], "c2", 2, p);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	return system(cmd);
}

/* The RAM a checkpoint maps to, compared with what it saw. */
static void expect_view(const char *name, int n_layers, const uint8_t *want)
{
	struct snapmem_chain c;
	struct guest_mem m;
	char dir[128], err[256] = "";

	dir_of(dir, sizeof(dir), name);
	if (snapmem_chain_load(dir, &c, err, sizeof(err)))
		fail_msg("%s: %s", name, err);
	assert_int_equal(c.n, n_layers);
	assert_string_equal(c.l[0].dir, dir);
	assert_int_equal(c.l[c.n - 1].md.flags & SNAP_MEM_LAYER, 0);
	assert_int_equal(snapmem_map(&m, &c, err, sizeof(err)), 0);
	for (unsigned pg = 0; pg < NPAGES; pg++)
		if (memcmp(m.base + pg * 4096, want + pg * 4096, 4096))
			fail_msg("%s: page %u differs", name, pg);
	guest_mem_destroy(&m);
	snapmem_chain_free(&c);
}

static void test_chain_reads_back_each_view(void **state)
{
	struct stat st;
	char path[160];

	expect_view("c1", 1, view[1]);
	expect_view("c2", 2, view[2]);
	expect_view("c3", 3, view[3]);
	/* A layer holds its pages only: c3's file has two pages of data. */
	dir_of(path, sizeof(path), "c3/memory");
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_blocks * 512 <= 2 * 4096 + 4096);
}

#define PM_PRESENT (1ULL << 63)
#define PM_FILE (1ULL << 61) /* file page or shared anonymous */

/* The calling process's /proc/self/pagemap entry for the page at p. */
static uint64_t pagemap(const void *p)
{
	uint64_t e = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &e, sizeof(e), (off_t)((uintptr_t)p / 4096 * sizeof(e))), sizeof(e));
	close(fd);
	return e;
}

/* A restore maps the layers' pages copy-on-write instead of reading them:
 * nothing is in memory before it is touched, a write stays in this process,
 * and a full checkpoint of the restored RAM (a fork's first) still has the
 * layers' pages, which the bottom file lacks. */
static void test_layers_mapped_then_saved_whole(void **state)
{
	struct snapmem_chain c;
	struct guest_mem m, back;
	char dir[128], path[160], err[256] = "";
	uint8_t want[MEM];
	struct snap_memory_desc md = {.size = MEM};

	dir_of(dir, sizeof(dir), "c3");
	assert_int_equal(snapmem_chain_load(dir, &c, err, sizeof(err)), 0);
	assert_int_equal(snapmem_map(&m, &c, err, sizeof(err)), 0);
	assert_int_equal(m.nlayers, 2);
	/* Page 70 is c3's own (a layer page): not in the page tables before it
	 * is touched, and after a read a page of the file, not a copy. */
	assert_int_equal(pagemap(m.base + 70 * 4096) & PM_PRESENT, 0);
	assert_memory_equal(m.base + 70 * 4096, view[3] + 70 * 4096, 4096);
	assert_int_equal(pagemap(m.base + 70 * 4096) & (PM_PRESENT | PM_FILE), PM_PRESENT | PM_FILE);
	memcpy(want, view[3], MEM);
	memset(m.base + 11 * 4096, 0x5a, 100); /* c2's page */
	memset(want + 11 * 4096, 0x5a, 100);
	memset(m.base + 70 * 4096 + 4000, 0xa5, 96); /* c3's page */
	memset(want + 70 * 4096 + 4000, 0xa5, 96);
	for (unsigned pg = 0; pg < NPAGES; pg++)
		if (memcmp(m.base + pg * 4096, want + pg * 4096, 4096))
			fail_msg("page %u differs after mapping", pg);
	/* The writes stayed here: c3 maps as it was saved. */
	expect_view("c3", 3, view[3]);
	/* Saved whole, every page comes back: the bottom file's, each
	 * layer's (mapped, never written here) and the ones written. */
	dir_of(path, sizeof(path), "whole");
	mkdir(path, 0700);
	strcat(path, "/memory");
	assert_int_equal(snapshot_write_memory(path, &m, &md.data_bytes), 0);
	assert_int_equal(guest_mem_open_file(&back, path, MEM), 0);
	for (unsigned pg = 0; pg < NPAGES; pg++)
		if (memcmp(back.base + pg * 4096, want + pg * 4096, 4096))
			fail_msg("page %u differs in the full checkpoint of the restored RAM", pg);
	guest_mem_destroy(&back);
	guest_mem_destroy(&m);
	snapmem_chain_free(&c);
}

/* New RAM with every third page filled; returns a copy of it. */
static uint8_t *new_ram(struct guest_mem *m)
{
	uint8_t *copy = malloc(MEM);

	assert_non_null(copy);
	assert_int_equal(guest_mem_create(m, MEM), 0);
	for (unsigned pg = 0; pg < NPAGES; pg += 3)
		fill(m->base, pg, 1);
	memcpy(copy, m->base, MEM);
	return copy;
}

/* A live fork (guest_mem_freeze): the memfd keeps RAM as it was at the
 * freeze while the VM writes on into its private view at the same address;
 * nobody can write the memfd any more; a fork maps it privately
 * (guest_mem_open_fd) and sees the frozen RAM; the file written from it
 * afterwards holds that RAM (zero pages as holes), and a later full
 * checkpoint of the parent holds the parent's writes too. */
static void test_live_fork_freeze(void **state)
{
	struct guest_mem m, child, back;
	uint8_t *frozen = new_ram(&m), *want = malloc(MEM);
	char path[160];
	uint64_t bytes = 0;
	uint8_t *at = m.base;
	int fd;

	assert_non_null(want);
	assert_int_equal(guest_mem_freeze(&m), 1); /* sealed */
	assert_ptr_equal(m.base, at);
	assert_true(m.from_file);
	assert_int_equal(m.memfd, -1);
	assert_int_equal(guest_mem_freeze(&m), -EINVAL); /* frozen once */
	fd = m.file_fd;
	assert_int_equal(fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);
	assert_int_equal(pwrite(fd, "x", 1, 0), -1);
	assert_int_equal(errno, EPERM);
	/* The parent writes on: pages it had and pages it had not. */
	memcpy(want, frozen, MEM);
	for (unsigned pg = 0; pg < NPAGES; pg += 5) {
		fill(m.base, pg, 2);
		fill(want, pg, 2);
	}
	assert_memory_equal(m.base, want, MEM);
	/* A fork maps the frozen RAM, and its own writes stay its own. */
	assert_int_equal(guest_mem_open_fd(&child, dup(fd), MEM), 0);
	assert_memory_equal(child.base, frozen, MEM);
	memset(child.base + 7 * 4096, 0x77, 4096);
	assert_memory_equal(m.base + 7 * 4096, want + 7 * 4096, 4096);
	guest_mem_destroy(&child);
	assert_int_equal(guest_mem_open_fd(&child, dup(fd), MEM - 4096), -EINVAL);
	/* The memory file written after the fork is the frozen RAM. */
	assert_int_equal(snapshot_memfd_data_bytes(fd, MEM) >= (NPAGES / 3) * 4096, 1);
	dir_of(path, sizeof(path), "frozen");
	strcat(path, ".memory");
	assert_int_equal(snapshot_write_frozen(path, fd, MEM, &bytes), 0);
	assert_int_equal(bytes, ((NPAGES + 2) / 3) * 4096);
	assert_int_equal(guest_mem_open_file(&back, path, MEM), 0);
	assert_memory_equal(back.base, frozen, MEM);
	guest_mem_destroy(&back);
	unlink(path);
	/* A later full checkpoint of the parent: frozen pages and its writes. */
	assert_int_equal(snapshot_write_memory(path, &m, &bytes), 0);
	assert_int_equal(guest_mem_open_file(&back, path, MEM), 0);
	assert_memory_equal(back.base, want, MEM);
	guest_mem_destroy(&back);
	unlink(path);
	guest_mem_destroy(&m);
	free(frozen);
	free(want);
}

/* A live fork of RAM that is a private view of a file (a template start):
 * the pages that can hold data are copied into a memfd, which RAM becomes
 * at the same address (guest_mem_adopt) and can then be frozen like a
 * booted VM's; the fork sees the parent's RAM, the file is untouched. */
static void test_live_fork_of_private_view(void **state)
{
	struct guest_mem m, child;
	uint8_t *tpl = new_ram(&m), *want = malloc(MEM);
	char path[160];
	uint64_t bytes = 0;
	uint8_t *at;
	int fd;

	assert_non_null(want);
	dir_of(path, sizeof(path), "tpl.memory");
	assert_int_equal(snapshot_write_memory(path, &m, &bytes), 0);
	assert_int_equal(guest_mem_adopt(&m, 0), -EINVAL); /* not a private view */
	guest_mem_destroy(&m);

	assert_int_equal(guest_mem_open_file(&m, path, MEM), 0);
	memcpy(want, tpl, MEM);
	for (unsigned pg = 1; pg < NPAGES; pg += 5) {
		fill(m.base, pg, 2);
		fill(want, pg, 2);
	}
	fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)MEM), 0);
	assert_int_equal(snapshot_copy_private(fd, &m, &bytes), 0);
	at = m.base;
	assert_int_equal(guest_mem_adopt(&m, fd), 0);
	assert_ptr_equal(m.base, at);
	assert_false(m.from_file);
	assert_int_equal(m.memfd, fd);
	assert_memory_equal(m.base, want, MEM);
	/* RAM is the memfd now: a write shows in it. */
	m.base[5] = 0x5a;
	want[5] = 0x5a;
	assert_int_equal(pread(fd, tpl + MEM / 2, 16, 0), 16);
	assert_int_equal(tpl[MEM / 2 + 5], 0x5a);
	assert_int_equal(guest_mem_freeze(&m), 1);
	assert_int_equal(guest_mem_open_fd(&child, dup(m.file_fd), MEM), 0);
	assert_memory_equal(child.base, want, MEM);
	guest_mem_destroy(&child);
	guest_mem_destroy(&m);
	/* The file the view came from is as it was written. */
	assert_int_equal(guest_mem_open_file(&m, path, MEM), 0);
	for (unsigned pg = 0; pg < NPAGES; pg++)
		if (pg % 3 == 0 && m.base[pg * 4096] != (uint8_t)(pg * 7 + 31 + 1))
			fail_msg("page %u of the file changed", pg);
	guest_mem_destroy(&m);
	unlink(path);
	free(tpl);
	free(want);
}

static void remove_ckpt(const char *name)
{
	char path[160];

	dir_of(path, sizeof(path), name);
	strcat(path, "/memory");
	unlink(path);
	dir_of(path, sizeof(path), name);
	strcat(path, "/state");
	unlink(path);
	dir_of(path, sizeof(path), name);
	rmdir(path);
}

/* rm of the middle checkpoint, then of the bottom one: c3 reads the same
 * RAM throughout, over c1 and then on its own. */
static void test_detach_folds_down(void **state)
{
	char dir[128], err[256] = "";
	uint64_t copied;

	dir_of(dir, sizeof(dir), "c2");
	assert_int_equal(snapmem_detach_children(dir, &copied, err, sizeof(err)), 1);
	/* c2's pages c3 lacked, non-zero: 1, 10, 11 (2 and 12 are c3's own). */
	assert_int_equal(copied, 3 * 4096);
	remove_ckpt("c2");
	expect_view("c3", 2, view[3]);
	dir_of(dir, sizeof(dir), "c1");
	assert_int_equal(snapmem_detach_children(dir, &copied, err, sizeof(err)), 1);
	remove_ckpt("c1");
	expect_view("c3", 1, view[3]);
	/* Nothing stands on c3: nothing to do. */
	dir_of(dir, sizeof(dir), "c3");
	assert_int_equal(snapmem_detach_children(dir, &copied, err, sizeof(err)), 0);
}

static void test_parent_replaced_or_gone(void **state)
{
	struct snap_memory_desc md = {.size = MEM, .page_size = 4096};
	struct snapmem_chain c;
	char dir[128], err[256] = "";

	/* c1 again under the same name, but another memory (another id). */
	memcpy(md.id, "other", 5);
	write_state("c1", &md, NULL, NULL, NULL);
	dir_of(dir, sizeof(dir), "c3");
	assert_int_equal(snapmem_chain_load(dir, &c, err, sizeof(err)), -ESTALE);
	assert_non_null(strstr(err, "replaced"));
	remove_ckpt("c1");
	assert_int_equal(snapmem_chain_load(dir, &c, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "gone"));
	assert_int_equal(c.n, 0);
}

/* Layer sections a parser must refuse, each on its own. */
static void test_bad_layer_sections(void **state)
{
	struct snap_memory_desc md = {.size = MEM, .page_size = 4096, .flags = SNAP_MEM_LAYER,
				      .depth = 1};
	static const char *bad_names[] = {"..", ".", "a/b", "c 1", "c\n"};
	uint64_t pages[WORDS] = {1};
	uint8_t id[SNAP_MEM_ID_LEN] = {0}, *buf;
	struct snapshot s;
	char dir[128], err[256];

	dir_of(dir, sizeof(dir), "bad");
	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		write_state("bad", &md, bad_names[i], id, pages);
		assert_int_equal(snapshot_load(dir, &buf, &s, err, sizeof(err)), -EINVAL);
	}
	md.depth = 0; /* a layer over nothing */
	write_state("bad", &md, "c1", id, pages);
	assert_int_equal(snapshot_load(dir, &buf, &s, err, sizeof(err)), -EINVAL);
	md.depth = SNAP_MAX_MEM_DEPTH + 1;
	write_state("bad", &md, "c1", id, pages);
	assert_int_equal(snapshot_load(dir, &buf, &s, err, sizeof(err)), -EINVAL);
	md.flags = 0;
	md.depth = 1; /* a full file that claims a depth */
	write_state("bad", &md, NULL, NULL, NULL);
	assert_int_equal(snapshot_load(dir, &buf, &s, err, sizeof(err)), -EINVAL);
	md.flags = SNAP_MEM_LAYER;
	write_state("bad", &md, NULL, NULL, NULL); /* a layer without parent or map */
	assert_int_equal(snapshot_load(dir, &buf, &s, err, sizeof(err)), -EINVAL);
	md.depth = 1; /* and the good one loads */
	write_state("bad", &md, "c1", id, pages);
	assert_int_equal(snapshot_load(dir, &buf, &s, err, sizeof(err)), 0);
	snapshot_free(&s);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_chain_reads_back_each_view, setup, teardown),
		cmocka_unit_test_setup_teardown(test_layers_mapped_then_saved_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(test_detach_folds_down, setup, teardown),
		cmocka_unit_test_setup_teardown(test_parent_replaced_or_gone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_layer_sections, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_fork_freeze, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_fork_of_private_view, setup, teardown),
	};

	return cmocka_run_group_tests_name("snapshot_mem", tests, NULL, NULL);
}
