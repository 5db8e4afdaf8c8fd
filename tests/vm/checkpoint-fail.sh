# A checkpoint that fails once its disk delta exists (sourced by
# tests/vm/run-all, or run alone by tests/vm/checkpoint-fail-only): the
# sandbox's checkpoints/ folder is a tmpfs too small for the guest's
# memory, so the VMM moves its disk onto the new delta and then cannot
# write the memory.  The guest goes on writing; the next checkpoint fails
# for the same reason (not "File exists"); once there is room one
# succeeds; the sandbox stops and starts again, with every file; a rewind
# to that checkpoint works.  Needs root (mount).
#
# Uses run-all's WORK, ok, not_ok.

cf_sb() { KOSA8_STATE_DIR=$WORK/cfstate timeout -k 5 600 build/kosa8 "$@" </dev/null; }
cf_x() { cf_sb exec cf -- sh -c "$1" 2>>"$WORK/out"; }
# Stopped first, then the tmpfs goes (rm moves the sandbox's folder, and
# the mount with it, before it removes it).
cf_clean() {
	cf_sb stop cf >/dev/null 2>&1
	umount "$WORK/cfstate/sandboxes/cf/checkpoints" 2>/dev/null
	cf_sb rm -f cf >/dev/null 2>&1
}
cf_fail() {
	not_ok "$1" "$2"
	cf_clean
}

test_checkpoint_fail() {
	local name=sandbox-checkpoint-fails-full-disk ck=$WORK/cfstate/sandboxes/cf/checkpoints id
	: >"$WORK/out"
	cf_sb create --name cf >>"$WORK/out" 2>&1 || { cf_fail "$name" "create failed"; return; }
	mkdir -p "$ck" && mount -t tmpfs -o size=16m,mode=0700 kosa8-cf "$ck" ||
		{ cf_fail "$name" "cannot mount a tmpfs on $ck"; return; }
	cf_sb start cf >>"$WORK/out" 2>&1 || { cf_fail "$name" "start failed"; return; }
	cf_x 'echo before >/workspace/f && sync' || { cf_fail "$name" "write before failed"; return; }
	for round in 1 2; do
		if cf_sb checkpoint cf -m "round $round" >"$WORK/ck.out" 2>&1; then
			cf_fail "$name" "checkpoint $round into a 16 MiB folder succeeded"; return
		fi
		echo "  checkpoint $round: $(head -c 300 "$WORK/ck.out")"
		grep -qi "exists" "$WORK/ck.out" && { cf_fail "$name" "checkpoint $round: $(cat "$WORK/ck.out")"; return; }
		cf_x "echo after$round >/workspace/g$round && sync" ||
			{ cf_fail "$name" "the guest cannot write after failed checkpoint $round"; return; }
	done
	mount -o remount,size=4g "$ck" || { cf_fail "$name" "cannot grow the tmpfs"; return; }
	cf_sb checkpoint cf -m roomy >"$WORK/ck.out" 2>&1 ||
		{ cf_fail "$name" "checkpoint with room failed: $(cat "$WORK/ck.out")"; return; }
	id=$(cf_sb checkpoints cf 2>>"$WORK/out" | awk '/roomy/ {print $1}')
	echo "  with room: checkpoint $id; listed: $(cf_sb checkpoints cf 2>/dev/null | awk '/^ *c[0-9]/ {print $1}' | tr '\n' ' ')"
	[ -n "$id" ] || { cf_fail "$name" "the checkpoint taken with room is not listed"; return; }
	cf_sb stop cf >>"$WORK/out" 2>&1 || { cf_fail "$name" "stop failed"; return; }
	cf_sb start cf >>"$WORK/out" 2>&1 || { cf_fail "$name" "start after the failed checkpoints failed"; return; }
	[ "$(cf_x 'cat /workspace/f /workspace/g1 /workspace/g2' | tr '\n' ' ')" = "before after1 after2 " ] ||
		{ cf_fail "$name" "files after the restart: '$(cf_x 'cat /workspace/f /workspace/g1 /workspace/g2')'"; return; }
	cf_x 'echo later >/workspace/h && sync'
	cf_sb rewind cf "$id" >>"$WORK/out" 2>&1 || { cf_fail "$name" "rewind to $id failed"; return; }
	cf_x 'test -e /workspace/g2 && test ! -e /workspace/h' ||
		{ cf_fail "$name" "after the rewind to $id: not the files it had"; return; }
	cf_clean
	[ ! -e "$WORK/cfstate/sandboxes/cf" ] || { not_ok "$name" "rm left the sandbox's folder"; return; }
	ok "$name"
}
