# What the VM test scripts share (sourced by tests/vm/run-all and
# tests/vm/sandbox-io-suite, after they set $WORK): one "ok NAME" or
# "not ok NAME: why" line per test, $failures counting the second kind,
# once_more for what the emulated helper VM breaks now and then, and sb,
# kosa8 with a bound.

ok() { echo "ok $1"; }
not_ok() {
	echo "not ok $1: $2"
	failures=$((failures + 1))
	if [ -f "$WORK/out" ]; then
		echo "  --- output (last 30 lines) ---"
		tail -30 "$WORK/out" | sed 's/^/  | /'
	fi
}

# once_more FUNC NAME ARGS...: FUNC NAME ARGS...; if it fails, its output is
# printed as comments ("# attempt 1: ...") and it runs again, up to
# ONCE_MORE_TRIES attempts (default 2), the last result standing.  Why: in
# the software-emulated helper VM the whole emulated machine sometimes
# stops for minutes (CI, 2026-12-04: the helper's heartbeat silent 149 s, a
# two-vCPU guest killed at its 180 s bound mid-boot, on a run where every
# other boot took seconds), and restored guests there triple-fault now and
# then (2 of 12 restores in one loop; see the checkpoint tests).  A real
# fault fails every attempt; one that passes only on a later attempt is
# named at the end of the run ("# passed on a later attempt:"), which
# tests/run repeats in its summary.
retried=()
once_more() {
	local before=$failures log=$WORK/attempt n=1 start=$SECONDS
	while :; do
		"$@" >"$log"
		if [ "$failures" -eq "$before" ] || [ "$n" -ge "${ONCE_MORE_TRIES:-2}" ]; then
			cat "$log"
			[ "$failures" -eq "$before" ] && [ "$n" -gt 1 ] && retried+=("$2")
			took "$2" "$start" "$n"
			return 0
		fi
		sed "s/^/# attempt $n: /" "$log"
		failures=$before
		[ -z "${ONCE_MORE_BEFORE:-}" ] || "$ONCE_MORE_BEFORE"
		n=$((n + 1))
	done
}

# took NAME START [ATTEMPTS]: "# time NAME: N s" for a test or group that
# began at $SECONDS = START, so that a run's log shows where its time went
# (tests/run's table gives each suite's total).  A comment line: tests/run
# counts only "ok "/"not ok " lines.
took() {
	local a=
	[ "${3:-1}" -gt 1 ] && a=", $3 attempts"
	echo "# time $1: $((SECONDS - $2)) s$a"
}

# timed NAME CMD...: CMD with its time under NAME (took), for tests that
# run without once_more.
timed() {
	local name=$1 start=$SECONDS
	shift
	"$@"
	took "$name" "$start"
}

# passed_before NAME: NAME passed in an earlier run that a stuck helper VM
# cut short (tests/run passes those in VM_SUITE_DONE).
passed_before() { case " ${VM_SUITE_DONE:-} " in *" $1 "*) return 0 ;; esac; return 1; }

# g FUNC GROUP: a sandbox test group under once_more, skipped when the
# whole group passed in an earlier run (tests/run passes "group:GROUP" in
# VM_SUITE_DONE for each "# group passed: GROUP" line).  In CI on
# 2026-12-05 the helper stalled in sandbox-as-user, and the run after it
# did every sandbox group again (ten minutes) before it stalled too.
g() {
	local before=$failures
	if passed_before "group:$2"; then
		echo "# group $2 passed in an earlier run: not run again"
		return 0
	fi
	once_more "$@"
	[ "$failures" -ne "$before" ] || echo "# group passed: $2"
}

sb() { timeout -k 5 600 build/kosa8 "$@" </dev/null; }

# Every sandbox a failed attempt left behind, in both state directories
# the tests use (the checkpoint tests keep theirs apart): once_more's
# ONCE_MORE_BEFORE for the sandbox tests.
sandboxes_clear() {
	local dir
	for dir in "${KOSA8_STATE_DIR:-}" "$WORK/ckstate" "$WORK/lvstate"; do
		KOSA8_STATE_DIR=$dir sb ps 2>/dev/null | awk 'NR > 1 {print $1}' | while read -r n; do
			KOSA8_STATE_DIR=$dir sb rm -f "$n" >/dev/null 2>&1
		done
	done
}
