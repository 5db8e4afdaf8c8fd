# Sandbox checkpoints (sourced by tests/vm/run-all): kosa8 checkpoint,
# checkpoints, rewind and checkpoint rm on one sandbox boot, with the VMM
# jailed and under its seccomp filter as every sandbox's is.
#
# Uses run-all's WORK, ok, not_ok; CKB (default build/kosa8) is the binary.

ck_sb() { KOSA8_STATE_DIR=$WORK/ckstate timeout -k 5 600 "${CKB:-build/kosa8}" "$@" </dev/null; }
ck_x() { ck_sb exec ck -- sh -c "$1" 2>>"$WORK/out"; }
ck_in() { ck_sb exec "$1" -- sh -c "$2" 2>>"$WORK/out"; }
ck_root() { ck_sb exec -u root "$1" -- sh -c "$2" 2>>"$WORK/out"; }
# The guest's own vsock CID (IOCTL_VM_SOCKETS_GET_LOCAL_CID on /dev/vsock,
# which is root's only: ck_root).
CK_CID='python3 -c "import fcntl, struct; print(struct.unpack(\"I\", fcntl.ioctl(open(\"/dev/vsock\", \"rb\"), 0x7b9, bytes(4)))[0])"'

# Static checks first (no boot): a sandbox that does not run.
test_sandbox_checkpoint_errors() {
	ck_sb checkpoint nosuch >"$WORK/out" 2>&1
	if [ $? -eq 0 ] || ! grep -q "is not running" "$WORK/out"; then
		not_ok sandbox-checkpoint-error-not-running "want 'is not running'"
	else
		ok sandbox-checkpoint-error-not-running
	fi
}

