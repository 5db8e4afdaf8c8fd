#include "hw/bus.h"

#include <errno.h>
#include <string.h>

#include "common/log.h"

int bus_register(struct bus *b, struct bus_dev *d)
{
	if (d->len == 0 || d->base + d->len < d->base)
		return -EINVAL;
	for (int i = 0; i < b->ndevs; i++) {
		const struct bus_dev *o = b->devs[i];
		if (d->base < o->base + o->len && o->base < d->base + d->len)
			return -EEXIST;
	}
	if (b->ndevs == BUS_MAX_DEVS)
		return -ENOSPC;
	b->devs[b->ndevs++] = d;
	return 0;
}

static struct bus_dev *bus_find(struct bus *b, uint64_t addr, uint32_t size)
{
	for (int i = 0; i < b->ndevs; i++) {
		struct bus_dev *d = b->devs[i];
		if (addr >= d->base && addr - d->base < d->len &&
		    size <= d->len - (addr - d->base))
			return d;
	}
	return NULL;
}

bool bus_access(struct bus *b, uint64_t addr, uint8_t *data, uint32_t size, bool write)
{
	struct bus_dev *d = bus_find(b, addr, size);

	if (!d) {
		/* kind: the bus (p or m) in the high bits, read/write in bit 0 */
		log_once(((uint32_t)b->name[0] << 8) | write, addr,
			 "unhandled %s %s at 0x%llx (size %u)%s", b->name,
			 write ? "write" : "read", (unsigned long long)addr, size,
			 " (logged once)");
		if (!write)
			memset(data, 0xff, size);
		return false;
	}
	if (write) {
		if (d->write)
			d->write(d->opaque, addr - d->base, data, size);
	} else if (d->read) {
		d->read(d->opaque, addr - d->base, data, size);
	} else {
		memset(data, 0xff, size);
	}
	return true;
}
