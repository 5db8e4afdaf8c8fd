/* The 8250 UART register model as Linux's 8250 driver drives it, the i8042
 * reset, the ACPI sleep register, the bus, and `kosa8 vm` argument parsing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/cmd_vm.h"
#include "hw/bus.h"
#include "vmm/x86/acpi.h"
#include "vmm/x86/acpi_pm.h"
#include "vmm/x86/i8042.h"
#include "vmm/x86/serial8250.h"

static int irq_level = -1, irq_changes;
static void record_irq(void *ctx, int level) { irq_level = level; irq_changes++; }

static uint8_t rd(struct serial8250 *u, int reg)
{
	uint8_t v;

	u->bus.read(u, (uint64_t)reg, &v, 1);
	return v;
}

static void wr(struct serial8250 *u, int reg, uint8_t v) { u->bus.write(u, (uint64_t)reg, &v, 1); }

static void test_uart_probe_like_linux(void **state)
{
	struct serial8250 u;

	serial8250_init(&u, -1, record_irq, NULL);
	/* Scratch register round trip. */
	wr(&u, 7, 0xa5);
	assert_int_equal(rd(&u, 7), 0xa5);
	/* Divisor latch: DLAB hides RBR/IER behind DLL/DLM. */
	wr(&u, 3, 0x80);
	wr(&u, 0, 0x01);
	wr(&u, 1, 0x00);
	assert_int_equal(rd(&u, 0), 0x01);
	wr(&u, 3, 0x03);
	/* Loopback with OUT2|RTS must read back DCD|CTS (0x90), as autoconfig checks. */
	wr(&u, 4, 0x10 | 0x0a);
	assert_int_equal(rd(&u, 6) & 0xf0, 0x90);
	/* In loopback a transmitted byte is received. */
	wr(&u, 0, 'Z');
	assert_true(rd(&u, 5) & 0x01);
	assert_int_equal(rd(&u, 0), 'Z');
	assert_false(rd(&u, 5) & 0x01);
	wr(&u, 4, 0x0b);
	/* FIFO enabled shows in IIR's top bits. */
	wr(&u, 2, 0x07);
	assert_int_equal(rd(&u, 2) & 0xc0, 0xc0);
	serial8250_destroy(&u);
}

static void test_uart_interrupts(void **state)
{
	struct serial8250 u;
	int fds[2];
	char out[4];

	assert_int_equal(pipe(fds), 0);
	serial8250_init(&u, fds[1], record_irq, NULL);
	irq_level = -1;
	wr(&u, 4, 0x08);
	/* Enabling THRE interrupts with an empty THR raises one at once. */
	wr(&u, 1, 0x02);
	assert_int_equal(irq_level, 1);
	assert_int_equal(rd(&u, 2) & 0x0f, 0x02);
	/* Reading IIR acknowledged it. */
	assert_int_equal(irq_level, 0);
	assert_int_equal(rd(&u, 2) & 0x0f, 0x01);
	/* Transmitting goes to the output fd and raises THRE again. */
	wr(&u, 0, 'h');
	wr(&u, 0, 'i');
	assert_int_equal(irq_level, 1);
	assert_int_equal(read(fds[0], out, 2), 2);
	assert_memory_equal(out, "hi", 2);
	wr(&u, 1, 0x00);
	assert_int_equal(irq_level, 0);
	/* Received data interrupt, and the FIFO never overflows. */
	assert_false(serial8250_rx_enabled(&u));
	wr(&u, 1, 0x01);
	assert_true(serial8250_rx_enabled(&u));
	uint8_t many[100];
	memset(many, 'x', sizeof(many));
	assert_int_equal(serial8250_receive(&u, many, sizeof(many)), SERIAL_FIFO_LEN);
	assert_int_equal(irq_level, 1);
	assert_int_equal(rd(&u, 2) & 0x0f, 0x04);
	for (int i = 0; i < SERIAL_FIFO_LEN; i++)
		assert_int_equal(rd(&u, 0), 'x');
	assert_int_equal(irq_level, 0);
	assert_int_equal(serial8250_wait_space(&u, 10), SERIAL_FIFO_LEN);
	serial8250_destroy(&u);
	close(fds[0]);
	close(fds[1]);
}

