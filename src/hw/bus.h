/* Port I/O and MMIO dispatch: a device claims a range and gets reads and
 * writes with the offset inside it.  Accesses nobody claims read as all ones
 * (what an empty ISA bus returns) and are logged once per address. */
#ifndef KOSA8_BUS_H
#define KOSA8_BUS_H

#include <stdbool.h>
#include <stdint.h>

struct bus_dev {
	const char *name;
	uint64_t base, len;
	void *opaque;
	/* size is 1, 2, 4 or 8; data is little-endian guest bytes. */
	void (*read)(void *opaque, uint64_t off, uint8_t *data, uint32_t size);
	void (*write)(void *opaque, uint64_t off, const uint8_t *data, uint32_t size);
};

#define BUS_MAX_DEVS 32

struct bus {
	const char *name; /* "pio" or "mmio", for the log */
	struct bus_dev *devs[BUS_MAX_DEVS];
	int ndevs;
};

/* Fails with -EEXIST on an overlap and -ENOSPC when the bus is full. */
int bus_register(struct bus *b, struct bus_dev *d);
/* Returns true if a device took the access. */
bool bus_access(struct bus *b, uint64_t addr, uint8_t *data, uint32_t size, bool write);

#endif