# Two forks of the running sandbox from c1 (files as they were at c1, the
# counter process of c1 alive): each its own name, machine-id and random
# numbers, files written in one seen in neither the other nor the parent;
# the parent and c1 cannot be removed while they stand on them; the fork's
# first audit record names its parent and the log's signed head.
test_sandbox_fork() {
	local name=sandbox-fork-two-diverge pid1=$1 f r1 r2 m1 m2 m0 t0 rc
	t0=$(date +%s)
	ck_sb fork ck c1 --name ckf --count 2 >"$WORK/fork.out" 2>"$WORK/fork.err"; rc=$?; sed "s/^/  /" "$WORK/fork.err"; [ $rc -eq 0 ] || { ck_fail "$name" "fork failed"; return 1; }
	echo "  fork of c1, two children: $(($(date +%s) - t0)) s"
	[ "$(tr '\n' ' ' <"$WORK/fork.out")" = "ckf-1 ckf-2 " ] || { ck_fail "$name" "fork printed '$(cat "$WORK/fork.out")'"; return 1; }
	for f in ckf-1 ckf-2; do
		[ "$(ck_in $f 'cat /workspace/f')" = before ] || { ck_fail "$name" "$f: /workspace/f is not c1's 'before'"; return 1; }
		ck_in $f 'test ! -e /workspace/g' || { ck_fail "$name" "$f: /workspace/g (written after c1) is there"; return 1; }
		ck_in $f "kill -0 $pid1" || { ck_fail "$name" "$f: c1's counter process (pid $pid1) is not running"; return 1; }
		[ "$(ck_in $f hostname)" = $f ] || { ck_fail "$name" "$f: hostname '$(ck_in $f hostname)'"; return 1; }
	done
	ck_in ckf-1 'echo one >/workspace/only1' || { ck_fail "$name" "write in ckf-1 failed"; return 1; }
	ck_in ckf-2 'test ! -e /workspace/only1' || { ck_fail "$name" "ckf-1's file is seen in ckf-2"; return 1; }
	ck_x 'test ! -e /workspace/only1' || { ck_fail "$name" "ckf-1's file is seen in the parent"; return 1; }
	r1=$(ck_in ckf-1 'head -c 16 /dev/urandom | od -An -tx1')
	r2=$(ck_in ckf-2 'head -c 16 /dev/urandom | od -An -tx1')
	echo "  /dev/urandom: ckf-1 $r1 / ckf-2 $r2"
	[ -n "$r1" ] && [ "$r1" != "$r2" ] || { ck_fail "$name" "the forks drew the same random bytes"; return 1; }
	m0=$(ck_x 'cat /etc/machine-id'); m1=$(ck_in ckf-1 'cat /etc/machine-id'); m2=$(ck_in ckf-2 'cat /etc/machine-id')
	[ -n "$m1" ] && [ "$m1" != "$m2" ] && [ "$m1" != "$m0" ] || { ck_fail "$name" "machine-ids: parent '$m0', forks '$m1' '$m2'"; return 1; }
	# Each its own vsock CID, as the guest's kernel reports it (read from
	# config space on the transport reset), and as sandbox.json says.
	m0=$(ck_root ck "$CK_CID"); m1=$(ck_root ckf-1 "$CK_CID"); m2=$(ck_root ckf-2 "$CK_CID")
	echo "  vsock CIDs: ck $m0, ckf-1 $m1, ckf-2 $m2"
	[ -n "$m0" ] && [ -n "$m1" ] && [ -n "$m2" ] && [ "$m1" != "$m0" ] && [ "$m2" != "$m0" ] && [ "$m1" != "$m2" ] ||
		{ ck_fail "$name" "vsock CIDs: parent '$m0', forks '$m1' '$m2'"; return 1; }
	grep -q "\"cid\":[[:space:]]*$m1\b" "$WORK/ckstate/sandboxes/ckf-1/sandbox.json" ||
		{ ck_fail "$name" "ckf-1's guest has CID $m1, its sandbox.json another"; return 1; }
	ok "$name"

	name=sandbox-fork-pins-parent-audit
	ck_sb rm -f ck >"$WORK/rm.out" 2>&1 && { ck_fail "$name" "rm of the parent was allowed"; return 1; }
	grep -q "has forks" "$WORK/rm.out" || { ck_fail "$name" "rm said '$(cat "$WORK/rm.out")'"; return 1; }
	ck_sb checkpoint rm ck c1 >"$WORK/rm.out" 2>&1 && { ck_fail "$name" "checkpoint rm of c1 was allowed"; return 1; }
	grep -q "was forked from" "$WORK/rm.out" || { ck_fail "$name" "checkpoint rm said '$(cat "$WORK/rm.out")'"; return 1; }
	KOSA8_STATE_DIR=$WORK/ckstate "${CKB:-build/kosa8}" audit show --json --sandbox ckf-1 --type sandbox.start >"$WORK/audit.out" 2>&1
	grep -q '"fork_of":"ck"' "$WORK/audit.out" && grep -q '"parent_head_root":"[0-9a-f]\{64\}"' "$WORK/audit.out" ||
		{ ck_fail "$name" "no sandbox.start record naming the parent and its head: $(head -c 300 "$WORK/audit.out")"; return 1; }
	ck_sb rm -f ckf-1 >/dev/null 2>&1; ck_sb rm -f ckf-2 >/dev/null 2>&1
	ok "$name"

	# Without an id: a checkpoint of the running parent now, so a file
	# written since c1 is in the fork.
	name=sandbox-fork-now-has-later-files
	ck_x 'echo late >/workspace/late' || { ck_fail "$name" "write in the parent failed"; return 1; }
	ck_sb fork ck --name ckl >"$WORK/fork.out" 2>"$WORK/fork.err"
	rc=$?
	sed 's/^/  /' "$WORK/fork.err"
	[ $rc -eq 0 ] || { ck_fail "$name" "fork without an id failed"; return 1; }
	[ "$(ck_in ckl 'cat /workspace/late')" = late ] || { ck_fail "$name" "the fork does not have /workspace/late"; return 1; }
	ck_sb rm -f ckl >/dev/null 2>&1
	ok "$name"
}

