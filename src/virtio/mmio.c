#include "virtio/mmio.h"

#include <errno.h>
#include <linux/virtio_config.h>
#include <linux/virtio_mmio.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

#define MAGIC 0x74726976 /* "virt" */
#define VENDOR_ID 0x384b534f /* "OSK8" */
#define S_ACK VIRTIO_CONFIG_S_ACKNOWLEDGE
#define S_DRIVER VIRTIO_CONFIG_S_DRIVER
#define S_FEATURES_OK VIRTIO_CONFIG_S_FEATURES_OK
#define S_DRIVER_OK VIRTIO_CONFIG_S_DRIVER_OK
#define S_NEEDS_RESET VIRTIO_CONFIG_S_NEEDS_RESET
#define S_FAILED VIRTIO_CONFIG_S_FAILED

static uint64_t device_features(const struct virtio_mmio *t)
{
	return t->ops->features | (1ULL << VIRTIO_F_VERSION_1_BIT);
}

static void update_irq(struct virtio_mmio *t)
{
	int level = t->s.int_status ? 1 : 0;

	if (!t->set_irq || level == t->irq_level)
		return;
	t->irq_level = level;
	if (t->irq_cost)
		t->irq_raised_ns = level ? mono_ns() : 0;
	t->set_irq(t->irq_ctx, t->gsi, level);
}

/* The driver acknowledged: what the interrupt cost, for a device that
 * weighs waiting against interrupting (virtio/coalesce.h). */
static void time_ack(struct virtio_mmio *t)
{
	if (t->irq_cost && t->irq_raised_ns && !t->s.int_status)
		coalesce_cost_sample(t->irq_cost, mono_ns() - t->irq_raised_ns);
}

bool virtio_mmio_driver_ok(const struct virtio_mmio *t)
{
	return (t->s.status & S_DRIVER_OK) && !(t->s.status & S_NEEDS_RESET);
}

bool virtio_mmio_has_feature(const struct virtio_mmio *t, unsigned bit)
{
	return bit < 64 && (t->s.driver_features >> bit) & 1;
}

void virtio_mmio_fail(struct virtio_mmio *t, const char *why)
{
	log_warn_once(0x56494f, (uint64_t)t->bus.base, "virtio %s at 0x%llx: %s; device needs reset (logged once)",
		 t->ops->name, (unsigned long long)t->bus.base, why);
	if (t->s.status & S_NEEDS_RESET)
		return;
	t->s.status |= S_NEEDS_RESET;
	t->s.int_status |= VIRTIO_MMIO_INT_CONFIG;
	update_irq(t);
}

void virtio_mmio_notify_used(struct virtio_mmio *t, uint16_t q)
{
	if (q >= t->ops->nqueues || !virtq_should_notify(&t->s.queues[q]))
		return;
	t->s.int_status |= VIRTIO_MMIO_INT_VRING;
	update_irq(t);
}

static void device_reset(struct virtio_mmio *t)
{
	if (t->ops->reset)
		t->ops->reset(t);
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++)
		virtq_reset(&t->s.queues[i]);
	t->s.status = 0;
	t->s.int_status = 0;
	t->s.driver_features = 0;
	t->s.dev_feat_sel = t->s.drv_feat_sel = t->s.queue_sel = 0;
	update_irq(t);
}

static struct virtq *selected_queue(struct virtio_mmio *t)
{
	return t->s.queue_sel < t->ops->nqueues ? &t->s.queues[t->s.queue_sel] : NULL;
}

