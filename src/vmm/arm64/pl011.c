#include "vmm/arm64/pl011.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fileio.h"

enum {
	REG_DR = 0x00, REG_RSR = 0x04, REG_FR = 0x18, REG_IBRD = 0x24, REG_FBRD = 0x28,
	REG_LCR_H = 0x2c, REG_CR = 0x30, REG_IFLS = 0x34, REG_IMSC = 0x38, REG_RIS = 0x3c,
	REG_MIS = 0x40, REG_ICR = 0x44, REG_DMACR = 0x48, REG_ID = 0xfe0,
};

#define FR_RXFE (1u << 4)
#define FR_RXFF (1u << 6)
#define FR_TXFE (1u << 7)
#define INT_RX (1u << 4)
#define INT_TX (1u << 5)
#define INT_RT (1u << 6)
#define INT_ALL 0x7ffu

/* PeriphID 0x00141011 (Arm, PL011 r1p5) and the PrimeCell CellID, one byte
 * per register from 0xfe0. */
static const uint8_t ids[8] = {0x11, 0x10, 0x14, 0x00, 0x0d, 0xf0, 0x05, 0xb1};

/* Called with the lock held after every state change. */
static void update_irq(struct pl011 *u)
{
	int level = (u->ris & u->imsc) != 0;

	if (level != u->irq_level) {
		u->irq_level = level;
		u->set_irq(u->irq_ctx, level);
	}
}

static uint32_t rx_pop(struct pl011 *u)
{
	uint32_t v;

	if (u->rx_count == 0)
		return 0;
	v = u->rx[u->rx_head];
	u->rx_head = (u->rx_head + 1) % PL011_FIFO_LEN;
	if (--u->rx_count == 0)
		u->ris &= ~(INT_RX | INT_RT);
	pthread_cond_broadcast(&u->rx_space);
	return v;
}

static uint32_t reg_read(struct pl011 *u, uint64_t off)
{
	if (off >= REG_ID && off < REG_ID + 32)
		return (off & 3) ? 0 : ids[(off - REG_ID) / 4];
	switch (off) {
	case REG_DR: return rx_pop(u);
	case REG_FR:
		return FR_TXFE | (u->rx_count ? 0 : FR_RXFE) |
		       (u->rx_count == PL011_FIFO_LEN ? FR_RXFF : 0);
	case REG_IBRD: return u->ibrd;
	case REG_FBRD: return u->fbrd;
	case REG_LCR_H: return u->lcr_h;
	case REG_CR: return u->cr;
	case REG_IFLS: return u->ifls;
	case REG_IMSC: return u->imsc;
	case REG_RIS: return u->ris;
	case REG_MIS: return u->ris & u->imsc;
	case REG_DMACR: return u->dmacr;
	default: return 0; /* RSR: no errors; reserved registers read as zero */
	}
}

static void reg_write(struct pl011 *u, uint64_t off, uint32_t v)
{
	switch (off) {
	case REG_DR: {
		uint8_t b = (uint8_t)v;
		if (u->out_fd >= 0)
			write_all(u->out_fd, &b, 1); /* a closed terminal is not our problem */
		u->ris |= INT_TX; /* sent at once: the FIFO is below its level again */
		break;
	}
	case REG_IBRD: u->ibrd = v & 0xffff; break;
	case REG_FBRD: u->fbrd = v & 0x3f; break;
	case REG_LCR_H: u->lcr_h = v & 0xff; break;
	case REG_CR: u->cr = v & 0xffff; break;
	case REG_IFLS: u->ifls = v & 0x3f; break;
	case REG_IMSC: u->imsc = v & INT_ALL; break;
	case REG_ICR:
		u->ris &= ~(v & INT_ALL);
		if (u->rx_count)
			u->ris |= INT_RX; /* data still waits: the line stays up */
		break;
	case REG_DMACR: u->dmacr = v & 7; break;
	default: break; /* RSR (clears errors we never have), read-only registers */
	}
}

/* Registers are 32 bits wide; the driver reads some 16 bits at a time. */
static void bus_read(void *opaque, uint64_t off, uint8_t *data, uint32_t size)
{
	struct pl011 *u = opaque;
	uint32_t v;

	pthread_mutex_lock(&u->lock);
	v = reg_read(u, off & ~3ULL) >> (8 * (off & 3));
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
	memset(data, 0, size);
	for (uint32_t i = 0; i < size && i < 4; i++)
		data[i] = (uint8_t)(v >> (8 * i));
}

static void bus_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t size)
{
	struct pl011 *u = opaque;
	uint32_t v = 0;

	if (off & 3)
		return; /* no register takes a write to its upper half */
	for (uint32_t i = 0; i < size && i < 4; i++)
		v |= (uint32_t)data[i] << (8 * i);
	pthread_mutex_lock(&u->lock);
	reg_write(u, off, v);
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
}

void pl011_init(struct pl011 *u, uint64_t base, int out_fd,
		void (*set_irq)(void *ctx, int level), void *irq_ctx)
{
	memset(u, 0, sizeof(*u));
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->rx_space, NULL);
	u->cr = 0x300;   /* TXE and RXE, the reset value */
	u->ifls = 0x12;  /* FIFO levels at half, the reset value */
	u->out_fd = out_fd;
	u->set_irq = set_irq;
	u->irq_ctx = irq_ctx;
	u->bus = (struct bus_dev){
		.name = "pl011", .base = base, .len = 0x1000, .opaque = u,
		.read = bus_read, .write = bus_write,
	};
}

