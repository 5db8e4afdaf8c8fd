# Sourced by tests/vm/run-all after checkpoint.sh (its wait_for, vmm_threads):
# copies of one checkpoint stop sharing the guest kernel's RNG state and
# boot_id as soon as they run, with no agent and no host help but the VM
# generation ID (devices/vmgenid.c, the kernel patch in guest/kernel/patches).
#
# Read from the kernel's point of view: a guest idle at a shell reads its
# boot_id and is checkpointed; two VMMs restore that checkpoint and run
# for a while with nobody talking to them, then are checkpointed in turn,
# and the CRNG's key (base_crng, found through the kernel's System.map) is
# compared in their memory files.  Nothing in an idle guest draws random
# numbers, so without a new generation ID the two keys stay the
# checkpoint's (shown against the code before VMGenID: identical keys).
# Only then does each guest run a command: its first read of
# /dev/urandom and its boot_id must differ from the other's, and boot_id
# from the checkpoint's.
#
# Uses run-all's KERNEL, INITRD, WORK, BOOT_TIMEOUT, ok, not_ok.

# vg_sym NAME: the guest-physical address of a kernel symbol (decimal): the
# kernel runs where it was linked (no KASLR: guest/kernel/config.fragment).
vg_sym() {
	local a
	a=$(awk -v s="$1" '$3 == s { print $1; exit }' "$(dirname "$KERNEL")/System.map") || return 1
	[ -n "$a" ] && echo $((0x$a - 0xffffffff80000000))
}

# vg_bytes FILE OFFSET N: N bytes of FILE at OFFSET, in hex.
vg_bytes() { od -An -tx1 -j "$2" -N "$3" "$1" | tr -d ' \n'; }

