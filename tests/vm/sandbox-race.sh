# A supervisor that serves many clients at once (sourced by tests/vm/run-all,
# or tests/vm/sandbox-race-only).  One sandbox is hammered from parallel
# clients: checkpoint, start, rm, exec, ps, stop and fork.  While a
# checkpoint runs, `status` (ps) answers and names it, and what would
# conflict is refused with why; no live sandbox is deleted or clobbered; no
# checkpoint is lost, not even when the supervisor is killed with SIGKILL in
# the middle of one.
#
# The VMM is held with SIGSTOP where a checkpoint must still be running
# when the next command arrives: the supervisor then waits on it as it
# waits on a VMM writing a large guest's memory, for as long as the test
# needs, so nothing here depends on how fast the helper VM is.
#
# Uses run-all's WORK, ok, not_ok; RCB (default build/kosa8) is the binary.

rc_sb() { KOSA8_STATE_DIR=$WORK/rcstate timeout -k 5 "${RC_BOUND:-300}" "${RCB:-build/kosa8}" "$@" </dev/null; }
rc_fail() {
	not_ok "$1" "$2"
	echo "  --- rc: supervisor log (last lines) ---"
	tail -15 "$WORK/rcstate/sandboxes/rc/supervisor.log" 2>/dev/null | sed 's/^/  | /'
	for s in rf rl rc; do RC_BOUND=120 rc_sb rm -f "$s" >/dev/null 2>&1; done
}
rc_owner_pid() { sed -n 's/^\([0-9]*\) supervisor$/\1/p' "$WORK/rcstate/sandboxes/$1/owner.lock" 2>/dev/null; }
rc_vmm_pid() { pgrep -f "kosa8-vmm .*rcstate/sandboxes/$1/" | head -1; }
rc_supervisors() { pgrep -fc "__supervise $1( |\$)"; }
# Writes N MiB the guest's memory must hold (tmpfs), not zeroes.
rc_dirty() { rc_sb exec rc -- sh -c "head -c ${1}M /dev/zero | tr '\\0' k >/dev/shm/dirty-$2" >>"$WORK/out" 2>&1; }
# The ps line of rc, within a bound of its own.
rc_ps() { RC_BOUND=10 rc_sb ps 2>&1 | grep '^rc '; }

# Waits (up to 20 s) until ps names a running operation matching $1.
rc_wait_op() {
	local i
	for i in $(seq 1 100); do
		rc_ps | grep -q "running ($1" && return 0
		sleep 0.2
	done
	return 1
}

