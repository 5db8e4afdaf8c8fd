#include "virtio/queue.h"

#include <errno.h>
#include <linux/virtio_ring.h>
#include <string.h>

#include "common/log.h"

/* Ring sizes from the spec (2.7.5, 2.7.6, 2.7.8), with the event fields. */
#define DESC_SIZE 16
#define AVAIL_SIZE(n) (4u + 2u * (n) + 2u)
#define USED_SIZE(n) (4u + 8u * (n) + 2u)

struct desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags;
	uint16_t next;
};

static uint16_t load16(const uint8_t *p)
{
	return __atomic_load_n((const uint16_t *)p, __ATOMIC_ACQUIRE);
}

static void store16(uint8_t *p, uint16_t v)
{
	__atomic_store_n((uint16_t *)p, v, __ATOMIC_RELEASE);
}

/* One descriptor copied out of guest memory, so later checks see one value. */
static struct desc load_desc(const uint8_t *table, uint32_t i)
{
	struct desc d;

	memcpy(&d, table + (size_t)i * DESC_SIZE, sizeof(d));
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return d;
}

int virtq_activate(struct virtq *q, const struct guest_mem *mem)
{
	uint16_t n = q->size;

	if (n == 0 || n > VIRTQ_MAX_SIZE || (n & (n - 1)))
		return -EINVAL;
	/* Alignment from the spec's table in 2.7: 16, 2 and 4 bytes. */
	if ((q->desc_gpa & 15) || (q->avail_gpa & 1) || (q->used_gpa & 3))
		return -EINVAL;
	q->desc = guest_mem_ptr(mem, q->desc_gpa, (uint64_t)n * DESC_SIZE);
	q->avail = guest_mem_ptr(mem, q->avail_gpa, AVAIL_SIZE(n));
	q->used = guest_mem_ptr(mem, q->used_gpa, USED_SIZE(n));
	if (!q->desc || !q->avail || !q->used)
		return -EINVAL;
	q->mem = mem;
	return 0;
}

void virtq_reset(struct virtq *q)
{
	memset(q, 0, sizeof(*q));
}

void virtq_suppress_kicks(struct virtq *q, bool on)
{
	uint16_t want = on ? VRING_USED_F_NO_NOTIFY : 0;

	/* Already so (a window that expired asked again before it closed):
	 * no second write, dirty mark or fence. */
	if (!q->used || q->event_idx || load16(q->used) == want)
		return;
	store16(q->used, want);
	/* Our own write into guest memory: the next incremental checkpoint
	 * must hold it (KVM logs only the guest's writes). */
	guest_mem_mark(q->mem, q->used, 2);
	/* The flag's store before our next look at avail->idx; the driver
	 * orders its avail->idx store before its load of the flag. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

bool virtq_has_work(const struct virtq *q)
{
	return q->avail && load16(q->avail + 2) != q->last_avail;
}

static int add_buffer(struct virtq *q, struct virtq_chain *c, const struct desc *d,
		      bool *seen_write)
{
	bool write = d->flags & VRING_DESC_F_WRITE;
	uint8_t *p;

	if (c->nout + c->nin >= VIRTQ_MAX_SIZE)
		return -EINVAL; /* longer than the queue: a loop or a lie */
	if (!write && *seen_write)
		return -EINVAL; /* readable after writable (2.7.4.2) */
	p = guest_mem_ptr(q->mem, d->addr, d->len);
	if (!p)
		return -EINVAL;
	c->iov[c->nout + c->nin] = (struct virtq_iov){.base = p, .len = d->len};
	if (write) {
		*seen_write = true;
		c->nin++;
		c->in_bytes += d->len;
	} else {
		c->nout++;
		c->out_bytes += d->len;
	}
	return 0;
}

/* Walks an indirect table (2.7.5.3): one level only, no NEXT out of it. */
static int walk_indirect(struct virtq *q, struct virtq_chain *c, const struct desc *ind,
			 bool *seen_write)
{
	const uint8_t *table;
	uint32_t n, i = 0, steps = 0;
	int err;

	if (!q->indirect_ok || (ind->len % DESC_SIZE) || ind->len == 0 ||
	    (ind->flags & VRING_DESC_F_NEXT))
		return -EINVAL;
	n = ind->len / DESC_SIZE;
	if (n > VIRTQ_MAX_SIZE)
		return -EINVAL;
	table = guest_mem_ptr(q->mem, ind->addr, ind->len);
	if (!table)
		return -EINVAL;
	for (;;) {
		struct desc d = load_desc(table, i);
		if ((d.flags & VRING_DESC_F_INDIRECT) || ++steps > n)
			return -EINVAL;
		if ((err = add_buffer(q, c, &d, seen_write)))
			return err;
		if (!(d.flags & VRING_DESC_F_NEXT))
			return 0;
		if (d.next >= n)
			return -EINVAL;
		i = d.next;
	}
}