static uint32_t reg_read(struct virtio_mmio *t, uint32_t off)
{
	struct virtq *q = selected_queue(t);

	switch (off) {
	case VIRTIO_MMIO_MAGIC_VALUE: return MAGIC;
	case VIRTIO_MMIO_VERSION: return 2;
	case VIRTIO_MMIO_DEVICE_ID: return t->ops->device_id;
	case VIRTIO_MMIO_VENDOR_ID: return VENDOR_ID;
	case VIRTIO_MMIO_DEVICE_FEATURES:
		return t->s.dev_feat_sel < 2 ? (uint32_t)(device_features(t) >> (32 * t->s.dev_feat_sel)) : 0;
	case VIRTIO_MMIO_QUEUE_NUM_MAX: return q ? VIRTQ_MAX_SIZE : 0;
	case VIRTIO_MMIO_QUEUE_READY: return q ? q->ready : 0;
	case VIRTIO_MMIO_INTERRUPT_STATUS: return t->s.int_status;
	case VIRTIO_MMIO_STATUS: return t->s.status;
	case VIRTIO_MMIO_CONFIG_GENERATION: return t->s.config_gen;
	default: return 0;
	}
}

/* Status writes (2.1, 3.1.1): only reset or setting more bits, in order. */
static void write_status(struct virtio_mmio *t, uint32_t v)
{
	uint32_t old = t->s.status;

	if (v == 0) {
		device_reset(t);
		return;
	}
	if ((v & old) != (old & ~(uint32_t)S_NEEDS_RESET) || (v & ~0xcfu)) {
		virtio_mmio_fail(t, "driver cleared or set invalid status bits");
		return;
	}
	if ((v & S_FEATURES_OK) && !(old & S_FEATURES_OK)) {
		/* Modern only: without VERSION_1 the features are not acceptable,
		 * and the driver will see FEATURES_OK did not stick. */
		if (!(v & S_DRIVER) ||
		    !virtio_mmio_has_feature(t, VIRTIO_F_VERSION_1_BIT) ||
		    (t->s.driver_features & ~device_features(t)))
			v &= ~(uint32_t)S_FEATURES_OK;
	}
	if ((v & S_DRIVER_OK) && !(v & S_FEATURES_OK)) {
		virtio_mmio_fail(t, "driver set DRIVER_OK before FEATURES_OK");
		return;
	}
	t->s.status = v | (old & S_NEEDS_RESET);
	if ((v & S_DRIVER_OK) && !(old & S_DRIVER_OK) && t->ops->activate)
		t->ops->activate(t);
}

static void set_addr_half(uint64_t *a, uint32_t v, bool high)
{
	*a = high ? (*a & 0xffffffffULL) | ((uint64_t)v << 32) : (*a & ~0xffffffffULL) | v;
}

static void write_queue_reg(struct virtio_mmio *t, struct virtq *q, uint32_t off, uint32_t v)
{
	/* Queue layout may only change while the queue is not ready (4.2.2.2). */
	if (q->ready && off != VIRTIO_MMIO_QUEUE_READY) {
		virtio_mmio_fail(t, "driver changed a live queue");
		return;
	}
	switch (off) {
	case VIRTIO_MMIO_QUEUE_NUM: q->size = (uint16_t)(v <= VIRTQ_MAX_SIZE ? v : 0); break;
	case VIRTIO_MMIO_QUEUE_DESC_LOW: set_addr_half(&q->desc_gpa, v, false); break;
	case VIRTIO_MMIO_QUEUE_DESC_HIGH: set_addr_half(&q->desc_gpa, v, true); break;
	case VIRTIO_MMIO_QUEUE_AVAIL_LOW: set_addr_half(&q->avail_gpa, v, false); break;
	case VIRTIO_MMIO_QUEUE_AVAIL_HIGH: set_addr_half(&q->avail_gpa, v, true); break;
	case VIRTIO_MMIO_QUEUE_USED_LOW: set_addr_half(&q->used_gpa, v, false); break;
	case VIRTIO_MMIO_QUEUE_USED_HIGH: set_addr_half(&q->used_gpa, v, true); break;
	case VIRTIO_MMIO_QUEUE_READY:
		if (!v) {
			q->ready = 0;
			break;
		}
		q->indirect_ok = virtio_mmio_has_feature(t, VIRTIO_F_INDIRECT_BIT);
		q->event_idx = virtio_mmio_has_feature(t, VIRTIO_F_EVENT_IDX_BIT);
		if (virtq_activate(q, t->mem) < 0) {
			virtio_mmio_fail(t, "queue size or ring addresses are invalid");
			break;
		}
		q->ready = 1;
		break;
	}
}

