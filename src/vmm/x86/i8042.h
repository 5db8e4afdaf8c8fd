/* The part of the PC keyboard controller a guest without a keyboard uses:
 * the status port reads "input buffer empty", and command 0xfe pulses the
 * CPU reset line (Linux's reboot=k path), which ends the VM as a reboot.
 * It has no state to save. */
#ifndef KOSA8_I8042_H
#define KOSA8_I8042_H

#include "hw/bus.h"
#include "hw/device.h"

#define I8042_DATA_PORT 0x60
#define I8042_CMD_PORT 0x64
#define I8042_CMD_RESET 0xfe

struct i8042 {
	struct bus_dev data_bus, cmd_bus;
	void (*reset)(void *ctx);
	void *ctx;
};

void i8042_init(struct i8042 *k, void (*reset)(void *ctx), void *ctx);

extern const struct device_ops i8042_device;

#endif
