/* The interrupt-coalescing policy (virtio/coalesce.h), driven with made-up
 * costs and outcomes: when it waits, how long, and how it backs off from a
 * driver that waits for every completion. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "virtio/coalesce.h"

#define US 1000ull

static void test_no_window_before_a_cost_is_known(void **state)
{
	struct coalesce c;

	coalesce_init(&c);
	assert_int_equal(coalesce_window(&c), 0);
	coalesce_cost_sample(&c, 300 * US);
	assert_int_equal(c.cost_ns, 300 * US);
	assert_int_equal(coalesce_window(&c), 300 * US);
}

static void test_cost_is_a_bounded_average(void **state)
{
	struct coalesce c;

	coalesce_init(&c);
	coalesce_cost_sample(&c, 80 * US);
	/* One slow acknowledgement moves the average by an eighth. */
	coalesce_cost_sample(&c, 880 * US);
	assert_int_equal(c.cost_ns, 180 * US);
	/* A sample past the cap counts as the cap. */
	coalesce_init(&c);
	coalesce_cost_sample(&c, 5000000 * US);
	assert_int_equal(c.cost_ns, COALESCE_COST_CAP_NS);
}

/* A driver that keeps queueing: windows that catch two or more requests
 * grow to four times the cost, never past the bound. */
static void test_windows_grow_while_they_catch(void **state)
{
	struct coalesce c;

	coalesce_init(&c);
	coalesce_cost_sample(&c, 100 * US);
	assert_int_equal(coalesce_window(&c), 100 * US);
	coalesce_outcome(&c, 3);
	assert_int_equal(coalesce_window(&c), 200 * US);
	coalesce_outcome(&c, 1); /* one: paid for itself, kept */
	assert_int_equal(coalesce_window(&c), 200 * US);
	coalesce_outcome(&c, 2);
	assert_int_equal(coalesce_window(&c), 400 * US);
	coalesce_outcome(&c, 5);
	assert_int_equal(coalesce_window(&c), 400 * US); /* 4x is the most */
	assert_int_equal(c.caught, 4);
	assert_int_equal(c.expired, 0);

	coalesce_init(&c);
	coalesce_cost_sample(&c, 1500 * US);
	coalesce_outcome(&c, 2);
	assert_int_equal(coalesce_window(&c), COALESCE_MAX_WINDOW_NS);
}

/* A driver that waits for each completion (queue depth 1): the windows
 * shrink to nothing, then only probes cost it anything, further and
 * further apart while they fail. */
static void test_backs_off_from_a_waiting_driver(void **state)
{
	struct coalesce c;
	unsigned gap, waits = 0;

	coalesce_init(&c);
	coalesce_cost_sample(&c, 100 * US);
	coalesce_outcome(&c, 2); /* mult 2 */
	assert_int_equal(coalesce_window(&c), 200 * US);
	coalesce_outcome(&c, 0);
	assert_int_equal(coalesce_window(&c), 100 * US);
	coalesce_outcome(&c, 0);
	assert_int_equal(c.mult, 0);
	assert_int_equal(c.expired, 2);

	for (gap = COALESCE_PROBE_MIN; gap <= COALESCE_PROBE_MAX; gap *= 2) {
		for (unsigned i = 0; i < gap; i++)
			assert_int_equal(coalesce_window(&c), 0);
		/* The probe: one window of the interrupt's cost, and it fails. */
		assert_int_equal(coalesce_window(&c), 100 * US);
		coalesce_outcome(&c, 0);
	}
	/* At the longest gap the probes stay there: one in every gap + 1. */
	for (unsigned i = 0; i < 10 * (COALESCE_PROBE_MAX + 1); i++) {
		if (coalesce_window(&c)) {
			waits++;
			coalesce_outcome(&c, 0);
		}
	}
	assert_int_equal(waits, 10);
}

/* A probe that catches a request turns the policy back on, with the
 * shortest probe gap for the next time it goes off. */
static void test_probe_that_catches_turns_it_on(void **state)
{
	struct coalesce c;

	coalesce_init(&c);
	coalesce_cost_sample(&c, 50 * US);
	coalesce_outcome(&c, 0);
	assert_int_equal(c.mult, 0);
	for (unsigned i = 0; i < COALESCE_PROBE_MIN; i++)
		assert_int_equal(coalesce_window(&c), 0);
	assert_int_equal(coalesce_window(&c), 50 * US);
	coalesce_outcome(&c, 0); /* failed: the gap doubles */
	assert_int_equal(c.probe_gap, 2 * COALESCE_PROBE_MIN);
	for (unsigned i = 0; i < 2 * COALESCE_PROBE_MIN; i++)
		assert_int_equal(coalesce_window(&c), 0);
	assert_int_equal(coalesce_window(&c), 50 * US);
	coalesce_outcome(&c, 1);
	assert_int_equal(c.mult, 1);
	assert_int_equal(c.probe_gap, COALESCE_PROBE_MIN);
	assert_int_equal(coalesce_window(&c), 50 * US);
	coalesce_outcome(&c, 0);
	assert_int_equal(c.until_probe, COALESCE_PROBE_MIN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_window_before_a_cost_is_known),
		cmocka_unit_test(test_cost_is_a_bounded_average),
		cmocka_unit_test(test_windows_grow_while_they_catch),
		cmocka_unit_test(test_backs_off_from_a_waiting_driver),
		cmocka_unit_test(test_probe_that_catches_turns_it_on),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
