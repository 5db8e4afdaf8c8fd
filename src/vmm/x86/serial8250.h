/* A 16550A UART (the PC's COM1 at 0x3f8, IRQ 4): the guest's console.
 *
 * The model is what Linux's 8250 driver needs and no more: divisor latch,
 * a 64-byte receive FIFO, transmit that completes at once, THRE and
 * receive-data interrupts, loopback (the driver's probe uses it), and the
 * scratch register.  Bytes the guest sends go to an output fd; the host feeds
 * input with serial8250_receive(). */
#ifndef KOSA8_SERIAL8250_H
#define KOSA8_SERIAL8250_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/bus.h"
#include "hw/device.h"

#define SERIAL_COM1_PORT 0x3f8
#define SERIAL_COM1_IRQ 4
#define SERIAL_FIFO_LEN 64

/* Everything the device is: saved and restored as one versioned record. */
struct serial8250_state {
	uint32_t version;
	uint8_t dll, dlm, ier, fcr, lcr, mcr, lsr_err, msr, scr;
	uint8_t thr_ipending;
	uint8_t rx[SERIAL_FIFO_LEN];
	uint32_t rx_head, rx_count;
};
#define SERIAL8250_STATE_VERSION 1

struct serial8250 {
	struct bus_dev bus;
	pthread_mutex_t lock;
	pthread_cond_t rx_space; /* signalled when the guest drains the FIFO */
	struct serial8250_state s;
	int out_fd;              /* where transmitted bytes go; -1 discards */
	void (*set_irq)(void *ctx, int level);
	void *irq_ctx;
	int irq_level;
	void (*tx_hook)(void *ctx, uint8_t byte); /* optional: sees every byte sent */
	void *tx_ctx;
};

void serial8250_init(struct serial8250 *u, int out_fd,
		     void (*set_irq)(void *ctx, int level), void *irq_ctx);
void serial8250_destroy(struct serial8250 *u);

/* Host -> guest bytes.  Returns how many fit in the FIFO (0 when full). */
size_t serial8250_receive(struct serial8250 *u, const uint8_t *buf, size_t len);
/* Whether the guest's driver listens (receive interrupts enabled): until it
 * does, the host holds input back, since a driver opening the port clears
 * the FIFO and would drop what was typed during boot. */
bool serial8250_rx_enabled(struct serial8250 *u);
/* Blocks until the FIFO has room or timeout_ms passes; returns free bytes. */
size_t serial8250_wait_space(struct serial8250 *u, int timeout_ms);

void serial8250_save(struct serial8250 *u, struct serial8250_state *out);
/* Refuses a record of another version or with impossible values (-EINVAL). */
int serial8250_restore(struct serial8250 *u, const struct serial8250_state *in);

/* COM1 in the VMM's device table.  Its instance starts with a struct
 * serial8250, which the VMM's console input feeds. */
extern const struct device_ops serial8250_device;

#endif