static void test_uart_save_restore(void **state)
{
	struct serial8250 a, b;
	struct serial8250_state s;

	serial8250_init(&a, -1, record_irq, NULL);
	wr(&a, 3, 0x83);
	wr(&a, 0, 0x03);
	wr(&a, 3, 0x03);
	wr(&a, 7, 0x42);
	wr(&a, 4, 0x08);
	wr(&a, 1, 0x01);
	serial8250_receive(&a, (const uint8_t *)"abc", 3);
	assert_int_equal(rd(&a, 0), 'a');
	serial8250_save(&a, &s);

	serial8250_init(&b, -1, record_irq, NULL);
	irq_level = -1;
	assert_int_equal(serial8250_restore(&b, &s), 0);
	assert_int_equal(irq_level, 1); /* the pending receive interrupt comes back */
	assert_int_equal(rd(&b, 7), 0x42);
	assert_int_equal(rd(&b, 0), 'b');
	assert_int_equal(rd(&b, 0), 'c');
	wr(&b, 3, 0x83);
	assert_int_equal(rd(&b, 0), 0x03);

	s.version = 99;
	assert_int_equal(serial8250_restore(&b, &s), -EINVAL);
	s.version = SERIAL8250_STATE_VERSION;
	s.rx_count = SERIAL_FIFO_LEN + 1;
	assert_int_equal(serial8250_restore(&b, &s), -EINVAL);
	serial8250_destroy(&a);
	serial8250_destroy(&b);
}

static int resets, poweroffs;
static void on_reset(void *ctx) { resets++; }
static void on_poweroff(void *ctx) { poweroffs++; }

static void test_i8042_and_acpi_pm(void **state)
{
	struct i8042 k;
	struct acpi_pm pm;
	struct bus pio = {.name = "pio"};
	uint8_t v;

	i8042_init(&k, on_reset, NULL);
	acpi_pm_init(&pm, on_poweroff, NULL);
	assert_int_equal(bus_register(&pio, &k.data_bus), 0);
	assert_int_equal(bus_register(&pio, &k.cmd_bus), 0);
	assert_int_equal(bus_register(&pio, &pm.evt_bus), 0);
	assert_int_equal(bus_register(&pio, &pm.cnt_bus), 0);
	assert_int_equal(bus_register(&pio, &pm.cnt_bus), -EEXIST);
	/* Linux's kb_wait: status must say the input buffer is empty. */
	assert_true(bus_access(&pio, 0x64, &v, 1, false));
	assert_int_equal(v & 0x02, 0);
	v = 0xfe;
	bus_access(&pio, 0x64, &v, 1, true);
	assert_int_equal(resets, 1);
	/* The control register reads SCI_EN: always in ACPI mode. */
	uint16_t c = 0;
	bus_access(&pio, ACPI_PM1_CNT_PORT, (uint8_t *)&c, 2, false);
	assert_int_equal(c & 1, 1);
	/* Sleep type 3 is not S5; S5 without SLP_EN is not a request (Linux
	 * writes SLP_TYP first, then SLP_TYP with SLP_EN). */
	c = (3 << 10) | 0x2000;
	bus_access(&pio, ACPI_PM1_CNT_PORT, (uint8_t *)&c, 2, true);
	c = 5 << 10;
	bus_access(&pio, ACPI_PM1_CNT_PORT, (uint8_t *)&c, 2, true);
	assert_int_equal(poweroffs, 0);
	c = (5 << 10) | 0x2000;
	bus_access(&pio, ACPI_PM1_CNT_PORT, (uint8_t *)&c, 2, true);
	assert_int_equal(poweroffs, 1);
	/* The enable register reads back what was written; status stays clear. */
	uint16_t e = 0x0120, st = 0xffff;
	bus_access(&pio, ACPI_PM1_EVT_PORT + 2, (uint8_t *)&e, 2, true);
	e = 0;
	bus_access(&pio, ACPI_PM1_EVT_PORT + 2, (uint8_t *)&e, 2, false);
	assert_int_equal(e, 0x0120);
	bus_access(&pio, ACPI_PM1_EVT_PORT, (uint8_t *)&st, 2, false);
	assert_int_equal(st, 0);
	/* Nobody at 0x80: reads as all ones, not claimed. */
	uint8_t w[4] = {0};
	assert_false(bus_access(&pio, 0x80, w, 4, false));
	assert_int_equal(w[0] & w[1] & w[2] & w[3], 0xff);
	/* An access straddling a device's end is not claimed by it. */
	assert_false(bus_access(&pio, 0x64, w, 2, false));
}

static char *copies[32];
static int ncopies;

