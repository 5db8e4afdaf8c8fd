/* The ACPI PM1a event and control registers: the guest powers off by
 * writing SLP_TYP=S5 with SLP_EN to PM1a_CNT, which ends the VM.  The event
 * block never reports an event.  Its only state is the enable register,
 * which Linux writes and never needs back across a checkpoint: nothing to
 * save. */
#ifndef KOSA8_ACPI_PM_H
#define KOSA8_ACPI_PM_H

#include "vmm/bus.h"

struct acpi_pm {
	struct bus_dev evt_bus, cnt_bus;
	uint16_t pm1_enable;
	void (*poweroff)(void *ctx);
	void *ctx;
};

void acpi_pm_init(struct acpi_pm *pm, void (*poweroff)(void *ctx), void *ctx);

#endif
