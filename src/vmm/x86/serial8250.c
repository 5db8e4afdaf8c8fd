#include "vmm/x86/serial8250.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"

/* Register offsets and bits (the 16550A data sheet; Linux's serial_reg.h). */
#define REG_RBR_THR 0
#define REG_IER 1
#define REG_IIR_FCR 2
#define REG_LCR 3
#define REG_MCR 4
#define REG_LSR 5
#define REG_MSR 6
#define REG_SCR 7

#define IER_RDI 0x01
#define IER_THRI 0x02
#define IIR_NO_INT 0x01
#define IIR_THRI 0x02
#define IIR_RDI 0x04
#define IIR_FIFO_ON 0xc0
#define FCR_ENABLE 0x01
#define FCR_CLEAR_RX 0x02
#define LCR_DLAB 0x80
#define MCR_DTR 0x01
#define MCR_RTS 0x02
#define MCR_OUT1 0x04
#define MCR_OUT2 0x08
#define MCR_LOOP 0x10
#define LSR_DR 0x01
#define LSR_THRE 0x20
#define LSR_TEMT 0x40
#define MSR_CTS 0x10
#define MSR_DSR 0x20
#define MSR_RI 0x40
#define MSR_DCD 0x80

static uint8_t iir_value(const struct serial8250_state *s)
{
	uint8_t fifo = (s->fcr & FCR_ENABLE) ? IIR_FIFO_ON : 0;

	if ((s->ier & IER_RDI) && s->rx_count)
		return fifo | IIR_RDI;
	if ((s->ier & IER_THRI) && s->thr_ipending)
		return fifo | IIR_THRI;
	return fifo | IIR_NO_INT;
}

/* Called with the lock held after every state change. */
static void update_irq(struct serial8250 *u)
{
	int level = !(iir_value(&u->s) & IIR_NO_INT);

	if (level != u->irq_level) {
		u->irq_level = level;
		if (u->set_irq)
			u->set_irq(u->irq_ctx, level);
	}
}

static bool rx_push(struct serial8250_state *s, uint8_t b)
{
	if (s->rx_count == SERIAL_FIFO_LEN)
		return false;
	s->rx[(s->rx_head + s->rx_count) % SERIAL_FIFO_LEN] = b;
	s->rx_count++;
	return true;
}

static uint8_t rx_pop(struct serial8250 *u)
{
	struct serial8250_state *s = &u->s;
	uint8_t b;

	if (!s->rx_count)
		return 0;
	b = s->rx[s->rx_head];
	s->rx_head = (s->rx_head + 1) % SERIAL_FIFO_LEN;
	s->rx_count--;
	pthread_cond_broadcast(&u->rx_space);
	return b;
}

static void transmit(struct serial8250 *u, uint8_t b)
{
	if (u->s.mcr & MCR_LOOP) {
		rx_push(&u->s, b);
	} else {
		if (u->out_fd >= 0)
			write_all(u->out_fd, &b, 1); /* a closed terminal is not our problem */
		if (u->tx_hook)
			u->tx_hook(u->tx_ctx, b);
	}
	u->s.thr_ipending = 1;
}

static uint8_t msr_value(const struct serial8250_state *s)
{
	uint8_t m = 0;

	if (!(s->mcr & MCR_LOOP))
		return s->msr;
	/* Loopback wires the modem outputs back to the inputs. */
	if (s->mcr & MCR_RTS) m |= MSR_CTS;
	if (s->mcr & MCR_DTR) m |= MSR_DSR;
	if (s->mcr & MCR_OUT1) m |= MSR_RI;
	if (s->mcr & MCR_OUT2) m |= MSR_DCD;
	return m;
}

static uint8_t reg_read(struct serial8250 *u, uint64_t off)
{
	struct serial8250_state *s = &u->s;
	uint8_t v;

	switch (off) {
	case REG_RBR_THR:
		return (s->lcr & LCR_DLAB) ? s->dll : rx_pop(u);
	case REG_IER:
		return (s->lcr & LCR_DLAB) ? s->dlm : s->ier;
	case REG_IIR_FCR:
		v = iir_value(s);
		/* Reading IIR while it reports THRE acknowledges that interrupt. */
		if ((v & 0x0f) == IIR_THRI)
			s->thr_ipending = 0;
		return v;
	case REG_LCR:
		return s->lcr;
	case REG_MCR:
		return s->mcr;
	case REG_LSR:
		v = LSR_THRE | LSR_TEMT | s->lsr_err | (s->rx_count ? LSR_DR : 0);
		s->lsr_err = 0;
		return v;
	case REG_MSR:
		return msr_value(s);
	default:
		return s->scr;
	}
}

static void reg_write(struct serial8250 *u, uint64_t off, uint8_t v)
{
	struct serial8250_state *s = &u->s;

	switch (off) {
	case REG_RBR_THR:
		if (s->lcr & LCR_DLAB)
			s->dll = v;
		else
			transmit(u, v);
		break;
	case REG_IER:
		if (s->lcr & LCR_DLAB) {
			s->dlm = v;
			break;
		}
		/* Enabling THRE interrupts with an empty THR raises one at once. */
		if (!(s->ier & IER_THRI) && (v & IER_THRI))
			s->thr_ipending = 1;
		s->ier = v & 0x0f;
		break;
	case REG_IIR_FCR:
		s->fcr = v & (FCR_ENABLE | 0xc0);
		if (v & FCR_CLEAR_RX) {
			s->rx_count = 0;
			s->rx_head = 0;
			pthread_cond_broadcast(&u->rx_space);
		}
		break;
	case REG_LCR:
		s->lcr = v;
		break;
	case REG_MCR:
		s->mcr = v & 0x1f;
		break;
	case REG_SCR:
		s->scr = v;
		break;
	default:
		break; /* LSR and MSR are read-only */
	}
}

