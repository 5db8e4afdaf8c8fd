# Sourced by tests/vm/run-all: checkpoint and restore of a running VM
# (kosa8 vm --control, kosa8 vmctl, kosa8 vm --restore; docs/snapshot-format.md).
# Uses run-all's KERNEL, INITRD, WORK, BOOT_TIMEOUT, ok, not_ok, expect_error.

# wait_for FILE PATTERN SECONDS [PID]: until a line of FILE matches (grep
# -E); with PID, gives up at once when that process (the VMM) has ended.
# The limit is in seconds of the clock, not in polls: under emulation each
# poll's fork and exec take a good part of a second.
wait_for() {
	local end=$((SECONDS + $3))
	while [ "$SECONDS" -lt "$end" ]; do
		tr -d '\r' 2>/dev/null <"$1" | grep -qE -- "$2" && return 0
		if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then
			tr -d '\r' 2>/dev/null <"$1" | grep -qE -- "$2"
			return
		fi
		sleep 0.1
	done
	return 1
}
# vmm_threads PID: one line per thread of a stuck VMM (name, state, CPU
# ticks, where it sleeps in the kernel), twice 2 s apart so that a spinning
# thread shows, then the helper's load: for the log of a failed test.
vmm_threads() {
	local t round
	for round in 1 2; do
		[ "$round" = 2 ] && sleep 2
		for t in /proc/"$1"/task/*; do
			[ -r "$t/stat" ] || continue
			echo "  thread $(cat "$t/comm" 2>/dev/null): state/utime/stime $(awk '{print $3, $14, $15}' "$t/stat" 2>/dev/null), in $(cat "$t/wchan" 2>/dev/null), stack: $(head -3 "$t/stack" 2>/dev/null | awk '{printf "%s ", $2}')"
		done
	done
	echo "  helper load: $(cat /proc/loadavg), $(grep MemAvailable /proc/meminfo)"
}
counts() { tr -d '\r' <"$1" | sed -n 's/^k8: count=\([0-9][0-9]*\)$/\1/p'; }

# restore_once BIN DIR CHECKPOINT RUN C_REQ C_REP [NEXT]: runs CHECKPOINT on
# a new disk delta and checks the guest goes on from where it was: the
# counter from its checkpoint value, console input, virtio-rng, and the disk
# as of the checkpoint.  With NEXT, the restored VM is itself checkpointed
# there (ck_req, ck_rep: the counts around it).  Sets ck_err on failure.
restore_once() {
	local bin=$1 d=$2 cp=$3 run=$4 c_req=$5 c_rep=$6 next=${7:-} out=$2/out-r$4 pid c1 disk rc i
	ck_err=
	ck_out=$out
	mkfifo "$d/in-r$run"
	exec 8<>"$d/in-r$run"
	"$bin" vm --no-emulate --restore "$cp" --disk "$d/r$run.k8d" ${next:+--control "$d/ctl-r$run"} \
		<"$d/in-r$run" >"$out" 2>&1 &
	pid=$!
	if ! wait_for "$out" '^k8: count=' 120 "$pid"; then
		ck_err="restore $run: no count line"; vmm_threads "$pid"
	else
		c1=$(counts "$out" | head -1)
		# The first count after the restore continues the checkpointed one:
		# at least the last one seen before asking for the checkpoint, at
		# most one past the last one printed when the answer came.
		if [ "$c1" -lt "$c_req" ] || [ "$c1" -gt $((c_rep + 2)) ]; then
			ck_err="restore $run: counter resumed at $c1, want $c_req..$((c_rep + 2))"
		elif ! wait_for "$out" "^k8: count=$((c1 + 10))\$" 120 "$pid"; then
			ck_err="restore $run: the counter stopped after $c1"; vmm_threads "$pid"
		fi
	fi
	if [ -z "$ck_err" ]; then
		echo 'echo 3 >/proc/sys/vm/drop_caches; echo "k8: disk=$(dd if=/dev/vda bs=512 count=1 2>/dev/null | tr -d "\000")"' >&8
		echo 'echo "k8: rng=$(head -c 16 /dev/hwrng | od -An -tx1 | tr -d " \n")"' >&8
		if ! wait_for "$out" '^k8: rng=[0-9a-f]{32}$' 120 "$pid"; then
			ck_err="restore $run: console command or virtio-rng did not answer"; vmm_threads "$pid"
		else
			disk=$(tr -d '\r' <"$out" | sed -n 's/^k8: disk=//p' | head -1)
			[ "$disk" = AAAA-before ] || ck_err="restore $run: disk reads '$disk', want the checkpoint's AAAA-before"
		fi
	fi
	if [ -z "$ck_err" ] && [ -n "$next" ]; then
		ck_req=$(counts "$out" | tail -1)
		ck_ans=$("$bin" vmctl "$d/ctl-r$run" checkpoint "$next" 2>&1) || ck_err="restore $run: checkpoint of the restored VM failed: $ck_ans"
		ck_rep=$(counts "$out" | tail -1)
		echo "  checkpoint of restore $run at count $ck_req..$ck_rep: $ck_ans"
		# Beside the checkpoint it ran from: a layer of what changed since.
		case $ck_ans in *memory=layer*) ;; *) [ -n "$ck_err" ] || ck_err="restore $run: its checkpoint is not a memory layer: $ck_ans" ;; esac
	fi
	echo 'poweroff -f' >&8
	# The VMM exits on the guest's poweroff (the sanitizer build takes a
	# while to end); one that hangs is killed and fails the test.
	for ((i = 0; i < 600; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null
	wait "$pid"
	rc=$?
	exec 8>&-
	[ -z "$ck_err" ] && [ "$rc" -ne 0 ] && ck_err="restore $run: exit status $rc after poweroff, want 0"
	[ -z "$ck_err" ]
}

# A counting guest with 2 vCPUs (one kept busy) and a disk is checkpointed
# while it runs and goes on, writing over the disk; a second checkpoint is
# cut short by kill -9.  The first checkpoint then runs twice, each time
# continuing the count and seeing the disk as it was; the first of those
# runs is checkpointed in turn, and that checkpoint runs as well.
test_checkpoint_restore() {
	local name=$1 bin=$2 d=$WORK/ck pid c_req c_rep ans
	rm -rf "$d" && mkdir -p "$d"
	"$bin" disk create "$d/disk.k8d" --size 64M >/dev/null || { not_ok "$name" "disk create failed"; return; }
	mkfifo "$d/in"
	exec 7<>"$d/in"
	ck_fail() { vmm_threads "$pid"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; exec 7>&-; cp "$d/out" "$WORK/out"; not_ok "$name" "$1"; }
	# A boot that stalls fails here and run-all's once_more runs the whole
	# test again, logging this attempt's VMM threads and console.
	"$bin" vm --no-emulate --kernel "$KERNEL" --initrd "$INITRD" --cmdline k8.test=counter --cpus 2 \
		--disk "$d/disk.k8d" --control "$d/ctl" <"$d/in" >"$d/out" 2>&1 &
	pid=$!
	wait_for "$d/out" '^k8: count=20$' "$BOOT_TIMEOUT" "$pid" || { ck_fail "the guest did not count to 20"; return; }
	echo '(while :; do :; done) & printf AAAA-before | dd of=/dev/vda bs=512 conv=sync,fsync 2>/dev/null; echo k8: wrote=before' >&7
	wait_for "$d/out" '^k8: wrote=before$' 60 "$pid" || { ck_fail "the guest did not write the disk"; return; }
	c_req=$(counts "$d/out" | tail -1)
	ans=$("$bin" vmctl "$d/ctl" checkpoint "$d/cp1" 2>&1) || { ck_fail "checkpoint failed: $ans"; return; }
	c_rep=$(counts "$d/out" | tail -1)
	echo "  checkpoint at count $c_req..$c_rep: $ans"
	[ -s "$d/cp1/state" ] && [ -f "$d/cp1/memory" ] || { ck_fail "no state or memory file in the checkpoint"; return; }
	echo 'printf BBBB-after | dd of=/dev/vda bs=512 conv=sync,fsync 2>/dev/null; echo k8: wrote=after' >&7
	wait_for "$d/out" '^k8: wrote=after$' 60 "$pid" || { ck_fail "the guest stopped after the checkpoint"; return; }
	wait_for "$d/out" "^k8: count=$((c_rep + 10))\$" 60 "$pid" || { ck_fail "the counter stopped after the checkpoint"; return; }
	"$bin" vmctl "$d/ctl" checkpoint "$d/cp-killed" >/dev/null 2>&1 &
	sleep 0.3
	kill -9 "$pid"
	wait "$pid" 2>/dev/null
	wait
	exec 7>&-
	if [ -e "$d/cp-killed" ] && [ ! -s "$d/cp-killed/state" ]; then
		not_ok "$name" "a checkpoint killed half-way left an incomplete $d/cp-killed"
		return
	fi
	restore_once "$bin" "$d" "$d/cp1" 1 "$c_req" "$c_rep" "$d/cp2" &&
		restore_once "$bin" "$d" "$d/cp1" 2 "$c_req" "$c_rep" &&
		restore_once "$bin" "$d" "$d/cp2" 3 "$ck_req" "$ck_rep"
	if [ -n "$ck_err" ]; then
		cp "$ck_out" "$WORK/out" 2>/dev/null
		not_ok "$name" "$ck_err"
		return
	fi
	ok "$name"
}

# Damaged checkpoints are refused with one clear line.
test_checkpoint_bad() {
	local p=$1 bin=$2 d=$WORK/ck
	if [ ! -s "$d/cp1/state" ]; then
		not_ok "$p-checkpoint-refused" "no checkpoint to damage (the restore test failed)"
		return
	fi
	rm -rf "$d/bad" && cp -r --sparse=always "$d/cp1" "$d/bad"
	printf '\377' | dd of="$d/bad/state" bs=1 seek=300 conv=notrunc 2>/dev/null
	expect_error "$p-checkpoint-corrupt-refused" "checksum mismatch" "$bin" --no-emulate --restore "$d/bad" --disk "$d/rb.k8d"
	cp "$d/cp1/state" "$d/bad/state" && truncate -s 2000 "$d/bad/state"
	expect_error "$p-checkpoint-truncated-refused" "truncated" "$bin" --no-emulate --restore "$d/bad" --disk "$d/rb.k8d"
	cp "$d/cp1/state" "$d/bad/state" && printf '\007' | dd of="$d/bad/state" bs=1 seek=8 conv=notrunc 2>/dev/null
	expect_error "$p-checkpoint-version-refused" "format version 7" "$bin" --no-emulate --restore "$d/bad" --disk "$d/rb.k8d"
	expect_error "$p-checkpoint-needs-disk" "give --disk" "$bin" --no-emulate --restore "$d/cp1"
	# A layer without the checkpoint under it (cp2 stands on cp1).
	rm -rf "$d/alone" && mkdir -p "$d/alone" && cp -r --sparse=always "$d/cp2" "$d/alone/cp2"
	expect_error "$p-checkpoint-layer-without-parent-refused" "is gone" "$bin" --no-emulate --restore "$d/alone/cp2" --disk "$d/rb.k8d"
	expect_error "$p-checkpoint-missing" "not a checkpoint" "$bin" --no-emulate --restore "$d/nothing-here"
}
