/* vm_exit_describe: the line a supervisor logs when its VMM stops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <string.h>

#include "vmm/vm.h"

/* Wait statuses as the kernel encodes them (see waitpid(2)). */
#define EXITED(code) (((code) & 0xff) << 8)
#define SIGNALED(sig) ((sig) & 0x7f)

static void test_exit_codes_named(void **state)
{
	char buf[160];

	vm_exit_describe(EXITED(VM_EXIT_REBOOT), buf, sizeof(buf));
	assert_string_equal(buf, "exit 3: the guest rebooted or its CPU reset (triple fault)");
	vm_exit_describe(EXITED(VM_EXIT_POWEROFF), buf, sizeof(buf));
	assert_string_equal(buf, "exit 0: the guest powered off");
	vm_exit_describe(EXITED(VM_EXIT_SECCOMP), buf, sizeof(buf));
	assert_string_equal(buf, "exit 6: killed by its seccomp filter");
	vm_exit_describe(EXITED(VM_EXIT_CRASH), buf, sizeof(buf));
	assert_non_null(strstr(buf, "accelerator"));
}

static void test_unknown_and_signals(void **state)
{
	char buf[160], small[12];

	vm_exit_describe(EXITED(127), buf, sizeof(buf));
	assert_string_equal(buf, "exit 127: unknown status");
	vm_exit_describe(SIGNALED(SIGKILL), buf, sizeof(buf));
	assert_string_equal(buf, "killed by signal 9 (Killed)");
	vm_exit_describe(SIGNALED(SIGSEGV), buf, sizeof(buf));
	assert_string_equal(buf, "killed by signal 11 (Segmentation fault)");
	/* A short buffer is cut, never overrun. */
	vm_exit_describe(EXITED(VM_EXIT_REBOOT), small, sizeof(small));
	assert_string_equal(small, "exit 3: the");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exit_codes_named),
		cmocka_unit_test(test_unknown_and_signals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
