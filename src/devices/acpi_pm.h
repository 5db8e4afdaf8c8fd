/* The ACPI sleep control and status registers (hardware-reduced ACPI): the
 * guest powers off by writing SLP_TYP=S5 with SLP_EN, which ends the VM.
 * No state to save: the registers are write-to-act. */
#ifndef KOSA8_ACPI_PM_H
#define KOSA8_ACPI_PM_H

#include "vmm/bus.h"

struct acpi_pm {
	struct bus_dev bus;
	void (*poweroff)(void *ctx);
	void *ctx;
};

void acpi_pm_init(struct acpi_pm *pm, void (*poweroff)(void *ctx), void *ctx);

#endif
