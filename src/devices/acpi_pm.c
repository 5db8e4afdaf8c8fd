#include "devices/acpi_pm.h"

#include <string.h>

#include "vmm/acpi.h"

static void pm_read(void *opaque, uint64_t off, uint8_t *data, uint32_t size)
{
	memset(data, 0, size); /* never "woken", nothing pending */
}

static void pm_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t size)
{
	struct acpi_pm *pm = opaque;
	uint8_t v = data[0];

	if (off != 0)
		return; /* the status register: writes clear bits we never set */
	if ((v & ACPI_SLP_EN) &&
	    ((v & ACPI_SLP_TYP_MASK) >> ACPI_SLP_TYP_SHIFT) == ACPI_S5_SLEEP_TYPE && pm->poweroff)
		pm->poweroff(pm->ctx);
}

void acpi_pm_init(struct acpi_pm *pm, void (*poweroff)(void *ctx), void *ctx)
{
	memset(pm, 0, sizeof(*pm));
	pm->poweroff = poweroff;
	pm->ctx = ctx;
	pm->bus = (struct bus_dev){.name = "acpi-pm", .base = ACPI_SLEEP_CONTROL_PORT, .len = 2,
				   .opaque = pm, .read = pm_read, .write = pm_write};
}
