# tests/arm64/lib.sh: sourced by the --inside parts of tests/arm64/boot and
# tests/arm64/checkpoint (busybox sh in the aarch64 helper: POSIX sh only).
# The sourcing script defines ok and not_ok.

# The jailed VMM's uid and gid (--jail-user): the helper runs as root, as
# the supervisor does when it gives each VMM a uid of its own.
JAIL_ID=4242:4242
JAIL="--jail --jail-user $JAIL_ID"

# alive PID: the process PID runs (a child that ended stays a zombie until
# waited for).
alive() {
	[ -r "/proc/$1/status" ] && ! grep -qE '^State:[[:space:]]+Z' "/proc/$1/status"
}

# wait_for PATTERN SECONDS FILE [PID]: waits until FILE has a line matching
# PATTERN; 1 when SECONDS pass first, or the process PID ends.
wait_for() {
	local t=0
	while ! grep -qsE "$1" "$3"; do
		[ $t -lt "$2" ] || return 1
		[ -z "${4:-}" ] || alive "$4" || return 1
		sleep 1
		t=$((t + 1))
	done
}

# filter_on PID SECONDS: waits until the process PID is under its seccomp
# filter; 1 when SECONDS pass first (or PID is gone).
filter_on() {
	local t=0
	while ! grep -qE '^Seccomp:[[:space:]]+2$' "/proc/$1/status" 2>/dev/null; do
		[ $t -lt "$2" ] && alive "$1" || return 1
		sleep 1
		t=$((t + 1))
	done
}

# wait_exit PID SECONDS: waits for PID (a child of this shell) and leaves
# its exit status in $rc; PID is killed if it runs for SECONDS more.
wait_exit() {
	(sleep "$2" && kill "$1" 2>/dev/null) &
	local dog=$!
	wait "$1"
	rc=$?
	kill $dog 2>/dev/null
}

# filtered NAME PID VCPUS: the VMM PID runs in its jail under its seccomp
# filter: every thread in filter mode with no_new_privs, VCPUS threads
# (the vCPUs) with their own, narrower filter stacked on the process's;
# the jail's uid, no capability, mount, network, IPC and UTS namespaces
# of its own.  Call once every vCPU has run (their filters go on as they
# start).
filtered() {
	local pid=$2 vcpus=0 bad= t
	if [ ! -r "/proc/$pid/status" ]; then
		not_ok "$1" "process $pid is gone"
		return
	fi
	for t in /proc/$pid/task/*; do
		grep -qE '^Seccomp:[[:space:]]+2$' "$t/status" || bad="$bad thread ${t##*/} not filtered;"
		grep -qE '^NoNewPrivs:[[:space:]]+1$' "$t/status" || bad="$bad thread ${t##*/} without no_new_privs;"
		[ "$(sed -n 's/^Seccomp_filters:[[:space:]]*//p' "$t/status")" = 2 ] && vcpus=$((vcpus + 1))
	done
	[ $vcpus -eq "$3" ] || bad="$bad $vcpus threads with a vCPU filter, want $3;"
	grep -qE "^Uid:[[:space:]]+${JAIL_ID%:*}[[:space:]]" "/proc/$pid/status" || bad="$bad not the jail's uid;"
	for t in CapInh CapPrm CapEff CapBnd CapAmb; do
		grep -qE "^$t:[[:space:]]+0+$" "/proc/$pid/status" || bad="$bad $t not empty;"
	done
	for t in mnt net ipc uts; do
		[ "$(readlink "/proc/$pid/ns/$t")" != "$(readlink "/proc/self/ns/$t")" ] || bad="$bad the host's $t namespace;"
	done
	if [ -z "$bad" ]; then
		ok "$1"
	else
		not_ok "$1" "$bad $(grep -E '^(Uid|Seccomp|NoNewPrivs)' "/proc/$pid/status" | tr '\t\n' ' |')"
	fi
}

# not_trapped NAME FILE: no "killed by seccomp" report in the console FILE.
not_trapped() {
	if grep -q 'killed by seccomp' "$2"; then
		not_ok "$1" "$(grep 'killed by seccomp' "$2")"
	else
		ok "$1"
	fi
}

# trapped RULE CALL WHEN ARGS...: the VMM started with ARGS and with RULE
# left out of its filter (KOSA8_SECCOMP_OMIT, the hook tests/vm/seccomp-rules
# uses) is stopped by its filter at CALL (an extended regular expression):
# the report names the call, and the VMM exits 6, or dies of SIGSYS (159)
# when the call was a vCPU thread's: its own filter refuses the handler's
# exit_group, as tests/vm/seccomp-rules also counts.
# WHEN says what makes the VMM call it: "now" (it does so by itself once
# the filter is on), "term" (at tear-down: SIGTERM once the filter is on),
# or a control request (JSON, to $sock) sent once the filter is on.
# The console is left in $work/trapped.
trapped() {
	local rule=$1 call=$2 when=$3 name pid
	name="without its $rule rule the filter stops the VMM at $call (the call named)"
	shift 3
	KOSA8_SECCOMP_OMIT=$rule "$vmm" "$@" </dev/null >"$work/trapped" 2>&1 &
	pid=$!
	if [ "$when" != now ] && filter_on $pid 120; then
		case $when in
		term) kill -TERM $pid ;;
		*) "$ctl" "$sock" "$when" >/dev/null 2>&1 ;;
		esac
	fi
	wait_exit $pid 120
	if { [ $rc -eq 6 ] || [ $rc -eq 159 ]; } && grep -qE "killed by seccomp: syscall ($call) " "$work/trapped"; then
		ok "$name"
	else
		not_ok "$name" "exit $rc; $(grep -v '^\[' "$work/trapped" | head -c 300 | tr '\n' '|')"
	fi
}
