/* The ACPI PM1a event and control registers: the guest powers off by
 * writing SLP_TYP=S5 with SLP_EN to PM1a_CNT, which ends the VM.  The event
 * block never reports an event.  Its only state is the enable register,
 * which Linux writes and never needs back across a checkpoint: nothing to
 * save. */
#ifndef KOSA8_ACPI_PM_H
#define KOSA8_ACPI_PM_H

#include "hw/bus.h"
#include "hw/device.h"

/* PM1a event block (status, enable: 2 bytes each) and control block. */
#define ACPI_PM1_EVT_PORT       0x600
#define ACPI_PM1_EVT_LEN        4
#define ACPI_PM1_CNT_PORT       0x604
#define ACPI_PM1_CNT_LEN        2
#define ACPI_S5_SLEEP_TYPE      5    /* the value our \_S5 package announces */
#define ACPI_PM1_SCI_EN         0x0001 /* ACPI 6.4, 4.8.3.2.1: PM1 control bits */
#define ACPI_PM1_SLP_TYP_SHIFT  10
#define ACPI_PM1_SLP_TYP_MASK   0x1c00
#define ACPI_PM1_SLP_EN         0x2000
#define ACPI_SCI_IRQ            9

struct acpi_pm {
	struct bus_dev evt_bus, cnt_bus;
	uint16_t pm1_enable;
	void (*poweroff)(void *ctx);
	void *ctx;
};

void acpi_pm_init(struct acpi_pm *pm, void (*poweroff)(void *ctx), void *ctx);

extern const struct device_ops acpi_pm_device;

#endif