test_vmgenid() {
	local name=$1 bin=$2 d=$WORK/vg pid= pid_a= pid_b= x crng banner ans id0 ka kb ra rb ia ib
	rm -rf "$d" && mkdir -p "$d/a" "$d/b"
	crng=$(vg_sym base_crng) && banner=$(vg_sym linux_banner) ||
		{ not_ok "$name" "no base_crng or linux_banner in $(dirname "$KERNEL")/System.map"; return; }
	mkfifo "$d/in"
	exec 7<>"$d/in"
	vg_fail() {
		[ -n "${pid:-}" ] && vmm_threads "$pid"
		kill -9 ${pid:-} ${pid_a:-} ${pid_b:-} 2>/dev/null
		wait ${pid:-} ${pid_a:-} ${pid_b:-} 2>/dev/null
		exec 7>&- 4>&- 5>&-
		cp "$d/out" "$WORK/out" 2>/dev/null
		not_ok "$name" "$1"
	}
	"$bin" vm --no-emulate --kernel "$KERNEL" --initrd "$INITRD" --cmdline k8.test=shell \
		--control "$d/ctl" <"$d/in" >"$d/out" 2>&1 &
	pid=$!
	wait_for "$d/out" 'KOSA8-USERSPACE-OK' "$BOOT_TIMEOUT" "$pid" || { vg_fail "the guest did not boot"; return; }
	echo 'echo "k8: boot_id=$(cat /proc/sys/kernel/random/boot_id) crng_done=$(dmesg | grep -c "crng init done")"' >&7
	wait_for "$d/out" '^k8: boot_id=' 60 "$pid" || { vg_fail "the guest did not read its boot_id"; return; }
	id0=$(tr -d '\r' <"$d/out" | sed -n 's/^k8: boot_id=\([^ ]*\).*/\1/p' | head -1)
	echo "  before the checkpoint: $(tr -d '\r' <"$d/out" | grep '^k8: boot_id=')"
	sleep 1
	ans=$("$bin" vmctl "$d/ctl" checkpoint "$d/cp" 2>&1) || { vg_fail "checkpoint failed: $ans"; return; }
	kill -9 "$pid"
	wait "$pid" 2>/dev/null
	pid=
	exec 7>&-
	[ "$(vg_bytes "$d/cp/memory" "$banner" 13)" = "$(printf 'Linux version' | od -An -tx1 | tr -d ' \n')" ] ||
		{ vg_fail "linux_banner is not at its System.map address in the memory file: the offsets are wrong"; return; }

	mkfifo "$d/a/in" "$d/b/in"
	exec 4<>"$d/a/in" 5<>"$d/b/in"
	"$bin" vm --no-emulate --restore "$d/cp" --control "$d/a/ctl" <"$d/a/in" >"$d/a/out" 2>&1 &
	pid_a=$!
	"$bin" vm --no-emulate --restore "$d/cp" --control "$d/b/ctl" <"$d/b/in" >"$d/b/out" 2>&1 &
	pid_b=$!
	# The kernel's own word that it reseeded, else (the code before
	# VMGenID) a few seconds for the comparison below to be fair.
	for x in a b; do
		eval "pid=\$pid_$x"
		wait_for "$d/$x/out" 'crng reseeded due to virtual machine fork' 60 "$pid" ||
			echo "  restore $x: no 'crng reseeded due to virtual machine fork' from the guest kernel"
	done
	sleep 2
	for x in a b; do
		eval "pid=\$pid_$x"
		kill -0 "$pid" 2>/dev/null || { cp "$d/$x/out" "$d/out"; pid=; vg_fail "restore $x ended"; return; }
		ans=$("$bin" vmctl "$d/$x/ctl" checkpoint "$d/$x/cp" 2>&1) || { vg_fail "checkpoint of restore $x failed: $ans"; return; }
	done
	ka=$(vg_bytes "$d/a/cp/memory" "$crng" 32)
	kb=$(vg_bytes "$d/b/cp/memory" "$crng" 32)
	echo "  base_crng key: checkpoint $(vg_bytes "$d/cp/memory" "$crng" 32)"
	echo "                 restore a  $ka"
	echo "                 restore b  $kb"
	echo 'echo "k8: rnd=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d " \n") boot_id=$(cat /proc/sys/kernel/random/boot_id)"' >&4
	echo 'echo "k8: rnd=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d " \n") boot_id=$(cat /proc/sys/kernel/random/boot_id)"' >&5
	for x in a b; do
		eval "pid=\$pid_$x"
		wait_for "$d/$x/out" '^k8: rnd=' 60 "$pid" || { cp "$d/$x/out" "$d/out"; vg_fail "restore $x did not run a command"; return; }
		kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	pid=
	exec 4>&- 5>&-
	ra=$(tr -d '\r' <"$d/a/out" | sed -n 's/^k8: rnd=\([^ ]*\).*/\1/p' | head -1)
	rb=$(tr -d '\r' <"$d/b/out" | sed -n 's/^k8: rnd=\([^ ]*\).*/\1/p' | head -1)
	ia=$(tr -d '\r' <"$d/a/out" | sed -n 's/^k8: rnd=.* boot_id=//p' | head -1)
	ib=$(tr -d '\r' <"$d/b/out" | sed -n 's/^k8: rnd=.* boot_id=//p' | head -1)
	echo "  first command: a rnd=$ra boot_id=$ia"
	echo "                 b rnd=$rb boot_id=$ib (checkpoint's boot_id $id0)"
	[ ${#ka} = 64 ] && [ "$ka" != "$kb" ] ||
		{ not_ok "$name" "the two restores' CRNG keys are the same before any guest command ran"; return; }
	[ -n "$ra" ] && [ "$ra" != "$rb" ] || { not_ok "$name" "the first /dev/urandom read is the same in both"; return; }
	[ -n "$ia" ] && [ -n "$id0" ] && [ "$ia" != "$ib" ] && [ "$ia" != "$id0" ] && [ "$ib" != "$id0" ] ||
		{ not_ok "$name" "boot_id is not new in each restore"; return; }
	ok "$name"
}