void pl011_destroy(struct pl011 *u)
{
	pthread_mutex_destroy(&u->lock);
	pthread_cond_destroy(&u->rx_space);
}

size_t pl011_receive(struct pl011 *u, const uint8_t *buf, size_t len)
{
	size_t n = 0;

	pthread_mutex_lock(&u->lock);
	while (n < len && u->rx_count < PL011_FIFO_LEN) {
		u->rx[(u->rx_head + u->rx_count) % PL011_FIFO_LEN] = buf[n++];
		u->rx_count++;
	}
	if (n)
		u->ris |= INT_RX | INT_RT;
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
	return n;
}

bool pl011_rx_enabled(struct pl011 *u)
{
	bool on;

	pthread_mutex_lock(&u->lock);
	on = u->imsc & (INT_RX | INT_RT);
	pthread_mutex_unlock(&u->lock);
	return on;
}

size_t pl011_wait_space(struct pl011 *u, int timeout_ms)
{
	struct timespec ts;
	size_t space;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&u->lock);
	while (u->rx_count == PL011_FIFO_LEN)
		if (pthread_cond_timedwait(&u->rx_space, &u->lock, &ts) == ETIMEDOUT)
			break;
	space = PL011_FIFO_LEN - u->rx_count;
	pthread_mutex_unlock(&u->lock);
	return space;
}

/* ---- in the machine's device table (hw/device.h) ---- */

/* The UART first, so that the machine's console hooks take the device as one. */
struct pl011_dev {
	struct pl011 u;
	const struct device_env *env;
};

void pl011_save(struct pl011 *u, struct pl011_state *out)
{
	pthread_mutex_lock(&u->lock);
	*out = (struct pl011_state){
		.version = PL011_STATE_VERSION, .ris = u->ris, .imsc = u->imsc, .cr = u->cr,
		.lcr_h = u->lcr_h, .ibrd = u->ibrd, .fbrd = u->fbrd, .ifls = u->ifls,
		.dmacr = u->dmacr, .rx_head = u->rx_head, .rx_count = u->rx_count,
	};
	memcpy(out->rx, u->rx, sizeof(out->rx));
	pthread_mutex_unlock(&u->lock);
}

int pl011_restore(struct pl011 *u, const struct pl011_state *in)
{
	/* The file is not trusted: each field within what a write could set. */
	if (in->version != PL011_STATE_VERSION || in->rx_head >= PL011_FIFO_LEN ||
	    in->rx_count > PL011_FIFO_LEN || (in->ris | in->imsc) & ~INT_ALL ||
	    in->cr > 0xffff || in->lcr_h > 0xff || in->ibrd > 0xffff || in->fbrd > 0x3f ||
	    in->ifls > 0x3f || in->dmacr > 7)
		return -EINVAL;
	pthread_mutex_lock(&u->lock);
	u->ris = in->ris, u->imsc = in->imsc, u->cr = in->cr, u->lcr_h = in->lcr_h;
	u->ibrd = in->ibrd, u->fbrd = in->fbrd, u->ifls = in->ifls, u->dmacr = in->dmacr;
	u->rx_head = in->rx_head, u->rx_count = in->rx_count;
	memcpy(u->rx, in->rx, sizeof(u->rx));
	u->irq_level = (u->ris & u->imsc) != 0;
	pthread_mutex_unlock(&u->lock);
	return 0;
}

void pl011_resync_irq(struct pl011 *u)
{
	pthread_mutex_lock(&u->lock);
	u->irq_level = (u->ris & u->imsc) != 0;
	u->set_irq(u->irq_ctx, u->irq_level);
	pthread_mutex_unlock(&u->lock);
}

static void dev_save(void *dev, void *state) { pl011_save(dev, state); }
static int dev_restore(void *dev, const void *state) { return pl011_restore(dev, state); }
static void dev_resync_irq(void *dev) { pl011_resync_irq(dev); }

static void dev_irq(void *ctx, int level)
{
	struct pl011_dev *d = ctx;

	d->env->set_irq(d->env->ctx, d->env->gsi, level);
}

static int dev_create(const struct device_env *env, void **dev, const char **why)
{
	struct pl011_dev *d = calloc(1, sizeof(*d));
	int err;

	if (!d)
		return -ENOMEM;
	d->env = env;
	pl011_init(&d->u, env->mmio_base, env->cfg->console_out, dev_irq, d);
	if ((err = bus_register(env->mmio, &d->u.bus))) {
		*why = "cannot claim the PL011's MMIO page";
		pl011_destroy(&d->u);
		free(d);
		return err;
	}
	*dev = d;
	return 0;
}

static void dev_destroy(void *dev)
{
	pl011_destroy(dev);
	free(dev);
}

const struct device_ops pl011_device = {
	.name = "serial",
	.what = "PL011 UART",
	.create = dev_create,
	.destroy = dev_destroy,
	.state_len = sizeof(struct pl011_state),
	.save = dev_save,
	.restore = dev_restore,
	.resync_irq = dev_resync_irq,
};