/* With VIRTIO_RING_F_EVENT_IDX the driver kicks only when its avail->idx
 * passes the avail_event we publish (2.7.10).  We publish it only when we find
 * the ring empty, so a driver that keeps adding while we work kicks once, not
 * once per chain.  Then we look again: a chain the driver added before it
 * could see the new avail_event (and so did not kick for) is ours to take.
 * Returns the avail index, as loaded after the publication. */
static uint16_t arm_kick(struct virtq *q)
{
	uint8_t *event = q->used + 4 + 8u * q->size;

	store16(event, q->last_avail);
	guest_mem_mark(q->mem, event, 2);
	/* Our avail_event store before our avail->idx load; the driver orders
	 * its avail->idx store before its avail_event load the same way. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return load16(q->avail + 2);
}

int virtq_pop(struct virtq *q, struct virtq_chain *c)
{
	uint16_t avail_idx, head, i, steps = 0;
	bool seen_write = false;
	int err;

	if (!q->ready || !q->avail)
		return 0;
	avail_idx = load16(q->avail + 2);
	if (avail_idx == q->last_avail && q->event_idx)
		avail_idx = arm_kick(q);
	if (avail_idx == q->last_avail)
		return 0;
	/* The driver can be at most a full ring ahead of us. */
	if ((uint16_t)(avail_idx - q->last_avail) > q->size)
		return -EINVAL;
	head = load16(q->avail + 4 + 2u * (q->last_avail % q->size));
	if (head >= q->size)
		return -EINVAL;
	c->head = head;
	c->nout = c->nin = 0;
	c->out_bytes = c->in_bytes = 0;
	i = head;
	for (;;) {
		struct desc d = load_desc(q->desc, i);
		if (++steps > q->size)
			return -EINVAL; /* a loop */
		if (d.flags & VRING_DESC_F_INDIRECT) {
			if ((err = walk_indirect(q, c, &d, &seen_write)))
				return err;
			break;
		}
		if ((err = add_buffer(q, c, &d, &seen_write)))
			return err;
		if (!(d.flags & VRING_DESC_F_NEXT))
			break;
		if (d.next >= q->size)
			return -EINVAL;
		i = d.next;
	}
	q->last_avail++;
	return 1;
}

int virtq_push(struct virtq *q, const struct virtq_chain *c, uint32_t written)
{
	uint8_t *elem;

	if (!q->used || c->head >= q->size)
		return -EINVAL;
	/* Everything a device may have written into the chain, and the ring
	 * entry: the next incremental checkpoint must hold these pages (KVM
	 * logs only the guest's own writes).  Chains are pushed in the same
	 * loop turn they are filled, never across a checkpoint. */
	for (uint16_t i = c->nout; i < c->nout + c->nin; i++)
		guest_mem_mark(q->mem, c->iov[i].base, c->iov[i].len);
	elem = q->used + 4 + 8u * (q->used_idx % q->size);
	memcpy(elem, &(uint32_t){c->head}, 4);
	memcpy(elem + 4, &written, 4);
	q->used_idx++;
	/* The element must be visible before the index that publishes it. */
	store16(q->used + 2, q->used_idx);
	guest_mem_mark(q->mem, q->used + 2, 2);
	guest_mem_mark(q->mem, elem, 8);
	return 0;
}

bool virtq_should_notify(struct virtq *q)
{
	uint16_t old = q->signalled_used, now = q->used_idx, event;

	/* Order our used->idx store before reading the driver's suppression. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!q->avail)
		return false;
	if (q->event_idx) {
		event = load16(q->avail + 4 + 2u * q->size);
		q->signalled_used = now;
		/* vring_need_event(): did used->idx cross used_event since last time? */
		return (uint16_t)(now - event - 1) < (uint16_t)(now - old);
	}
	return !(load16(q->avail) & VRING_AVAIL_F_NO_INTERRUPT);
}

size_t virtq_read_out(const struct virtq_chain *c, size_t off, void *dst, size_t len)
{
	uint8_t *d = dst;
	size_t done = 0;

	for (uint16_t i = 0; i < c->nout && done < len; i++) {
		const struct virtq_iov *v = &c->iov[i];
		if (off >= v->len) {
			off -= v->len;
			continue;
		}
		size_t n = v->len - off < len - done ? v->len - off : len - done;
		memcpy(d + done, v->base + off, n);
		done += n;
		off = 0;
	}
	return done;
}

size_t virtq_write_in(const struct virtq_chain *c, size_t off, const void *src, size_t len)
{
	const uint8_t *s = src;
	size_t done = 0;

	for (uint16_t i = c->nout; i < c->nout + c->nin && done < len; i++) {
		const struct virtq_iov *v = &c->iov[i];
		if (off >= v->len) {
			off -= v->len;
			continue;
		}
		size_t n = v->len - off < len - done ? v->len - off : len - done;
		memcpy(v->base + off, s + done, n);
		done += n;
		off = 0;
	}
	return done;
}