# Checkpoints after the first are layers of the pages written since the
# one before (KVM's dirty log and the VMM's own writes): a few MiB where the
# full one is the guest's whole used RAM.  Rewinding to a layer on a layer
# gives back that moment; removing the middle one folds it into the top.
ck_kb() { du -k "$WORK/ckstate/sandboxes/ck/checkpoints/$1/memory" | cut -f1; }
ck_kind() { ck_sb checkpoints ck | awk -v id="$1" '$1 == id { print $6 }'; }
test_sandbox_incremental() {
	local name=sandbox-checkpoint-incremental-layers pid1=$1 a b c ka kb kc n
	ck_x 'echo A >/workspace/inc' || { ck_fail "$name" "exec failed"; return 1; }
	a=$(ck_sb checkpoint ck -m inc-a 2>>"$WORK/out") || { ck_fail "$name" "checkpoint a failed"; return 1; }
	ck_x 'echo B >/workspace/inc; echo b >/workspace/incb' || { ck_fail "$name" "exec failed"; return 1; }
	b=$(ck_sb checkpoint ck -m inc-b 2>>"$WORK/out") || { ck_fail "$name" "checkpoint b failed"; return 1; }
	ck_x 'echo C >/workspace/inc; rm /workspace/incb; echo c >/workspace/incc' || { ck_fail "$name" "exec failed"; return 1; }
	n=$(ck_x 'cat /tmp/count')
	c=$(ck_sb checkpoint ck -m inc-c 2>>"$WORK/out") || { ck_fail "$name" "checkpoint c failed"; return 1; }
	ck_sb checkpoints ck | sed 's/^/  | /'
	ka=$(ck_kb "$a"); kb=$(ck_kb "$b"); kc=$(ck_kb "$c")
	echo "  memory files: $a $(ck_kind "$a") $ka KiB, $b $(ck_kind "$b") $kb KiB, $c $(ck_kind "$c") $kc KiB"
	# $a stands on nothing: the checkpoint last written was removed above.
	[ "$(ck_kind "$a")" = full ] && [ "$(ck_kind "$b")" = layer ] && [ "$(ck_kind "$c")" = layer ] ||
		{ ck_fail "$name" "kinds: $a $(ck_kind "$a"), $b $(ck_kind "$b"), $c $(ck_kind "$c"); want full, layer, layer"; return 1; }
	[ $((kb * 2)) -lt "$ka" ] && [ $((kc * 2)) -lt "$ka" ] ||
		{ ck_fail "$name" "the layers are not smaller than half the full one"; return 1; }
	ck_x 'echo D >/workspace/inc' && ck_sb rewind ck "$c" >>"$WORK/out" 2>&1 || { ck_fail "$name" "rewind to $c failed"; return 1; }
	[ "$(ck_x 'cat /workspace/inc /workspace/incc')" = "$(printf 'C\nc')" ] && ck_x 'test ! -e /workspace/incb' ||
		{ ck_fail "$name" "after the rewind to $c the workspace is not $c's"; return 1; }
	ck_x "kill -0 $pid1" && [ "$(ck_x 'cat /tmp/count')" -ge "$n" ] ||
		{ ck_fail "$name" "the counter process is gone or went back before $n"; return 1; }
	ok "$name"

	name=sandbox-checkpoint-incremental-rm-middle
	ck_sb checkpoint rm ck "$b" >"$WORK/rm.out" 2>>"$WORK/out" || { ck_fail "$name" "checkpoint rm $b failed"; return 1; }
	sed 's/^/  /' "$WORK/rm.out"
	[ ! -e "$WORK/ckstate/sandboxes/ck/checkpoints/$b" ] && [ "$(ck_kind "$c")" = layer ] ||
		{ ck_fail "$name" "$b is still there, or $c is no longer a layer (over $a)"; return 1; }
	ck_x 'echo E >/workspace/inc' && ck_sb rewind ck "$c" >>"$WORK/out" 2>&1 || { ck_fail "$name" "rewind to $c after rm $b failed"; return 1; }
	[ "$(ck_x 'cat /workspace/inc /workspace/incc')" = "$(printf 'C\nc')" ] && ck_x "kill -0 $pid1" ||
		{ ck_fail "$name" "after rm $b the rewind to $c did not give $c's workspace and processes"; return 1; }
	ok "$name"
}

