# One owner per sandbox, and a guest that cannot wedge it (sourced by
# tests/vm/run-all, or tests/vm/sandbox-owner-only): guest root replaces
# the programs the host once ran after a restore (perl, sh, date,
# hostname) with ones that never end; a checkpoint, a rewind and a fork
# still work, bounded, because the fix-up is the agent's own code.  start,
# rm and ps issued during a checkpoint read the supervisor's lock, and a
# supervisor killed with SIGKILL leaves the sandbox free to start again.
#
# Uses run-all's WORK, ok, not_ok; OWB (default build/kosa8) is the binary.

ow_sb() { KOSA8_STATE_DIR=$WORK/owstate timeout -k 5 "${OW_BOUND:-300}" "${OWB:-build/kosa8}" "$@" </dev/null; }
# bash, not sh: the test replaces /bin/sh in the guest.
ow_in() { ow_sb exec -u root "$1" -- bash -c "$2" 2>>"$WORK/out"; }
ow_fail() {
	not_ok "$1" "$2"
	for s in ow owf; do
		echo "  --- $s: supervisor log / console (last lines) ---"
		tail -12 "$WORK/owstate/sandboxes/$s/supervisor.log" 2>/dev/null | sed 's/^/  | /'
		tail -8 "$WORK/owstate/sandboxes/$s/console.log" 2>/dev/null | sed 's/^/  | /'
	done
	OW_BOUND=120 ow_sb rm -f owf >/dev/null 2>&1
	OW_BOUND=120 ow_sb rm -f ow >/dev/null 2>&1
}
ow_owner_pid() { sed -n 's/^\([0-9]*\) supervisor$/\1/p' "$WORK/owstate/sandboxes/$1/owner.lock" 2>/dev/null; }
ow_supervisors() { pgrep -fc "__supervise $1( |\$)"; }

# Never-ending stand-ins for the guest programs a restore used to run.
OW_WEDGE='for b in /usr/bin/perl /usr/bin/date /usr/bin/hostname /bin/hostname /usr/bin/sh; do
	[ -e "$b" ] || continue; rm -f "$b"; printf "#!/bin/bash\nexec sleep 1000000\n" >"$b"; chmod 755 "$b"; done
timeout 3 perl -e 1; echo "perl:$?"'

