/* The VMM's device table (vmm/vm_devices.c) without KVM: which devices a
 * VM gets, where they sit on the buses, the kernel command line that
 * declares them, and the checkpoint sections they write and read back, in
 * the order docs/snapshot-format.md gives. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/util.h"
#include "devices/virtio_rng.h"
#include "devices/vmgenid.h"
#include "virtio/mmio.h"
#include "vmm/vm.h"
#include "vmm/x86/acpi_pm.h"
#include "vmm/x86/i8042.h"
#include "vmm/x86/serial8250.h"

static struct vm vm;
static uint32_t irq_gsi;
static int irq_level = -1;

/* No KVM here: the lines the devices raise end up in these. */
static void record_irq(void *ctx, uint32_t gsi, int level)
{
	irq_gsi = gsi;
	irq_level = level;
}

static void vm_init(void)
{
	const char *why = NULL;

	memset(&vm, 0, sizeof(vm));
	vm.cfg.console_in = vm.cfg.console_out = -1;
	/* The VM generation ID lives in RAM, below 1 MiB. */
	assert_int_equal(guest_mem_create(&vm.mem, 2 << 20), 0);
	assert_int_equal(pipe2(vm.stop_pipe, O_CLOEXEC | O_NONBLOCK), 0);
	assert_int_equal(vm_devices_create(&vm, &why), 0);
	/* The UART raises its line through the env it was lent, the virtio
	 * transport through the copy it took. */
	vm.dev_env[0].set_irq = record_irq;
	((struct virtio_rng *)vm_device(&vm, &virtio_rng_device))->mmio.set_irq = record_irq;
	irq_level = -1;
}

static void vm_fini(void)
{
	vm_devices_destroy(&vm);
	guest_mem_destroy(&vm.mem);
	close(vm.stop_pipe[0]);
	close(vm.stop_pipe[1]);
}

/* The lines raised on the VM generation ID's GSI, as levels in order. */
static char genid_levels[8];
static size_t genid_n;

static void record_genid(void *ctx, uint32_t gsi, int level)
{
	if (gsi == VMGENID_GSI && genid_n < sizeof(genid_levels) - 1)
		genid_levels[genid_n++] = (char)('0' + level);
}

/* Every VM (booted or restored) gets 16 fresh bytes where the ACPI tables
 * say, before anything runs; after a restore's interrupt controller is
 * loaded (resync), one edge on its line tells the guest to read them. */
static void test_vmgenid_new_id_and_edge(void **state)
{
	uint8_t first[VMGENID_LEN], zero[VMGENID_LEN] = {0};
	const uint8_t *id;

	vm_init();
	id = guest_mem_ptr(&vm.mem, VMGENID_ADDR, VMGENID_LEN);
	assert_non_null(id);
	assert_memory_not_equal(id, zero, VMGENID_LEN);
	memcpy(first, id, VMGENID_LEN);
	vm_fini();
	vm_init();
	id = guest_mem_ptr(&vm.mem, VMGENID_ADDR, VMGENID_LEN);
	assert_memory_not_equal(id, first, VMGENID_LEN);
	for (int i = 0; i < VM_MAX_DEVICES; i++)
		if (vm.devs[i] && vm.devs[i] == vm_device(&vm, &vmgenid_device))
			vm.dev_env[i].set_irq = record_genid;
	genid_n = 0;
	vm_devices_resync_irqs(&vm);
	genid_levels[genid_n] = 0;
	assert_string_equal(genid_levels, "10");
	vm_fini();
}

static uint8_t pio_read(uint16_t port)
{
	uint8_t v = 0;

	assert_true(bus_access(&vm.pio, port, &v, 1, false));
	return v;
}

static void pio_write(uint16_t port, uint8_t v) { assert_true(bus_access(&vm.pio, port, &v, 1, true)); }

static void test_default_machine(void **state)
{
	char cmd[256];
	uint32_t magic = 0;

	vm_init();
	/* The UART at COM1 (scratch register), the i8042 and the PM1 block. */
	pio_write(SERIAL_COM1_PORT + 7, 0x5a);
	assert_int_equal(pio_read(SERIAL_COM1_PORT + 7), 0x5a);
	pio_read(I8042_CMD_PORT);
	pio_read(ACPI_PM1_EVT_PORT);
	/* virtio-rng on the first virtio-mmio page; nothing on the next two. */
	assert_true(bus_access(&vm.mmio, VM_VIRTIO_MMIO_BASE, (uint8_t *)&magic, 4, false));
	assert_int_equal(magic, 0x74726976); /* "virt" */
	assert_false(bus_access(&vm.mmio, VM_VIRTIO_MMIO_BASE + VM_VIRTIO_MMIO_STRIDE,
				(uint8_t *)&magic, 4, false));
	assert_int_equal(vm_devices_cmdline(&vm, cmd, sizeof(cmd)), 0);
	assert_string_equal(cmd, "virtio_mmio.device=0x200@0xd0000000:5");
	assert_int_equal(vm_devices_cmdline(&vm, cmd, 20), -ENAMETOOLONG);
	assert_non_null(vm_device(&vm, &serial8250_device));
	assert_null(vm_disk(&vm));
	vm_fini();
}