static int parse(const char *line, struct vm_args *a, const char **why)
{
	char *copy = strdup(line), *argv[32], *tok, *save = NULL;
	int argc = 0, r;

	for (tok = strtok_r(copy, " ", &save); tok && argc < 31; tok = strtok_r(NULL, " ", &save))
		argv[argc++] = tok;
	argv[argc] = NULL;
	r = vm_args_parse(argc, argv, a, why);
	/* a's strings point into copy: keep it for the checks, free at the end. */
	copies[ncopies++] = copy;
	return r;
}

static void test_vm_args(void **state)
{
	struct vm_args a;
	const char *why;

	assert_int_equal(parse("vm --kernel K --initrd I --mem 1G --cpus 2 --cmdline x", &a, &why), 0);
	assert_string_equal(a.kernel, "K");
	assert_string_equal(a.initrd, "I");
	assert_int_equal(a.mem, 1ULL << 30);
	assert_int_equal(a.cpus, 2);
	assert_string_equal(a.cmdline, "x");
	assert_int_equal(a.emulate, EMULATE_AUTO);
	assert_int_equal(parse("vm --kernel K", &a, &why), 0);
	assert_int_equal(a.mem, 512ULL << 20);
	assert_int_equal(a.cpus, 1);
	assert_int_equal(parse("vm --kernel K --no-emulate", &a, &why), 0);
	assert_int_equal(a.emulate, EMULATE_NEVER);

	assert_int_equal(parse("vm", &a, &why), -EINVAL);
	assert_non_null(strstr(why, "--kernel"));
	assert_int_equal(parse("vm --kernel K --cpus 0", &a, &why), -EINVAL);
	assert_non_null(strstr(why, "--cpus"));
	assert_int_equal(parse("vm --kernel K --cpus 255", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --kernel K --cpus 2x", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --kernel K --mem lots", &a, &why), -EINVAL);
	assert_non_null(strstr(why, "--mem"));
	assert_int_equal(parse("vm --kernel K --bogus", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --kernel K extra", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --kernel", &a, &why), -EINVAL);

	/* --jail-user: root only, with --jail, two ids neither 0 nor -1. */
	if (geteuid() == 0) {
		assert_int_equal(parse("vm --kernel K --jail --jail-user 1798832131:1798832128", &a, &why), 0);
		assert_true(a.jail_user);
		assert_int_equal(a.jail_uid, 1798832131u);
		assert_int_equal(a.jail_gid, 1798832128u);
		assert_int_equal(parse("vm --kernel K --jail-user 5:5", &a, &why), -EINVAL);
		assert_non_null(strstr(why, "--jail"));
	} else {
		assert_int_equal(parse("vm --kernel K --jail --jail-user 5:5", &a, &why), -EINVAL);
		assert_non_null(strstr(why, "root"));
	}
	assert_int_equal(parse("vm --kernel K --jail --jail-user 0:5", &a, &why), -EINVAL);
	assert_non_null(strstr(why, "UID:GID"));
	assert_int_equal(parse("vm --kernel K --jail --jail-user 5:0", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --kernel K --jail --jail-user 5", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --kernel K --jail --jail-user 5:", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --kernel K --jail --jail-user :5", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --kernel K --jail --jail-user 5:4294967295", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --kernel K --jail --jail-user 5:6x", &a, &why), -EINVAL);

	/* --restore-memfd: an open descriptor, with --restore only. */
	assert_int_equal(parse("vm --restore D --restore-memfd 2", &a, &why), 0);
	assert_int_equal(a.restore_memfd, 2);
	assert_int_equal(parse("vm --restore D", &a, &why), 0);
	assert_int_equal(a.restore_memfd, -1);
	assert_int_equal(parse("vm --kernel K --restore-memfd 2", &a, &why), -EINVAL);
	assert_non_null(strstr(why, "--restore DIR"));
	assert_int_equal(parse("vm --restore D --restore-memfd 987654", &a, &why), -EINVAL);
	assert_non_null(strstr(why, "open file descriptor"));
	assert_int_equal(parse("vm --restore D --restore-memfd -1", &a, &why), -EINVAL);
	assert_int_equal(parse("vm --restore D --restore-memfd 3x", &a, &why), -EINVAL);
	while (ncopies)
		free(copies[--ncopies]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uart_probe_like_linux),
		cmocka_unit_test(test_uart_interrupts),
		cmocka_unit_test(test_uart_save_restore),
		cmocka_unit_test(test_i8042_and_acpi_pm),
		cmocka_unit_test(test_vm_args),
	};
	return cmocka_run_group_tests_name("devices_legacy", tests, NULL, NULL);
}