# A terminal session (exec -t, the pty owned by script(1)) runs on across a
# checkpoint of its sandbox: every line arrives, in order, and then its exit
# status.
test_sandbox_tty_checkpoint() {
	local name=sandbox-checkpoint-tty-session-survives t=$WORK/tty.out spid id rc ticks i
	: >"$t"
	KOSA8_STATE_DIR=$WORK/ckstate timeout -k 5 300 script -qec \
		"${CKB:-build/kosa8} exec -t ck -- sh -c 'tty; for i in \$(seq 1 30); do echo tick \$i; sleep 0.3; done; exit 3'" \
		/dev/null </dev/null >"$t" 2>&1 &
	spid=$!
	for ((i = 0; i < 300; i++)); do
		grep -q "tick 5" "$t" && break
		sleep 0.2
	done
	id=$(ck_sb checkpoint ck -m tty 2>>"$WORK/out") || { kill "$spid"; ck_fail "$name" "checkpoint during a tty session failed"; return 1; }
	echo "  checkpoint $id taken at $(tr -d '\r' <"$t" | grep -c '^tick ') of 30 ticks"
	wait "$spid"
	rc=$?
	ticks=$(tr -d '\r' <"$t" | sed -n 's/^tick //p' | paste -sd' ')
	if [ "$rc" -ne 3 ]; then
		ck_fail "$name" "the session ended with $rc, want 3; it printed: $(tr -d '\r' <"$t" | tail -3 | paste -sd'|')"; return 1
	elif ! tr -d '\r' <"$t" | grep -q '^/dev/pts/[0-9]'; then
		ck_fail "$name" "the command had no pty"; return 1
	elif [ "$ticks" != "$(seq -s' ' 1 30)" ]; then
		ck_fail "$name" "ticks seen: '$ticks'"; return 1
	fi
	ck_sb checkpoint rm ck "$id" >/dev/null 2>>"$WORK/out"
	ok "$name"
}

# The counter is a process started before the checkpoint: its count lives
# in its memory (a shell variable) and is shown in /tmp/count.  A file
# /tmp/jump makes it add CK_JUMP once: the rewind test sets it after the
# checkpoint, so a count taken from the checkpoint's memory stays below
# CK_JUMP however long the restored guest runs before it is read (CI,
# 2026-12-04: a rewind of 27 s let the restored counter pass the count
# read before the rewind, which the test then took for no rewind).
CK_JUMP=1000000
ck_start_counter() {
	ck_x 'setsid sh -c '\''n=0; while :; do if [ -e /tmp/jump ]; then rm -f /tmp/jump; n=$((n+'"$CK_JUMP"')); fi; n=$((n+1)); echo $n >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done'\'' </dev/null >/dev/null 2>&1 & echo $! >/tmp/counter.pid'
}

ck_fail() {
	not_ok "$1" "$2"
	echo "  --- supervisor log / console (last lines) ---"
	tail -15 "$WORK/ckstate/sandboxes/ck/supervisor.log" 2>/dev/null | sed 's/^/  | /'
	tail -25 "$WORK/ckstate/sandboxes/ck/console.log" 2>/dev/null | sed 's/^/  | /'
	ls -la "$WORK/ckstate/sandboxes/ck/" "$WORK/ckstate/sandboxes/ck/checkpoints" 2>&1 | sed 's/^/  | /'
	ck_sb rm -f ck >/dev/null 2>&1
}