test_sandbox_owner() {
	local name=sandbox-wedged-guest-binaries t0 r0 r1 m0 m1 out
	rm -rf "$WORK/owstate" && mkdir -p "$WORK/owstate"
	: >"$WORK/out"
	ow_sb create --name ow >>"$WORK/out" 2>&1 && ow_sb start ow >>"$WORK/out" 2>&1 ||
		{ ow_fail "$name" "create or start failed"; return; }
	out=$(ow_in ow "$OW_WEDGE")
	[ "$out" = perl:124 ] || { ow_fail "$name" "the guest's perl was not replaced ('$out')"; return; }
	ow_sb checkpoint ow >>"$WORK/out" 2>&1 || { ow_fail "$name" "checkpoint failed"; return; }
	t0=$(date +%s)
	OW_BOUND=240 ow_sb rewind ow c1 >>"$WORK/out" 2>&1 || { ow_fail "$name" "rewind failed (or hung: $(($(date +%s) - t0)) s)"; return; }
	echo "  rewind with the guest's perl, sh, date, hostname wedged: $(($(date +%s) - t0)) s"
	OW_BOUND=10 ow_sb ps | grep -q '^ow  *running ' || { ow_fail "$name" "ps does not say running after the rewind"; return; }
	[ "$(ow_in ow 'echo alive')" = alive ] || { ow_fail "$name" "exec after the rewind failed"; return; }
	t0=$(date +%s)
	OW_BOUND=240 ow_sb fork ow c1 --name owf >>"$WORK/out" 2>&1 || { ow_fail "$name" "fork failed (or hung: $(($(date +%s) - t0)) s)"; return; }
	echo "  fork: $(($(date +%s) - t0)) s"
	[ "$(ow_in owf 'cat /proc/sys/kernel/hostname')" = owf ] || { ow_fail "$name" "the fork's host name is not owf"; return; }
	[ "$(ow_in owf 'cat /etc/hostname')" = owf ] || { ow_fail "$name" "the fork's /etc/hostname is not owf"; return; }
	m0=$(ow_in ow 'cat /etc/machine-id'); m1=$(ow_in owf 'cat /etc/machine-id')
	[ -n "$m1" ] && [ "$m0" != "$m1" ] || { ow_fail "$name" "machine-ids: ow '$m0', owf '$m1'"; return; }
	r0=$(ow_in ow 'head -c 16 /dev/urandom | od -An -tx1'); r1=$(ow_in owf 'head -c 16 /dev/urandom | od -An -tx1')
	[ -n "$r1" ] && [ "$r0" != "$r1" ] || { ow_fail "$name" "ow and owf drew the same random bytes"; return; }
	echo "  boot_id: ow $(ow_in ow 'cat /proc/sys/kernel/random/boot_id'), owf $(ow_in owf 'cat /proc/sys/kernel/random/boot_id')"
	t0=$(date +%s)
	OW_BOUND=120 ow_sb stop owf >>"$WORK/out" 2>&1 || { ow_fail "$name" "stop of the fork failed"; return; }
	echo "  stop: $(($(date +%s) - t0)) s"
	OW_BOUND=120 ow_sb rm owf >>"$WORK/out" 2>&1 || { ow_fail "$name" "rm of the stopped fork failed"; return; }
	ok "$name"

	name=sandbox-owner-start-rm-ps-during-checkpoint
	local sup pids i busy=0
	sup=$(ow_owner_pid ow)
	[ -n "$sup" ] && [ "$(ow_supervisors ow)" -eq 1 ] || { ow_fail "$name" "owner.lock names no supervisor ('$sup')"; return; }
	ow_sb checkpoint ow -m long >"$WORK/ck.out" 2>&1 &
	pids=$!
	for i in 1 2 3 4 5 6 7 8; do
		ow_sb start ow >"$WORK/start$i" 2>&1 &
		ow_sb rm ow >"$WORK/rm$i" 2>&1 &
		OW_BOUND=20 ow_sb ps >"$WORK/ps$i" 2>&1 &
		[ "$(ow_supervisors ow)" -le 1 ] || busy=2
		sleep 0.3
	done
	wait
	[ "$busy" -eq 0 ] || { ow_fail "$name" "a second supervisor ran on ow"; return; }
	for i in 1 2 3 4 5 6 7 8; do
		grep -q "sandbox 'ow' is running (supervisor pid $sup)" "$WORK/start$i" ||
			{ ow_fail "$name" "start $i: '$(cat "$WORK/start$i")'"; return; }
		grep -q "sandbox 'ow' is running (supervisor pid $sup)\( and busy: checkpoint c[0-9]* running for [0-9]* s\)\?: stop it first" "$WORK/rm$i" ||
			{ ow_fail "$name" "rm $i: '$(cat "$WORK/rm$i")'"; return; }
		grep -q '^ow  *running' "$WORK/ps$i" || { ow_fail "$name" "ps $i: '$(cat "$WORK/ps$i")'"; return; }
	done
	echo "  ps during the checkpoint: $(grep -h '^ow ' "$WORK"/ps? | awk '{print $2, $3}' | sort | uniq -c | tr '\n' ';')"
	grep -q '^c[0-9]' "$WORK/ck.out" || { ow_fail "$name" "the checkpoint failed: $(cat "$WORK/ck.out")"; return; }
	[ "$(ow_owner_pid ow)" = "$sup" ] && [ "$(ow_in ow 'echo alive')" = alive ] ||
		{ ow_fail "$name" "the sandbox is not the same running one"; return; }
	ok "$name"

	name=sandbox-owner-sigkill-releases
	kill -KILL "$sup"
	for i in $(seq 1 60); do
		OW_BOUND=10 ow_sb ps | grep -q '^ow  *stopped' && break
		sleep 0.5
	done
	OW_BOUND=10 ow_sb ps | grep -q '^ow  *stopped' || { ow_fail "$name" "ow is not free 30 s after its supervisor was killed: $(ow_sb ps | grep '^ow ')"; return; }
	pgrep -f "kosa8-vmm .*owstate/sandboxes/ow/" >/dev/null && { ow_fail "$name" "the killed supervisor's VMM still runs"; return; }
	ow_sb start ow >>"$WORK/out" 2>&1 || { ow_fail "$name" "start after the kill failed"; return; }
	[ "$(ow_in ow 'echo alive')" = alive ] || { ow_fail "$name" "exec after the restart failed"; return; }
	[ "$(ow_supervisors ow)" -eq 1 ] || { ow_fail "$name" "$(ow_supervisors ow) supervisors on ow"; return; }
	OW_BOUND=120 ow_sb rm -f ow >>"$WORK/out" 2>&1 || { ow_fail "$name" "rm -f failed"; return; }
	[ ! -e "$WORK/owstate/sandboxes/ow" ] || { ow_fail "$name" "rm -f left the sandbox"; return; }
	ok "$name"
}