static void reg_write(struct virtio_mmio *t, uint32_t off, uint32_t v)
{
	struct virtq *q = selected_queue(t);

	switch (off) {
	case VIRTIO_MMIO_DEVICE_FEATURES_SEL: t->s.dev_feat_sel = v; break;
	case VIRTIO_MMIO_DRIVER_FEATURES_SEL: t->s.drv_feat_sel = v; break;
	case VIRTIO_MMIO_DRIVER_FEATURES:
		if (t->s.status & S_FEATURES_OK)
			virtio_mmio_fail(t, "driver changed features after FEATURES_OK");
		else if (t->s.drv_feat_sel < 2)
			set_addr_half(&t->s.driver_features, v, t->s.drv_feat_sel == 1);
		break;
	case VIRTIO_MMIO_QUEUE_SEL: t->s.queue_sel = v; break;
	case VIRTIO_MMIO_QUEUE_NOTIFY:
		t->notify_exits++;
		if (v < t->ops->nqueues && t->s.queues[v].ready && virtio_mmio_driver_ok(t) &&
		    t->ops->notify)
			t->ops->notify(t, (uint16_t)v);
		break;
	case VIRTIO_MMIO_INTERRUPT_ACK:
		t->s.int_status &= ~v;
		time_ack(t);
		update_irq(t);
		break;
	case VIRTIO_MMIO_STATUS: write_status(t, v); break;
	case VIRTIO_MMIO_QUEUE_NUM: case VIRTIO_MMIO_QUEUE_READY:
	case VIRTIO_MMIO_QUEUE_DESC_LOW: case VIRTIO_MMIO_QUEUE_DESC_HIGH:
	case VIRTIO_MMIO_QUEUE_AVAIL_LOW: case VIRTIO_MMIO_QUEUE_AVAIL_HIGH:
	case VIRTIO_MMIO_QUEUE_USED_LOW: case VIRTIO_MMIO_QUEUE_USED_HIGH:
		if (q)
			write_queue_reg(t, q, off, v);
		break;
	default:
		break;
	}
}

static void mmio_read(void *opaque, uint64_t off, uint8_t *data, uint32_t size)
{
	struct virtio_mmio *t = opaque;
	uint32_t v;

	pthread_mutex_lock(&t->lock);
	if (off >= VIRTIO_MMIO_CONFIG) {
		uint32_t c = (uint32_t)off - VIRTIO_MMIO_CONFIG;
		memset(data, 0, size);
		if (c < t->ops->config_len && size <= t->ops->config_len - c && t->ops->config_read)
			t->ops->config_read(t, c, data, size);
	} else if (size == 4 && !(off & 3)) {
		v = reg_read(t, (uint32_t)off);
		memcpy(data, &v, 4);
	} else {
		memset(data, 0xff, size); /* registers are 32-bit only (4.2.2.2) */
	}
	pthread_mutex_unlock(&t->lock);
}

static void mmio_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t size)
{
	struct virtio_mmio *t = opaque;
	uint32_t v;

	pthread_mutex_lock(&t->lock);
	if (off >= VIRTIO_MMIO_CONFIG) {
		uint32_t c = (uint32_t)off - VIRTIO_MMIO_CONFIG;
		if (c < t->ops->config_len && size <= t->ops->config_len - c && t->ops->config_write)
			t->ops->config_write(t, c, data, size);
	} else if (size == 4 && !(off & 3)) {
		memcpy(&v, data, 4);
		reg_write(t, (uint32_t)off, v);
	}
	pthread_mutex_unlock(&t->lock);
}