test_sandbox_checkpoint() {
	local name=sandbox-checkpoint-rewind-files-processes c0 c1 vb va pid1 pid2 id id2 t0
	rm -rf "$WORK/ckstate" && mkdir -p "$WORK/ckstate"
	: >"$WORK/out"
	ck_sb create --name ck >>"$WORK/out" 2>&1 || { ck_fail "$name" "create failed"; return; }
	t0=$(date +%s)
	ck_sb start ck >>"$WORK/out" 2>&1 || { ck_fail "$name" "start failed"; return; }
	echo "  sandbox start: $(($(date +%s) - t0)) s"
	ck_x 'echo before >/workspace/f' && ck_start_counter || { ck_fail "$name" "exec failed"; return; }
	sleep 3
	pid1=$(ck_x 'cat /tmp/counter.pid')
	c0=$(ck_x 'cat /tmp/count')
	t0=$(date +%s)
	id=$(ck_sb checkpoint ck -m "first one" 2>>"$WORK/out") || { ck_fail "$name" "checkpoint failed"; return; }
	echo "  checkpoint $id at count >= $c0: $(($(date +%s) - t0)) s"
	[ "$id" = c1 ] || { ck_fail "$name" "checkpoint id '$id', want c1"; return; }
	# After the checkpoint: the file changes, a new file and a new process.
	ck_x 'echo after >/workspace/f; echo new >/workspace/g; touch /tmp/jump; setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $! >/tmp/p2.pid' ||
		{ ck_fail "$name" "exec after the checkpoint failed"; return; }
	pid2=$(ck_x 'cat /tmp/p2.pid')
	sleep 20
	vb=$(ck_x 'cat /tmp/count')
	[ -n "$vb" ] && [ "$vb" -gt "$CK_JUMP" ] || { ck_fail "$name" "the counter did not jump after the checkpoint: '$vb'"; return; }
	t0=$(date +%s)
	ck_sb rewind ck c1 >>"$WORK/out" 2>&1 || { ck_fail "$name" "rewind failed"; return; }
	echo "  rewind: $(($(date +%s) - t0)) s"
	va=$(ck_x 'cat /tmp/count')
	echo "  counter: $c0 at the checkpoint, $vb before the rewind, $va after"
	[ "$(ck_x 'cat /workspace/f')" = before ] || { ck_fail "$name" "/workspace/f is not back to 'before'"; return; }
	ck_x 'test ! -e /workspace/g' || { ck_fail "$name" "/workspace/g written after the checkpoint is still there"; return; }
	ck_x "kill -0 $pid1" || { ck_fail "$name" "the counter process (pid $pid1) did not survive the rewind"; return; }
	ck_x "test ! -e /proc/$pid2" || { ck_fail "$name" "the process started after the checkpoint (pid $pid2) is still there"; return; }
	if [ -z "$va" ] || [ "$va" -lt "$c0" ] || [ "$va" -ge "$CK_JUMP" ]; then
		ck_fail "$name" "counter after the rewind is '$va', want $c0 or more and below $CK_JUMP (before the rewind: $vb)"; return
	fi
	sleep 3
	[ "$(ck_x 'cat /tmp/count')" -gt "$va" ] || { ck_fail "$name" "the counter does not count after the rewind"; return; }
	ok "$name"

	name=sandbox-checkpoint-tree-rm-audit
	id2=$(ck_sb checkpoint ck -m "after rewind" 2>>"$WORK/out") || { ck_fail "$name" "a checkpoint after the rewind failed"; return; }
	ck_sb checkpoints ck >"$WORK/tree" 2>>"$WORK/out"
	sed 's/^/  | /' "$WORK/tree"
	grep -q "^c1 .*first one" "$WORK/tree" && grep -q "^  $id2 *c1 .*after rewind" "$WORK/tree" &&
		grep -q "^2 checkpoints, " "$WORK/tree" || { ck_fail "$name" "the tree does not show c1 and $id2 under it"; return; }
	[ -s "$WORK/ckstate/sandboxes/ck/checkpoints/$id2/memory" ] || { ck_fail "$name" "no memory file for $id2"; return; }
	ck_sb checkpoint rm ck "$id2" >"$WORK/rm.out" 2>>"$WORK/out" || { ck_fail "$name" "checkpoint rm failed"; return; }
	cat "$WORK/rm.out"
	grep -q "removed $id2, [1-9][0-9.]* MiB freed" "$WORK/rm.out" || { ck_fail "$name" "rm did not say it freed space"; return; }
	[ ! -e "$WORK/ckstate/sandboxes/ck/checkpoints/$id2" ] || { ck_fail "$name" "$id2's files are still there"; return; }
	ck_sb checkpoints ck | grep -q "^$id2 \|^  $id2 " && { ck_fail "$name" "$id2 still listed"; return; }
	for t in checkpoint.create checkpoint.rewind checkpoint.rm; do
		KOSA8_STATE_DIR=$WORK/ckstate "${CKB:-build/kosa8}" audit show --sandbox ck --type "$t" 2>/dev/null | grep -q . ||
			{ ck_fail "$name" "no $t audit record"; return; }
	done
	ok "$name"

	test_sandbox_tty_checkpoint || return
	test_sandbox_incremental "$pid1" || return
	test_sandbox_fork "$pid1" || return

	# Refused cleanly, the sandbox running on as it was.
	ck_x 'echo still-here >/workspace/h'
	ck_sb rewind ck c99 >"$WORK/out" 2>&1
	if [ $? -eq 0 ] || [ "$(wc -l <"$WORK/out")" -ne 1 ] || ! grep -q "no checkpoint c99" "$WORK/out"; then
		not_ok sandbox-checkpoint-unknown-id-refused "want one line 'no checkpoint c99'"
	else
		ok sandbox-checkpoint-unknown-id-refused
	fi
	id2=$(ck_sb checkpoint ck 2>>"$WORK/out")
	printf '\377' | dd of="$WORK/ckstate/sandboxes/ck/checkpoints/$id2/state" bs=1 seek=300 conv=notrunc 2>/dev/null
	ck_sb rewind ck "$id2" >"$WORK/out" 2>&1
	if [ $? -eq 0 ] || [ "$(wc -l <"$WORK/out")" -ne 1 ] || ! grep -q "checksum mismatch" "$WORK/out"; then
		not_ok sandbox-checkpoint-corrupt-refused "want one line with 'checksum mismatch'"
		sed 's/^/  | /' "$WORK/out"
	elif [ "$(ck_x 'cat /workspace/h')" != still-here ]; then
		not_ok sandbox-checkpoint-corrupt-refused "the sandbox did not run on after the refusal"
	else
		ok sandbox-checkpoint-corrupt-refused
	fi
	ck_sb rm -f ck >/dev/null 2>&1
}

