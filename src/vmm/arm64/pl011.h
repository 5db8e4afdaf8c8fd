/* An Arm PL011 UART (PrimeCell r1p5, as Linux's amba-pl011 driver and its
 * earlycon know it): the arm64 machine's console.  Transmit completes at
 * once; a 32-byte receive FIFO; the receive, receive-timeout and transmit
 * interrupts; the PrimeCell ID registers the AMBA bus probes by.  Bytes the
 * guest sends go to an output fd; the host feeds input with
 * pl011_receive(). */
#ifndef KOSA8_VMM_ARM64_PL011_H
#define KOSA8_VMM_ARM64_PL011_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/bus.h"
#include "hw/device.h"

#define PL011_FIFO_LEN 32

struct pl011 {
	struct bus_dev bus;
	pthread_mutex_t lock;
	pthread_cond_t rx_space;   /* signalled when the guest drains the FIFO */
	uint32_t ris, imsc, cr, lcr_h, ibrd, fbrd, ifls, dmacr;
	uint8_t rx[PL011_FIFO_LEN];
	uint32_t rx_head, rx_count;
	int out_fd;                /* where transmitted bytes go; -1 discards */
	void (*set_irq)(void *ctx, int level);
	void *irq_ctx;
	int irq_level;
};

/* Everything the guest sees of the UART, as a checkpoint holds it. */
#define PL011_STATE_VERSION 1
struct pl011_state {
	uint32_t version;
	uint32_t ris, imsc, cr, lcr_h, ibrd, fbrd, ifls, dmacr;
	uint32_t rx_head, rx_count;
	uint8_t rx[PL011_FIFO_LEN];
};

void pl011_init(struct pl011 *u, uint64_t base, int out_fd,
		void (*set_irq)(void *ctx, int level), void *irq_ctx);
void pl011_destroy(struct pl011 *u);

/* Host -> guest bytes.  Returns how many fit in the FIFO (0 when full). */
size_t pl011_receive(struct pl011 *u, const uint8_t *buf, size_t len);
/* Whether the guest's driver listens (receive interrupts unmasked). */
bool pl011_rx_enabled(struct pl011 *u);
/* Blocks until the FIFO has room or timeout_ms passes; returns free bytes. */
size_t pl011_wait_space(struct pl011 *u, int timeout_ms);

void pl011_save(struct pl011 *u, struct pl011_state *out);
/* -EINVAL for a state this UART cannot hold (another version, a FIFO
 * position out of range). */
int pl011_restore(struct pl011 *u, const struct pl011_state *in);
/* Tells the interrupt controller the line's level again. */
void pl011_resync_irq(struct pl011 *u);

/* In the arm64 machine's device table (vmm/arm64/machine.c). */
extern const struct device_ops pl011_device;

#endif
