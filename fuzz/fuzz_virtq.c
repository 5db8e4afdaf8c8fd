/* Fuzzes the split-virtqueue parser with a guest that writes anything: the
 * input is laid over the rings and the data area of a small guest RAM, the
 * first bytes choose the queue size and ring addresses.  Every pop must end
 * in a chain inside guest RAM or a clean -EINVAL. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "virtio/queue.h"

#define RAM (256 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct guest_mem mem;
static struct virtq_chain chain;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct virtq q;
	uint16_t hdr[4];

	if (!mem.base && guest_mem_create(&mem, RAM) < 0)
		abort();
	if (size < sizeof(hdr))
		return 0;
	memcpy(hdr, data, sizeof(hdr));
	memset(mem.base, 0, 0x8000);
	/* The rest of the input is the guest's view of the first pages. */
	memcpy(mem.base, data + sizeof(hdr), size - sizeof(hdr) < 0x8000 ? size - sizeof(hdr) : 0x8000);
	virtq_reset(&q);
	q.size = (uint16_t)(1u << (hdr[0] % 9));
	q.desc_gpa = (hdr[1] % 0x40) * 0x100;
	q.avail_gpa = (hdr[2] % 0x40) * 0x100;
	q.used_gpa = (hdr[3] % 0x40) * 0x100 + 0x4000;
	q.indirect_ok = hdr[0] & 0x100 ? 1 : 0;
	q.event_idx = hdr[0] & 0x200 ? 1 : 0; /* avail_event written, used_event read */
	if (virtq_activate(&q, &mem) < 0)
		return 0;
	q.ready = 1;
	for (int i = 0; i < 2 * VIRTQ_MAX_SIZE; i++) {
		int r = virtq_pop(&q, &chain);
		if (r <= 0)
			break;
		/* Touch every byte the parser handed out: ASan checks the bounds. */
		uint8_t sink = 0;
		for (uint16_t j = 0; j < chain.nout + chain.nin; j++)
			for (uint32_t k = 0; k < chain.iov[j].len; k += 512)
				sink ^= chain.iov[j].base[k];
		virtq_write_in(&chain, 0, &sink, 1);
		virtq_push(&q, &chain, 1);
		virtq_should_notify(&q);
	}
	return 0;
}