test_sandbox_race() {
	local name=sandbox-status-during-checkpoint vmm sup ckpid i f out
	rm -rf "$WORK/rcstate" "$WORK/rc" && mkdir -p "$WORK/rcstate" "$WORK/rc"
	: >"$WORK/out"
	rc_sb create --name rc --mem 512M >>"$WORK/out" 2>&1 && rc_sb start rc >>"$WORK/out" 2>&1 ||
		{ rc_fail "$name" "create or start failed"; return; }
	[ "$(rc_sb checkpoint rc -m first 2>>"$WORK/out")" = c1 ] || { rc_fail "$name" "the first checkpoint is not c1"; return; }
	sup=$(rc_owner_pid rc)
	vmm=$(rc_vmm_pid rc)
	[ -n "$sup" ] && [ -n "$vmm" ] || { rc_fail "$name" "no supervisor ($sup) or VMM ($vmm) pid"; return; }
	rc_dirty 96 a || { rc_fail "$name" "could not dirty the guest's memory"; return; }
	kill -STOP "$vmm"
	rc_sb checkpoint rc -m dirty >"$WORK/rc/ck" 2>&1 &
	ckpid=$!
	rc_wait_op 'checkpoint c2' || { kill -CONT "$vmm"; rc_fail "$name" "ps never named the checkpoint: '$(rc_ps)'"; return; }
	# Answered while the checkpoint's own reply has not come.
	kill -0 "$ckpid" 2>/dev/null && [ ! -s "$WORK/rc/ck" ] ||
		{ kill -CONT "$vmm"; rc_fail "$name" "the checkpoint ended before ps answered: $(cat "$WORK/rc/ck")"; return; }
	echo "  ps during the checkpoint: $(rc_ps)"
	ok "$name"

	name=sandbox-busy-answers-name-the-operation
	local bpids=()
	rc_sb stop rc >"$WORK/rc/b.stop" 2>&1 & bpids+=($!)
	rc_sb rm rc >"$WORK/rc/b.rm" 2>&1 & bpids+=($!)
	rc_sb start rc >"$WORK/rc/b.start" 2>&1 & bpids+=($!)
	rc_sb rewind rc c1 >"$WORK/rc/b.rewind" 2>&1 & bpids+=($!)
	rc_sb checkpoint rc >"$WORK/rc/b.checkpoint" 2>&1 & bpids+=($!)
	rc_sb checkpoint rm rc c1 >"$WORK/rc/b.ckrm" 2>&1 & bpids+=($!)
	rc_sb fork rc --name rl >"$WORK/rc/b.fork" 2>&1 & bpids+=($!)
	# All answered while the checkpoint is still held.
	wait "${bpids[@]}"
	kill -CONT "$vmm"
	wait "$ckpid"
	wait
	for f in stop rm start rewind checkpoint ckrm fork; do
		grep -q "busy: checkpoint c2 running for [0-9]* s" "$WORK/rc/b.$f" ||
			{ rc_fail "$name" "$f during the checkpoint: '$(cat "$WORK/rc/b.$f")'"; return; }
	done
	echo "  stop: $(cat "$WORK/rc/b.stop")"
	echo "  rm:   $(cat "$WORK/rc/b.rm")"
	grep -q '^c2$' "$WORK/rc/ck" || { rc_fail "$name" "the checkpoint failed: $(cat "$WORK/rc/ck")"; return; }
	[ "$(rc_owner_pid rc)" = "$sup" ] && [ "$(rc_sb exec rc -- echo alive 2>>"$WORK/out")" = alive ] ||
		{ rc_fail "$name" "rc is not the same running sandbox"; return; }
	ok "$name"

	name=sandbox-race-parallel-clients
	if ! test_sandbox_race_hammer "$name" "$sup"; then return; fi
	ok "$name"

	name=sandbox-sigkill-mid-checkpoint
	local before
	before=$(rc_sb checkpoints rc 2>>"$WORK/out" | awk '/^ *c[0-9]/ {print $1}' | sort)
	rc_dirty 96 b
	rc_sb checkpoint rc -m killed >"$WORK/rc/killed" 2>&1 &
	rc_wait_op 'checkpoint' || { rc_fail "$name" "ps never named the checkpoint"; return; }
	kill -KILL "$sup"
	wait
	for i in $(seq 1 60); do rc_ps | grep -q ' stopped' && break; sleep 0.5; done
	rc_ps | grep -q ' stopped' || { rc_fail "$name" "rc is not free after its supervisor was killed: $(rc_ps)"; return; }
	for i in $before; do
		rc_sb checkpoints rc 2>/dev/null | grep -q "^ *$i " && [ -s "$WORK/rcstate/sandboxes/rc/checkpoints/$i/state" ] ||
			{ rc_fail "$name" "checkpoint $i is gone after the kill"; return; }
	done
	rc_sb start rc >>"$WORK/out" 2>&1 || { rc_fail "$name" "start after the kill failed"; return; }
	[ "$(rc_supervisors rc)" -eq 1 ] || { rc_fail "$name" "$(rc_supervisors rc) supervisors on rc"; return; }
	rc_sb rewind rc c1 >>"$WORK/out" 2>&1 || { rc_fail "$name" "rewind to c1 after the kill failed"; return; }
	[ "$(rc_sb exec rc -- echo alive 2>>"$WORK/out")" = alive ] || { rc_fail "$name" "exec after the rewind failed"; return; }
	echo "  checkpoints kept across the kill: $(echo $before)"
	RC_BOUND=120 rc_sb rm -f rc >>"$WORK/out" 2>&1 || { rc_fail "$name" "rm -f failed"; return; }
	ok "$name"
}

# While $WORK/rc/pause exists the checkpoint and stop loops wait: the
# live fork needs a moment when no checkpoint runs.
rc_paused() { [ -e "$WORK/rc/pause" ] && sleep 0.2; }

# One client loop: runs "kosa8 ARGS" until $WORK/rc/end exists, one result
# line per round in $WORK/rc/r.TAG: "ok OUTPUT" or "refused OUTPUT".
rc_loop() {
	local tag=$1 out
	shift
	while [ ! -e "$WORK/rc/end" ]; do
		rc_paused && continue
		if out=$(RC_BOUND=60 rc_sb "$@" 2>&1); then
			echo "ok $(echo $out)"
		else
			echo "refused $(echo $out)"
		fi >>"$WORK/rc/r.$tag"
	done
}

# stop, only ever while a checkpoint is held half-way (the VMM stopped):
# it must be refused, naming the checkpoint.
rc_stop_loop() {
	local vmm=$1 out
	while [ ! -e "$WORK/rc/end" ]; do
		rc_paused && continue
		kill -STOP "$vmm"
		(RC_BOUND=60 rc_sb checkpoint rc -m held >/dev/null 2>&1 &)
		sleep 1.5
		if rc_ps | grep -q 'running (checkpoint'; then
			out=$(RC_BOUND=60 rc_sb stop rc 2>&1) && echo "stopped $(echo $out)" || echo "refused $(echo $out)"
		fi >>"$WORK/rc/r.stop"
		kill -CONT "$vmm"
		sleep 1
	done
}