static void serial_bus_read(void *opaque, uint64_t off, uint8_t *data, uint32_t size)
{
	struct serial8250 *u = opaque;

	pthread_mutex_lock(&u->lock);
	for (uint32_t i = 0; i < size; i++)
		data[i] = off + i < 8 ? reg_read(u, off + i) : 0xff;
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
}

static void serial_bus_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t size)
{
	struct serial8250 *u = opaque;

	pthread_mutex_lock(&u->lock);
	for (uint32_t i = 0; i < size && off + i < 8; i++)
		reg_write(u, off + i, data[i]);
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
}

void serial8250_init(struct serial8250 *u, int out_fd,
		     void (*set_irq)(void *ctx, int level), void *irq_ctx)
{
	memset(u, 0, sizeof(*u));
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->rx_space, NULL);
	u->s.version = SERIAL8250_STATE_VERSION;
	u->s.msr = MSR_DCD | MSR_DSR | MSR_CTS; /* a cable is plugged in */
	u->s.dll = 12;                          /* 9600 baud, what firmware leaves */
	u->out_fd = out_fd;
	u->set_irq = set_irq;
	u->irq_ctx = irq_ctx;
	u->bus = (struct bus_dev){
		.name = "serial8250", .base = SERIAL_COM1_PORT, .len = 8, .opaque = u,
		.read = serial_bus_read, .write = serial_bus_write,
	};
}

void serial8250_destroy(struct serial8250 *u)
{
	pthread_mutex_destroy(&u->lock);
	pthread_cond_destroy(&u->rx_space);
}

size_t serial8250_receive(struct serial8250 *u, const uint8_t *buf, size_t len)
{
	size_t n = 0;

	pthread_mutex_lock(&u->lock);
	while (n < len && rx_push(&u->s, buf[n]))
		n++;
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
	return n;
}

bool serial8250_rx_enabled(struct serial8250 *u)
{
	bool on;

	pthread_mutex_lock(&u->lock);
	on = u->s.ier & IER_RDI;
	pthread_mutex_unlock(&u->lock);
	return on;
}

size_t serial8250_wait_space(struct serial8250 *u, int timeout_ms)
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
	while (u->s.rx_count == SERIAL_FIFO_LEN) {
		if (pthread_cond_timedwait(&u->rx_space, &u->lock, &ts) == ETIMEDOUT)
			break;
	}
	space = SERIAL_FIFO_LEN - u->s.rx_count;
	pthread_mutex_unlock(&u->lock);
	return space;
}

void serial8250_save(struct serial8250 *u, struct serial8250_state *out)
{
	pthread_mutex_lock(&u->lock);
	*out = u->s;
	pthread_mutex_unlock(&u->lock);
}

int serial8250_restore(struct serial8250 *u, const struct serial8250_state *in)
{
	if (in->version != SERIAL8250_STATE_VERSION || in->rx_head >= SERIAL_FIFO_LEN ||
	    in->rx_count > SERIAL_FIFO_LEN)
		return -EINVAL;
	pthread_mutex_lock(&u->lock);
	u->s = *in;
	u->irq_level = -1; /* force the line to be driven to the restored level */
	update_irq(u);
	pthread_mutex_unlock(&u->lock);
	return 0;
}

/* ---- in the VMM's device table (hw/device.h) ---- */

/* The UART and the line it raises; the UART first, so that the VMM's
 * console finds it (serial8250_device). */
struct serial_dev {
	struct serial8250 u;
	const struct device_env *env;
};

static void dev_irq(void *ctx, int level)
{
	struct serial_dev *d = ctx;

	d->env->set_irq(d->env->ctx, d->env->gsi, level);
}

static int dev_create(const struct device_env *env, void **dev, const char **why)
{
	struct serial_dev *d = calloc(1, sizeof(*d));
	int err;

	if (!d)
		return -ENOMEM;
	d->env = env;
	serial8250_init(&d->u, env->cfg->console_out, dev_irq, d);
	if ((err = bus_register(env->pio, &d->u.bus))) {
		*why = "cannot claim the serial port's I/O ports";
		serial8250_destroy(&d->u);
		free(d);
		return err;
	}
	*dev = d;
	return 0;
}

static void dev_destroy(void *dev)
{
	serial8250_destroy(dev);
	free(dev);
}

static void dev_save(void *dev, void *state) { serial8250_save(dev, state); }
static int dev_restore(void *dev, const void *state) { return serial8250_restore(dev, state); }

const struct device_ops serial8250_device = {
	.name = "serial",
	.what = "serial port",
	.create = dev_create,
	.destroy = dev_destroy,
	.state_len = sizeof(struct serial8250_state),
	.save = dev_save,
	.restore = dev_restore,
};
