/* Guest RAM: one memfd, mapped once into the VMM, shown to the guest as up
 * to two regions (below the 32-bit MMIO hole and above 4 GiB).
 *
 * The memfd is the unit that checkpoint, rewind and fork will work on: it can
 * be written out, mapped back MAP_PRIVATE, or handed to another process. */
#ifndef KOSA8_GUEST_MEM_H
#define KOSA8_GUEST_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Everything from 3 GiB to 4 GiB is left for device MMIO, the IOAPIC, the
 * LAPIC and KVM's private pages; RAM above 3 GiB continues at 4 GiB. */
#define GUEST_MMIO_HOLE_START 0xC0000000ULL
#define GUEST_HIGH_RAM_START 0x100000000ULL

/* Layers a private view can have mapped over its file (SNAP_MAX_MEM_DEPTH). */
#define GUEST_MEM_MAX_LAYERS 16

struct guest_region {
	uint64_t gpa;
	uint64_t size;
	uint8_t *host; /* where the region is mapped in the VMM */
};

struct guest_mem {
	int memfd;      /* -1 when RAM is a private view of a checkpoint's file */
	uint64_t size;  /* total RAM bytes */
	uint8_t *base;  /* the whole memfd, mapped contiguously */
	struct guest_region regions[2];
	int nregions;
	/* RAM mapped MAP_PRIVATE from a checkpoint's memory file: the file stays
	 * open so that the next checkpoint can ask it where its data is. */
	bool from_file;
	int file_fd;
	/* Checkpoint layers mapped over it (guest_mem_map_layer), kept open for
	 * the same reason: their pages are data the bottom file lacks. */
	int layer_fds[GUEST_MEM_MAX_LAYERS];
	int nlayers;
	/* Pages the VMM itself wrote (virtio buffers and used rings) since the
	 * last checkpoint, one bit per page of RAM; KVM's dirty log has the
	 * guest's own writes.  NULL when the VM is not tracked. */
	uint64_t *dirty;
};

int guest_mem_create(struct guest_mem *m, uint64_t size);
/* RAM from a checkpoint's memory file, mapped MAP_PRIVATE: pages are read
 * from the file only when touched, and writes stay in this process
 * (copy-on-write), so restores and forks share the file and never change
 * it.  The file must be exactly size bytes (-EINVAL otherwise). */
int guest_mem_open_file(struct guest_mem *m, const char *path, uint64_t size);
/* The same from an open file of exactly size bytes, which m keeps (a
 * frozen memfd handed over by a live fork, guest_mem_freeze). */
int guest_mem_open_fd(struct guest_mem *m, int fd, uint64_t size);
/* Live fork: RAM in a memfd becomes a private view of that memfd, at the
 * same address, and the memfd is sealed against writes.  The memfd is then
 * a frozen image of RAM at this moment, which forks map privately too, so
 * nothing is copied; it stays open as file_fd (from_file is set), for the
 * next checkpoint and for writing it out.  The VM must be paused.
 * Returns 1 when the seal took, 0 when RAM is frozen but the kernel refused
 * the seal, -errno when nothing changed (-EINVAL: RAM is not a shared
 * memfd). */
int guest_mem_freeze(struct guest_mem *m);
/* The reverse of a private view: RAM that is a private view of a file
 * (a restored or live-forked VM) becomes memfd, mapped shared at the same
 * address, which the caller has filled with a copy of RAM; the file and
 * its layers are closed.  The VM must be paused.  -errno when nothing
 * changed (-EINVAL: RAM is not a private view). */
int guest_mem_adopt(struct guest_mem *m, int memfd);
void guest_mem_destroy(struct guest_mem *m);
/* For RAM from guest_mem_open_file: maps pages [first, end) of the layer
 * file fd (RAM-sized, pages at their own offsets, holes reading as zeros)
 * MAP_PRIVATE over the view, so they too are read only when touched and
 * shared with every other view of that layer.  The first call for a layer
 * keeps fd (the caller gives it up); -E2BIG past GUEST_MEM_MAX_LAYERS. */
int guest_mem_map_layer(struct guest_mem *m, int fd, uint64_t first, uint64_t end);

/* Starts tracking the VMM's writes (guest_mem_mark); -ENOMEM. */
int guest_mem_track(struct guest_mem *m);
/* Notes that the VMM wrote [p, p+len), a range inside RAM, for the next
 * incremental checkpoint.  Device threads call it concurrently. */
void guest_mem_mark(const struct guest_mem *m, const void *p, size_t len);
/* Words in a bitmap of one bit per page of RAM. */
static inline uint64_t guest_mem_bitmap_words(const struct guest_mem *m)
{
	return (m->size / 4096 + 63) / 64;
}

/* Lays out the regions for a RAM size without allocating (used by create,
 * and by unit tests of the e820 map). */
void guest_mem_layout(uint64_t size, struct guest_region regions[2], int *nregions);

/* Host pointer for [gpa, gpa+len), or NULL unless the whole range lies in
 * one RAM region.  Every guest-supplied address goes through this check. */
void *guest_mem_ptr(const struct guest_mem *m, uint64_t gpa, uint64_t len);

/* Highest guest-physical RAM address below 4 GiB, plus one. */
uint64_t guest_mem_low_end(const struct guest_mem *m);

#endif
