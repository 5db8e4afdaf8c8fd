#include "hw/guest_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void guest_mem_layout(uint64_t size, struct guest_region regions[2], int *nregions)
{
	uint64_t low = size < GUEST_MMIO_HOLE_START ? size : GUEST_MMIO_HOLE_START;

	regions[0] = (struct guest_region){.gpa = 0, .size = low};
	*nregions = 1;
	if (size > low) {
		regions[1] = (struct guest_region){.gpa = GUEST_HIGH_RAM_START,
						   .size = size - low};
		*nregions = 2;
	}
}

/* The regions over a fresh mapping of size bytes at m->base. */
static void set_regions(struct guest_mem *m, uint64_t size)
{
	/* Guest memory is of no use in a core dump and may hold user secrets. */
	madvise(m->base, size, MADV_DONTDUMP);
	m->size = size;
	guest_mem_layout(size, m->regions, &m->nregions);
	m->regions[0].host = m->base;
	if (m->nregions == 2)
		m->regions[1].host = m->base + m->regions[0].size;
}

int guest_mem_create(struct guest_mem *m, uint64_t size)
{
	int err;

	memset(m, 0, sizeof(*m));
	m->memfd = -1;
	m->memfd = memfd_create("kosa8-guest-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (m->memfd < 0)
		return -errno;
	if (ftruncate(m->memfd, (off_t)size) < 0)
		goto fail_errno;
	/* The size is fixed for the VM's life: sealing it means a bug elsewhere
	 * (or a future fork child holding the fd) cannot shrink RAM under KVM. */
	fcntl(m->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
	m->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
		       m->memfd, 0);
	if (m->base == MAP_FAILED) {
		m->base = NULL;
		goto fail_errno;
	}
	set_regions(m, size);
	return 0;
fail_errno:
	err = -errno;
	guest_mem_destroy(m);
	return err;
}

int guest_mem_open_fd(struct guest_mem *m, int fd, uint64_t size)
{
	struct stat st;

	memset(m, 0, sizeof(*m));
	m->memfd = -1;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)
		return -EINVAL;
	m->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
	if (m->base == MAP_FAILED) {
		m->base = NULL;
		return -errno;
	}
	set_regions(m, size);
	m->from_file = true;
	m->file_fd = fd;
	return 0;
}

int guest_mem_open_file(struct guest_mem *m, const char *path, uint64_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), err;

	if (fd < 0)
		return -errno;
	if ((err = guest_mem_open_fd(m, fd, size)))
		close(fd);
	return err;
}

int guest_mem_freeze(struct guest_mem *m)
{
	if (m->memfd < 0 || m->from_file)
		return -EINVAL;
	/* The same address, so KVM's memory slots and every device pointer stay
	 * valid; KVM drops its mappings of the old pages (MMU notifier) and
	 * faults the new view in.  The contents are the same pages until
	 * someone writes. */
	if (mmap(m->base, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE | MAP_FIXED,
		 m->memfd, 0) == MAP_FAILED)
		return -errno;
	madvise(m->base, m->size, MADV_DONTDUMP);
	/* No shared writable mapping is left: from now on nobody, a fork's VMM
	 * included, can change the frozen pages (private views still can copy
	 * them).  A kernel that refuses the seal still has the base frozen by
	 * the VMM's own rules; the supervisor hands forks a read-only fd. */
	int sealed = fcntl(m->memfd, F_ADD_SEALS, F_SEAL_WRITE) == 0;

	m->from_file = true;
	m->file_fd = m->memfd;
	m->memfd = -1;
	return sealed;
}

int guest_mem_adopt(struct guest_mem *m, int memfd)
{
	if (!m->from_file || m->memfd >= 0)
		return -EINVAL;
	/* As in guest_mem_freeze: KVM's slots and device pointers keep the
	 * address; KVM faults the memfd's pages in. */
	if (mmap(m->base, m->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED,
		 memfd, 0) == MAP_FAILED)
		return -errno;
	madvise(m->base, m->size, MADV_DONTDUMP);
	close(m->file_fd);
	for (int i = 0; i < m->nlayers; i++)
		close(m->layer_fds[i]);
	m->nlayers = 0;
	m->from_file = false;
	m->file_fd = -1;
	m->memfd = memfd;
	return 0;
}

int guest_mem_track(struct guest_mem *m)
{
	if (!m->dirty && !(m->dirty = calloc(guest_mem_bitmap_words(m), sizeof(uint64_t))))
		return -ENOMEM;
	return 0;
}

void guest_mem_mark(const struct guest_mem *m, const void *p, size_t len)
{
	uintptr_t start = (uintptr_t)p - (uintptr_t)m->base;

	if (!m->dirty || !len || (uintptr_t)p < (uintptr_t)m->base || start >= m->size)
		return;
	for (uint64_t pg = start / 4096; pg <= (start + len - 1) / 4096 && pg < m->size / 4096; pg++)
		__atomic_fetch_or(&m->dirty[pg / 64], 1ULL << (pg % 64), __ATOMIC_RELAXED);
}

int guest_mem_map_layer(struct guest_mem *m, int fd, uint64_t first, uint64_t end)
{
	uint8_t *at = m->base + first * 4096;
	size_t len = (size_t)((end - first) * 4096);

	if (!m->from_file || end > m->size / 4096 || first >= end)
		return -EINVAL;
	if (!m->nlayers || m->layer_fds[m->nlayers - 1] != fd) {
		if (m->nlayers == GUEST_MEM_MAX_LAYERS)
			return -E2BIG;
		m->layer_fds[m->nlayers++] = fd;
	}
	if (mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE | MAP_FIXED, fd,
		 (off_t)(first * 4096)) == MAP_FAILED)
		return -errno;
	madvise(at, len, MADV_DONTDUMP);
	return 0;
}

void guest_mem_destroy(struct guest_mem *m)
{
	free(m->dirty);
	if (m->base)
		munmap(m->base, m->size);
	if (m->memfd >= 0)
		close(m->memfd);
	if (m->from_file)
		close(m->file_fd);
	for (int i = 0; i < m->nlayers; i++)
		close(m->layer_fds[i]);
	memset(m, 0, sizeof(*m));
	m->memfd = -1;
}

void *guest_mem_ptr(const struct guest_mem *m, uint64_t gpa, uint64_t len)
{
	for (int i = 0; i < m->nregions; i++) {
		const struct guest_region *r = &m->regions[i];
		/* Written to avoid overflow in gpa + len for hostile values. */
		if (gpa >= r->gpa && gpa - r->gpa <= r->size &&
		    len <= r->size - (gpa - r->gpa))
			return r->host + (gpa - r->gpa);
	}
	return NULL;
}

uint64_t guest_mem_low_end(const struct guest_mem *m)
{
	return m->regions[0].size;
}