# A live fork (`kosa8 fork NAME` of a sandbox started fresh, its RAM still
# the VMM's own memfd): the memory is frozen and handed to the fork, not
# written first.  The fork has the parent's files and processes; the two
# diverge; the parent writes the checkpoint's memory file afterwards, its
# next checkpoint is a layer over that, and a rewind to it runs.
lv_sb() { KOSA8_STATE_DIR=$WORK/lvstate timeout -k 5 600 "${CKB:-build/kosa8}" "$@" </dev/null; }
lv_in() { lv_sb exec "$1" -- sh -c "$2" 2>>"$WORK/out"; }
lv_fail() {
	not_ok "$1" "$2"
	for sb in lv lvf; do
		echo "  --- $sb: supervisor log / console (last lines) ---"
		tail -12 "$WORK/lvstate/sandboxes/$sb/supervisor.log" 2>/dev/null | sed 's/^/  | /'
		tail -12 "$WORK/lvstate/sandboxes/$sb/console.log" 2>/dev/null | sed 's/^/  | /'
	done
	ls -la "$WORK/lvstate/sandboxes/lv/checkpoints"/* 2>&1 | sed 's/^/  | /'
	lv_sb rm -f lvf >/dev/null 2>&1
	lv_sb rm -f lv >/dev/null 2>&1
}

test_sandbox_fork_live() {
	local name=sandbox-fork-live-shares-frozen-memory pid c0 c1 t0 rc id id2 dir i
	rm -rf "$WORK/lvstate" && mkdir -p "$WORK/lvstate"
	: >"$WORK/out"
	# Booted (--cold): a live fork freezes the VMM's own memfd as it is.
	# A sandbox restored from a template has none (its RAM is the
	# template's file, mapped private) and copies RAM into one first:
	# tests/vm/sandbox-template.sh sandbox-template-live-fork.
	lv_sb create --cold --name lv >>"$WORK/out" 2>&1 || { lv_fail "$name" "create failed"; return; }
	lv_sb start lv >>"$WORK/out" 2>&1 || { lv_fail "$name" "start failed"; return; }
	lv_in lv 'echo before >/workspace/f; setsid sh -c '\''n=0; while :; do n=$((n+1)); echo $n >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done'\'' </dev/null >/dev/null 2>&1 & echo $! >/tmp/counter.pid' ||
		{ lv_fail "$name" "exec failed"; return; }
	sleep 2
	pid=$(lv_in lv 'cat /tmp/counter.pid')
	c0=$(lv_in lv 'cat /tmp/count')
	t0=$(date +%s)
	lv_sb fork lv --name lvf >"$WORK/fork.out" 2>"$WORK/fork.err"
	rc=$?
	sed 's/^/  /' "$WORK/fork.err"
	echo "  live fork to a running child: $(($(date +%s) - t0)) s"
	[ $rc -eq 0 ] || { lv_fail "$name" "fork failed"; return; }
	grep -q "(live" "$WORK/fork.err" || { lv_fail "$name" "the fork of a freshly started sandbox was not live"; return; }
	id=$(sed -n "s/^kosa8 fork: checkpoint \(c[0-9]*\) of 'lv'.*/\1/p" "$WORK/fork.err")
	[ "$(lv_in lvf 'cat /workspace/f')" = before ] || { lv_fail "$name" "the fork does not have /workspace/f"; return; }
	lv_in lvf "kill -0 $pid" || { lv_fail "$name" "the counter process (pid $pid) is not in the fork"; return; }
	c1=$(lv_in lvf 'cat /tmp/count')
	sleep 1
	[ -n "$c1" ] && [ "$c1" -ge "$c0" ] && [ "$(lv_in lvf 'cat /tmp/count')" -gt "$c1" ] ||
		{ lv_fail "$name" "the fork's counter: $c0 in the parent before, then $c1, not counting on"; return; }
	lv_in lv 'echo parent >/workspace/p' && lv_in lvf 'echo child >/workspace/c' ||
		{ lv_fail "$name" "writes after the fork failed"; return; }
	lv_in lvf 'test ! -e /workspace/p' && lv_in lv 'test ! -e /workspace/c' ||
		{ lv_fail "$name" "a file written after the fork is in the other sandbox"; return; }
	ok "$name"

	name=sandbox-fork-live-memory-written-layer-rewind
	dir=$WORK/lvstate/sandboxes/lv/checkpoints/$id
	for i in $(seq 1 120); do [ -e "$dir/memory" ] && break; sleep 1; done
	[ -s "$dir/memory" ] && [ ! -e "$dir/memory.part" ] ||
		{ lv_fail "$name" "$id has no complete memory file after the fork"; return; }
	id2=$(lv_sb checkpoint lv -m "after the live fork" 2>>"$WORK/out") || { lv_fail "$name" "checkpoint of the parent failed"; return; }
	lv_sb checkpoints lv | sed 's/^/  | /'
	[ "$(lv_sb checkpoints lv | awk -v id="$id2" '$1 == id || $2 == id { print }' | grep -c layer)" = 1 ] ||
		{ lv_fail "$name" "$id2, the parent's checkpoint after the fork, is not a layer over $id"; return; }
	lv_in lv 'echo later >/workspace/p'
	lv_sb rewind lv "$id2" >>"$WORK/out" 2>&1 || { lv_fail "$name" "rewind to $id2 failed"; return; }
	[ "$(lv_in lv 'cat /workspace/p')" = parent ] && [ "$(lv_in lv 'cat /workspace/f')" = before ] ||
		{ lv_fail "$name" "after the rewind /workspace/p is '$(lv_in lv 'cat /workspace/p')'"; return; }
	lv_in lv "kill -0 $pid" || { lv_fail "$name" "the counter process did not survive the rewind"; return; }
	ok "$name"
	lv_sb rm -f lvf >/dev/null 2>&1
	lv_sb rm -f lv >/dev/null 2>&1
}