test_sandbox_race_hammer() {
	local name=$1 sup=$2 vmm t0 f n bad pids=() id
	vmm=$(rc_vmm_pid rc)
	rm -f "$WORK/rc/end" "$WORK/rc/pause" "$WORK/rc"/r.*
	t0=$SECONDS
	rc_loop checkpoint checkpoint rc & pids+=($!)
	rc_loop start start rc & pids+=($!)
	rc_loop rm rm rc & pids+=($!)
	rc_loop exec exec rc -- true & pids+=($!)
	rc_loop ps ps & pids+=($!)
	rc_stop_loop "$vmm" & pids+=($!)
	# Forks: one from c1, one live (retried while a checkpoint is busy).
	RC_BOUND=300 rc_sb fork rc c1 --name rf >"$WORK/rc/fork1" 2>&1
	touch "$WORK/rc/pause"
	for n in $(seq 1 30); do
		RC_BOUND=300 rc_sb fork rc --name rl >"$WORK/rc/fork2" 2>&1 && break
		grep -q 'is busy: ' "$WORK/rc/fork2" || break
		sleep 1
	done
	rm -f "$WORK/rc/pause"
	while [ $((SECONDS - t0)) -lt "${RACE_SECONDS:-80}" ]; do sleep 1; done
	touch "$WORK/rc/end"
	wait "${pids[@]}"
	kill -CONT "$vmm" 2>/dev/null
	echo "  $(cat "$WORK"/rc/r.* | wc -l) rounds in $((SECONDS - t0)) s: $(for f in "$WORK"/rc/r.*; do
		printf '%s %s/%s; ' "${f##*.}" "$(grep -c '^ok' "$f")" "$(wc -l <"$f")"; done)"
	# Every result is one of what may happen, and a refusal says why.
	bad=$(grep -v '^refused kosa8 start: sandbox .rc. is running (supervisor pid '"$sup"')' "$WORK/rc/r.start"
	      grep -v '^refused kosa8 rm: sandbox .rc. is running (supervisor pid '"$sup"').*: stop it first' "$WORK/rc/r.rm" |
		grep -v "^refused kosa8 rm: sandbox 'rc' has forks that run from its checkpoints ('r[fl]'): kosa8 rm them first$"
	      grep -v '^ok $' "$WORK/rc/r.exec" | grep -v '^refused kosa8 exec: ..*'
	      grep -v '^ok NAME .*rc  *running' "$WORK/rc/r.ps"
	      grep -v '^ok c[0-9]*$' "$WORK/rc/r.checkpoint" | grep -v '^refused kosa8 checkpoint: rc is busy: checkpoint c[0-9]* running for [0-9]* s$'
	      grep -v '^refused kosa8 stop: .*rc is busy: checkpoint c[0-9]* running for [0-9]* s' "$WORK/rc/r.stop")
	[ -z "$bad" ] || { rc_fail "$name" "unexpected results: $(echo "$bad" | sort | uniq -c | head -5)"; return 1; }
	[ -s "$WORK/rc/r.stop" ] || { rc_fail "$name" "no stop was tried during a held checkpoint"; return 1; }
	[ "$(grep -c '^ok c' "$WORK/rc/r.checkpoint")" -ge 1 ] || { rc_fail "$name" "no checkpoint was taken"; return 1; }
	# The same sandbox, running, with every checkpoint a client was given.
	[ "$(rc_owner_pid rc)" = "$sup" ] && [ "$(rc_supervisors rc)" -eq 1 ] ||
		{ rc_fail "$name" "rc's supervisor changed: $(rc_owner_pid rc), $(rc_supervisors rc) running"; return 1; }
	[ "$(rc_sb exec rc -- echo alive 2>>"$WORK/out")" = alive ] || { rc_fail "$name" "rc does not answer after the race"; return 1; }
	for id in c1 c2 $(sed -n 's/^ok \(c[0-9]*\)$/\1/p' "$WORK/rc/r.checkpoint"); do
		rc_sb checkpoints rc 2>/dev/null | grep -q "^ *$id " || { rc_fail "$name" "checkpoint $id was lost"; return 1; }
	done
	for f in rf rl; do
		[ "$(rc_sb exec "$f" -- cat /proc/sys/kernel/hostname 2>>"$WORK/out")" = "$f" ] ||
			{ rc_fail "$name" "fork $f does not run: $(cat "$WORK/rc/fork1" "$WORK/rc/fork2")"; return 1; }
		RC_BOUND=120 rc_sb rm -f "$f" >>"$WORK/out" 2>&1 || { rc_fail "$name" "rm -f $f failed"; return 1; }
	done
	return 0
}
