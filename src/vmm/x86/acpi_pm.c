#include "vmm/x86/acpi_pm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void evt_read(void *opaque, uint64_t off, uint8_t *data, uint32_t size)
{
	struct acpi_pm *pm = opaque;
	uint8_t regs[4] = {0, 0, (uint8_t)pm->pm1_enable, (uint8_t)(pm->pm1_enable >> 8)};

	/* Status (0-1) never has an event; enable (2-3) reads back. */
	for (uint32_t i = 0; i < size; i++)
		data[i] = off + i < sizeof(regs) ? regs[off + i] : 0;
}

static void evt_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t size)
{
	struct acpi_pm *pm = opaque;

	for (uint32_t i = 0; i < size; i++) {
		if (off + i == 2)
			pm->pm1_enable = (uint16_t)((pm->pm1_enable & 0xff00) | data[i]);
		else if (off + i == 3)
			pm->pm1_enable = (uint16_t)((pm->pm1_enable & 0x00ff) | (data[i] << 8));
	}
}

static void cnt_read(void *opaque, uint64_t off, uint8_t *data, uint32_t size)
{
	uint8_t regs[2] = {ACPI_PM1_SCI_EN, 0}; /* always in ACPI mode */

	for (uint32_t i = 0; i < size; i++)
		data[i] = off + i < sizeof(regs) ? regs[off + i] : 0;
}

static void cnt_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t size)
{
	struct acpi_pm *pm = opaque;
	uint16_t v;

	/* Linux writes the whole 16-bit register: SLP_TYP first, then with SLP_EN. */
	if (off != 0 || size < 2)
		return;
	v = (uint16_t)(data[0] | (data[1] << 8));
	if ((v & ACPI_PM1_SLP_EN) &&
	    ((v & ACPI_PM1_SLP_TYP_MASK) >> ACPI_PM1_SLP_TYP_SHIFT) == ACPI_S5_SLEEP_TYPE &&
	    pm->poweroff)
		pm->poweroff(pm->ctx);
}

void acpi_pm_init(struct acpi_pm *pm, void (*poweroff)(void *ctx), void *ctx)
{
	memset(pm, 0, sizeof(*pm));
	pm->poweroff = poweroff;
	pm->ctx = ctx;
	pm->evt_bus = (struct bus_dev){.name = "acpi-pm1-evt", .base = ACPI_PM1_EVT_PORT,
				       .len = ACPI_PM1_EVT_LEN, .opaque = pm,
				       .read = evt_read, .write = evt_write};
	pm->cnt_bus = (struct bus_dev){.name = "acpi-pm1-cnt", .base = ACPI_PM1_CNT_PORT,
				       .len = ACPI_PM1_CNT_LEN, .opaque = pm,
				       .read = cnt_read, .write = cnt_write};
}

/* ---- in the VMM's device table (hw/device.h) ---- */

static int dev_create(const struct device_env *env, void **dev, const char **why)
{
	struct acpi_pm *pm = malloc(sizeof(*pm));
	int err;

	if (!pm)
		return -ENOMEM;
	acpi_pm_init(pm, env->poweroff, env->ctx);
	if ((err = bus_register(env->pio, &pm->evt_bus)) ||
	    (err = bus_register(env->pio, &pm->cnt_bus))) {
		*why = "cannot claim the ACPI PM1 I/O ports";
		free(pm);
		return err;
	}
	*dev = pm;
	return 0;
}

const struct device_ops acpi_pm_device = {
	.name = "acpi-pm",
	.what = "ACPI power management",
	.create = dev_create,
	.destroy = free,
};
