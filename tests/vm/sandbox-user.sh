# A sandbox run by an unprivileged user (sourced by tests/vm/run-all; uses
# its ok, not_ok, $WORK).  Every other VM test runs kosa8 as root; most
# developers do not.  As a user (docs/vmm-security.md):
# - the VMM is PID 1 of a PID namespace of its own, inside a user namespace
#   the supervisor made mapping only that user (supervisor/vmm_clone.h);
# - it runs as that user, with no capability left after its jail;
# - the command runs in the guest and its exit status comes back.
# The user is nobody (65534) with a home of its own.  It reaches /dev/kvm
# through a node of its own bound over /dev/kvm in a mount namespace of the
# test's (the host's node is not touched), the kernel and image through
# read-only bind mounts (root's cache is 0700), and kosa8 through a copy.

USER_UID=65534

# user_sb ARGS...: kosa8 as nobody, in its own home, with a /dev/kvm it
# may open (a sandbox's supervisor stays in that mount namespace).
user_sb() {
	USER_UID=$USER_UID USER_TOP=$USER_TOP KOSA8_KERNEL=$KOSA8_KERNEL USER_CGROUP_PROCS=${USER_CGROUP_PROCS:-} \
		timeout -k 5 600 unshare -m --propagation private sh -c '
		mount --bind "$1/kvm" /dev/kvm || exit 125
		# First into the leaf cgroup a login session would be in, if given.
		[ -z "$USER_CGROUP_PROCS" ] || echo $$ >"$USER_CGROUP_PROCS" || exit 125
		shift
		exec setpriv --reuid="$USER_UID" --regid="$USER_UID" --clear-groups --inh-caps=-all \
			env -i PATH=/usr/bin:/bin HOME="$USER_TOP/home" XDG_RUNTIME_DIR="$USER_TOP/home/run" \
			KOSA8_KERNEL="$USER_TOP/ro/kernel/$(basename "$KOSA8_KERNEL")" "$USER_TOP/kosa8" "$@"
	' user_sb "$USER_TOP/dev" "$@" </dev/null
}

user_setup() {
	local img
	img=$(guest/image/build.sh --path default) || return 1
	USER_TOP=$(mktemp -d /tmp/kosa8-user.XXXXXX) || return 1
	chmod 0755 "$USER_TOP"
	mkdir -p "$USER_TOP/home/run" "$USER_TOP/ro/kernel" "$USER_TOP/ro/image" "$USER_TOP/dev"
	# A tmpfs of its own: /tmp may be mounted nodev.
	mount -t tmpfs -o mode=0755,size=64k kosa8-user-dev "$USER_TOP/dev" &&
		mknod -m 0600 "$USER_TOP/dev/kvm" c "$((0x$(stat -c %t /dev/kvm)))" "$((0x$(stat -c %T /dev/kvm)))" &&
		chown "$USER_UID" "$USER_TOP/dev/kvm" || return 1
	chown -R "$USER_UID:$USER_UID" "$USER_TOP/home"
	chmod 0700 "$USER_TOP/home/run"
	cp build/kosa8 build/kosa8-vmm "$USER_TOP/" && chmod 0755 "$USER_TOP/kosa8" "$USER_TOP/kosa8-vmm" &&
		mount --bind -o ro "$(dirname "$KOSA8_KERNEL")" "$USER_TOP/ro/kernel" &&
		mount --bind -o ro "$(dirname "$img")" "$USER_TOP/ro/image" &&
		USER_IMAGE="$USER_TOP/ro/image/$(basename "$img")"
}

# user_delegate: by hand, what systemd does for user@UID.service
# (Delegate=yes): a cgroup the user owns, the memory, pids and cpu
# controllers handed down to it, and a leaf (app.slice) for the user's
# processes.  The helper VM has no systemd, so without this the delegated
# path of supervisor/cgroup.c would never run here.
USER_CG=
user_delegate() {
	local cg=/sys/fs/cgroup p c
	USER_CG=$cg/user.slice/user-$USER_UID.slice/user@$USER_UID.service
	[ -f "$cg/cgroup.controllers" ] && mkdir -p "$USER_CG/app.slice" || return 1
	for p in "$cg" "$cg/user.slice" "$cg/user.slice/user-$USER_UID.slice"; do
		for c in memory pids cpu; do echo "+$c" >"$p/cgroup.subtree_control" || return 1; done
	done
	chown "$USER_UID" "$USER_CG" "$USER_CG/cgroup.procs" "$USER_CG/cgroup.subtree_control" \
		"$USER_CG/cgroup.threads" && chown -R "$USER_UID" "$USER_CG/app.slice"
}