void virtio_mmio_init(struct virtio_mmio *t, const struct virtio_dev_ops *ops, void *dev,
		      const struct guest_mem *mem, uint64_t base, uint32_t gsi,
		      void (*set_irq)(void *ctx, uint32_t gsi, int level), void *irq_ctx)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	t->ops = ops;
	t->dev = dev;
	t->mem = mem;
	t->gsi = gsi;
	t->set_irq = set_irq;
	t->irq_ctx = irq_ctx;
	t->irq_level = -1;
	t->s.version = VIRTIO_MMIO_STATE_VERSION;
	t->bus = (struct bus_dev){.name = ops->name, .base = base, .len = VIRTIO_MMIO_SIZE,
				  .opaque = t, .read = mmio_read, .write = mmio_write};
}

void virtio_mmio_destroy(struct virtio_mmio *t)
{
	pthread_mutex_lock(&t->lock);
	if (t->ops->reset)
		t->ops->reset(t);
	pthread_mutex_unlock(&t->lock);
	pthread_mutex_destroy(&t->lock);
}

int virtio_mmio_cmdline(const struct virtio_mmio *t, char *buf, size_t len)
{
	int n = snprintf(buf, len, "virtio_mmio.device=0x%x@0x%llx:%u", VIRTIO_MMIO_SIZE,
			 (unsigned long long)t->bus.base, t->gsi);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

void virtio_mmio_save(struct virtio_mmio *t, struct virtio_mmio_state *out)
{
	pthread_mutex_lock(&t->lock);
	*out = t->s;
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
		out->queues[i].mem = NULL;
		out->queues[i].desc = out->queues[i].avail = out->queues[i].used = NULL;
	}
	pthread_mutex_unlock(&t->lock);
}

int virtio_mmio_restore(struct virtio_mmio *t, const struct virtio_mmio_state *in)
{
	struct virtio_mmio_state s = *in;

	if (s.version != VIRTIO_MMIO_STATE_VERSION || (s.status & ~0xcfu))
		return -EINVAL;
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
		struct virtq *q = &s.queues[i];
		q->mem = NULL;
		q->desc = q->avail = q->used = NULL;
		if (q->ready && (i >= t->ops->nqueues || virtq_activate(q, t->mem) < 0))
			return -EINVAL;
	}
	pthread_mutex_lock(&t->lock);
	t->s = s;
	pthread_mutex_unlock(&t->lock);
	/* The hypervisor's line came from elsewhere: set it from the state. */
	virtio_mmio_resync_irq(t);
	return 0;
}

void virtio_mmio_resync_irq(struct virtio_mmio *t)
{
	pthread_mutex_lock(&t->lock);
	t->irq_level = -1;
	update_irq(t);
	pthread_mutex_unlock(&t->lock);
}

/* Puts the notify register of each of t's queues in the hypervisor as a
 * doorbell on fd, the device's own wake-up eventfd: a guest's notify then
 * wakes the device's I/O thread with no exit to the VMM (each such exit is
 * a round trip through user space, the costliest part of a request under
 * nested virtualization).  The devices check that the queue is live
 * themselves, as the transport does for a notify that exits.  Without
 * doorbells notifies exit as before: slower, not wrong. */
static void add_doorbells(const struct virtio_mmio *t, const struct device_env *env, int fd)
{
	for (uint16_t q = 0; q < t->ops->nqueues; q++)
		if (env->doorbell(env->ctx, t->bus.base + VIRTIO_MMIO_QUEUE_NOTIFY, 4, q, fd)) {
			log_info("%s: no doorbell in the hypervisor from queue %u on; those notifies exit to the VMM",
				 t->ops->name, q);
			return;
		}
}

int virtio_mmio_attach(struct virtio_mmio *t, const struct device_env *env, int kick_fd)
{
	int err = bus_register(env->mmio, &t->bus);

	if (!err && kick_fd >= 0 && env->doorbell)
		add_doorbells(t, env, kick_fd);
	return err;
}

int virtio_device_cmdline(void *dev, char *buf, size_t len)
{
	return virtio_mmio_cmdline(dev, buf, len);
}

void virtio_device_resync_irq(void *dev)
{
	virtio_mmio_resync_irq(dev);
}