/* The guest's reset and power-off reach the VM through the table's wiring. */
static void test_reset_and_poweroff(void **state)
{
	uint16_t slp = (uint16_t)(ACPI_PM1_SLP_EN | (ACPI_S5_SLEEP_TYPE << ACPI_PM1_SLP_TYP_SHIFT));

	vm_init();
	pio_write(I8042_CMD_PORT, I8042_CMD_RESET);
	assert_int_equal(vm.stop_reason, VM_STOP_RESET);
	vm_fini();
	vm_init();
	assert_true(bus_access(&vm.pio, ACPI_PM1_CNT_PORT, (uint8_t *)&slp, 2, true));
	assert_int_equal(vm.stop_reason, VM_STOP_POWEROFF);
	vm_fini();
}

/* The device sections of a writer's buffer, in the order written. */
static uint32_t sections(const struct snap_writer *w, struct snap_section *secs, uint32_t max)
{
	size_t off = SNAP_HEADER_LEN;
	uint32_t n = 0;

	while (off + SNAP_SECTION_HDR_LEN <= w->len && n < max) {
		secs[n].tag = get_le32(w->buf + off);
		secs[n].index = get_le32(w->buf + off + 4);
		secs[n].len = get_le32(w->buf + off + 8);
		secs[n].data = w->buf + off + SNAP_SECTION_HDR_LEN;
		off += SNAP_SECTION_HDR_LEN + ALIGN_UP((size_t)secs[n].len, (size_t)8);
		n++;
	}
	return n;
}

static void test_save_order_and_restore(void **state)
{
	struct snap_header h = {.ncpus = 1};
	struct snap_section secs[8];
	struct snapshot s = {.secs = secs};
	struct snap_writer w;
	const char *why = NULL;

	vm_init();
	pio_write(SERIAL_COM1_PORT + 7, 0x11);
	snap_writer_init(&w, &h);
	vm_devices_save(&vm, &w);
	assert_int_equal(w.err, 0);
	s.nsections = sections(&w, secs, 8);
	/* Serial, then rng: the order and sizes of a checkpoint's device records. */
	assert_int_equal(s.nsections, 2);
	assert_int_equal(secs[0].tag, SNAP_SEC_SERIAL);
	assert_int_equal(secs[0].len, sizeof(struct serial8250_state));
	assert_int_equal(secs[1].tag, SNAP_SEC_RNG);
	assert_int_equal(secs[1].len, sizeof(struct virtio_mmio_state));
	pio_write(SERIAL_COM1_PORT + 7, 0x22);
	assert_int_equal(vm_devices_restore(&vm, &s, &why), 0);
	assert_int_equal(pio_read(SERIAL_COM1_PORT + 7), 0x11);
	/* Restored devices give their lines' levels again; rng's is last. */
	assert_int_equal(irq_gsi, VM_VIRTIO_RNG_GSI);
	assert_int_equal(irq_level, 0);
	/* A record missing, or of another size, is refused by name. */
	s.nsections = 1;
	assert_int_equal(vm_devices_restore(&vm, &s, &why), -EINVAL);
	assert_string_equal(why, "checkpoint's virtio-rng state is missing or invalid");
	secs[0].len--;
	assert_int_equal(vm_devices_restore(&vm, &s, &why), -EINVAL);
	assert_string_equal(why, "checkpoint's serial port state is missing or invalid");
	snap_writer_free(&w);
	vm_fini();
}

/* A restore's options must ask for the devices its checkpoint has. */
static void test_check_restore(void **state)
{
	uint8_t rec[8] = {0};
	struct snap_section sec = {.tag = SNAP_SEC_VSOCK, .len = sizeof(rec), .data = rec};
	struct snapshot s = {.nsections = 1, .secs = &sec};
	const char *why = NULL;

	memset(&vm, 0, sizeof(vm));
	assert_int_equal(vm_devices_check_restore(&vm, &s, &why), -EINVAL);
	assert_string_equal(why, "this checkpoint has a vsock device: give --vsock PATH");
	vm.cfg.vsock_uds = "/run/x/v.sock";
	assert_int_equal(vm_devices_check_restore(&vm, &s, &why), 0);
	s.nsections = 0;
	assert_int_equal(vm_devices_check_restore(&vm, &s, &why), -EINVAL);
	assert_string_equal(why, "this checkpoint has no vsock device; leave out --vsock");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_machine),
		cmocka_unit_test(test_reset_and_poweroff),
		cmocka_unit_test(test_save_order_and_restore),
		cmocka_unit_test(test_check_restore),
		cmocka_unit_test(test_vmgenid_new_id_and_edge),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