user_undelegate() {
	[ -n "$USER_CG" ] || return 0
	rmdir "$USER_CG"/kosa8/* "$USER_CG/kosa8" "$USER_CG/app.slice" "$USER_CG" \
		"$(dirname "$USER_CG")" /sys/fs/cgroup/user.slice 2>/dev/null
	USER_CG=
}

# The sandbox's last console and supervisor lines, after a failed start.
user_sb_logs() {
	local d=$USER_TOP/home/.local/state/kosa8/sandboxes/usb
	tail -20 "$d/console.log" 2>/dev/null | sed 's/^/  | console: /'
	tail -10 "$d/supervisor.log" 2>/dev/null | sed 's/^/  | supervisor: /'
}

# The user's VMM process (the sandbox's only one).
user_vmm_pid() { pgrep -u "$USER_UID" -f -- 'kosa8-vmm --no-emulate' | head -1; }

user_teardown() {
	user_sb rm -f usb >/dev/null 2>&1
	user_undelegate
	umount "$USER_TOP/ro/kernel" "$USER_TOP/ro/image" "$USER_TOP/dev" 2>/dev/null
	rm -rf "$USER_TOP"
}

test_sandbox_as_user() {
	local name=sandbox-as-user-own-user-and-pid-namespace vmm status got
	if ! command -v setpriv >/dev/null; then not_ok "$name" "setpriv (util-linux) is missing"; return; fi
	if ! user_setup >"$WORK/out" 2>&1; then not_ok "$name" "set-up failed"; user_teardown; return; fi
	if ! user_sb create --name usb --image "$USER_IMAGE" --mem 256M --cpus 1 >>"$WORK/out" 2>&1 ||
		! user_sb start usb >>"$WORK/out" 2>&1; then
		not_ok "$name" "create or start as uid $USER_UID failed"
		user_sb_logs
		user_teardown; return
	fi
	vmm=$(user_vmm_pid)
	status=/proc/${vmm:-none}/status
	got=$(user_sb exec usb -- sh -c 'echo in-guest; exit 3' 2>>"$WORK/out"; echo "rc=$?")
	if [ -z "$vmm" ] || [ ! -r "$status" ]; then
		not_ok "$name" "no VMM process of uid $USER_UID found"
	elif [ "$(readlink "/proc/$vmm/ns/user")" = "$(readlink /proc/self/ns/user)" ]; then
		not_ok "$name" "the VMM is in the host's user namespace"
	elif [ "$(readlink "/proc/$vmm/ns/pid")" = "$(readlink /proc/self/ns/pid)" ] ||
		! grep -qE '^NSpid:[[:space:]]+[0-9]+[[:space:]]+1$' "$status"; then
		not_ok "$name" "not PID 1 of a PID namespace of its own: $(grep NSpid "$status")"
	elif ! grep -qE "^Uid:[[:space:]]+$USER_UID[[:space:]]+$USER_UID[[:space:]]+$USER_UID[[:space:]]+$USER_UID\$" "$status"; then
		not_ok "$name" "the VMM's $(grep Uid "$status"), want $USER_UID"
	elif ! grep -qE '^CapEff:[[:space:]]+0+$' "$status"; then
		not_ok "$name" "the VMM kept capabilities: $(grep CapEff "$status")"
	elif [ "$got" != "$(printf 'in-guest\nrc=3')" ]; then
		not_ok "$name" "exec gave '$got', want in-guest and rc=3"
	else
		ok "$name"
	fi
	user_sb stop usb >>"$WORK/out" 2>&1
	test_user_delegated_cgroup
	user_teardown
}

# The same sandbox started again inside a delegated cgroup: the VMM must
# land in a cgroup of the user's own below it, with the limits set, and the
# cgroup must go at stop.
test_user_delegated_cgroup() {
	local name=sandbox-as-user-delegated-cgroup-with-limits vmm v cg want_mem=$(((256 + 512) * 1048576))
	if ! user_delegate >>"$WORK/out" 2>&1; then
		not_ok "$name" "could not make the delegated cgroup $USER_CG"; return
	fi
	if ! USER_CGROUP_PROCS=$USER_CG/app.slice/cgroup.procs user_sb start usb >>"$WORK/out" 2>&1; then
		not_ok "$name" "start in the delegated cgroup failed"
		user_sb_logs
		return
	fi
	vmm=$(user_vmm_pid)
	v=$(sed -n 's/^0:://p' "/proc/${vmm:-none}/cgroup" 2>/dev/null)
	cg=/sys/fs/cgroup$v
	if [ -z "$vmm" ] || [ -z "$v" ]; then
		not_ok "$name" "no VMM process of uid $USER_UID found"
	elif [ "$(dirname "$cg")" != "$USER_CG/kosa8" ]; then
		not_ok "$name" "the VMM is in '$v', want a cgroup below $USER_CG/kosa8"
	elif [ "$(stat -c %u "$cg")" != "$USER_UID" ]; then
		not_ok "$name" "$cg belongs to uid $(stat -c %u "$cg"), not the user"
	elif [ "$(cat "$cg/memory.max")" != "$want_mem" ] || [ "$(cat "$cg/pids.max")" != 128 ] ||
		[ "$(cat "$cg/cpu.max")" != "200000 100000" ]; then
		not_ok "$name" "memory.max $(cat "$cg/memory.max") (want $want_mem), pids.max $(cat "$cg/pids.max") (want 128), cpu.max $(cat "$cg/cpu.max") (want 200000 100000: 1 vCPU + 1)"
	elif [ "$(user_sb exec usb -- sh -c 'echo in-guest' 2>>"$WORK/out")" != in-guest ]; then
		not_ok "$name" "exec in the sandbox failed"
	else
		user_sb stop usb >>"$WORK/out" 2>&1
		if [ -d "$cg" ]; then
			not_ok "$name" "$cg is still there after stop"
		else
			ok "$name"
			echo "# VMM cgroup was $cg: memory.max $want_mem"
		fi
		return
	fi
	user_sb stop usb >>"$WORK/out" 2>&1
}
