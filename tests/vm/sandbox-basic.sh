# The basic sandbox tests (sourced by tests/vm/run-all and through
# tests/vm/sandbox-groups.sh by tests/machine/sandboxes): run with exit
# status, user and workspace; the whole life of one sandbox; the CLI's
# errors.  Uses tests/vm/lib.sh's sb, ok, not_ok and $WORK.

test_sandbox_run() {
	local name=sandbox-run-exit-status-user-workspace
	rm -rf "$WORK/ws" && mkdir -p "$WORK/ws/sub" && echo hello-workspace >"$WORK/ws/sub/file.txt"
	sb run --rm --workspace "$WORK/ws" -- sh -c 'cat /workspace/sub/file.txt; id -un; pwd; exit 7' \
		>"$WORK/out" 2>&1
	rc=$?
	if [ "$rc" -ne 7 ] || ! grep -q '^hello-workspace' "$WORK/out" || ! grep -q '^kosa8$' "$WORK/out" ||
		! grep -q '^/workspace$' "$WORK/out"; then
		not_ok "$name" "rc=$rc, want 7 with the workspace file, user kosa8, cwd /workspace"
		return
	fi
	if sb ps | grep -q '^sb-'; then not_ok "$name" "--rm left the sandbox behind"; return; fi
	ok "$name"
}

# create, start, exec, cp both ways, stop, start again (the disk persists), rm.
test_sandbox_lifecycle() {
	local name=sandbox-lifecycle-exec-cp-persistence
	rm -rf "$WORK/ws" "$WORK/back" "$WORK/in" && mkdir -p "$WORK/ws" "$WORK/in"
	echo original >"$WORK/ws/a.txt"
	echo pushed >"$WORK/in/pushed.txt"
	sb create --name t1 --workspace "$WORK/ws" >"$WORK/out" 2>&1 || { not_ok "$name" "create failed"; return; }
	sb start t1 >>"$WORK/out" 2>&1 || { not_ok "$name" "start failed"; sb rm -f t1; return; }
	sb exec t1 -- sh -c 'echo made-inside >/workspace/b.txt' >>"$WORK/out" 2>&1 || { not_ok "$name" "exec failed"; sb rm -f t1; return; }
	sb cp "$WORK/in" t1:/workspace/in >>"$WORK/out" 2>&1 || { not_ok "$name" "cp in failed"; sb rm -f t1; return; }
	sb cp t1:/workspace "$WORK/back" >>"$WORK/out" 2>&1 || { not_ok "$name" "cp out failed"; sb rm -f t1; return; }
	if [ "$(cat "$WORK/back/a.txt" "$WORK/back/b.txt" "$WORK/back/in/pushed.txt" 2>/dev/null)" != "$(printf 'original\nmade-inside\npushed')" ]; then
		not_ok "$name" "files copied out differ"; sb rm -f t1; return
	fi
	sb ps | grep -q '^t1 .*running' || { not_ok "$name" "ps does not show t1 running"; sb rm -f t1; return; }
	sb stop t1 >>"$WORK/out" 2>&1 || { not_ok "$name" "stop failed"; sb rm -f t1; return; }
	sb ps | grep -q '^t1 .*stopped' || { not_ok "$name" "ps does not show t1 stopped"; sb rm -f t1; return; }
	sb exec t1 -- true >>"$WORK/out" 2>&1 && { not_ok "$name" "exec on a stopped sandbox succeeded"; sb rm -f t1; return; }
	sb start t1 >>"$WORK/out" 2>&1 || { not_ok "$name" "second start failed"; sb rm -f t1; return; }
	if [ "$(sb exec t1 -- cat /workspace/b.txt 2>>"$WORK/out")" != made-inside ]; then
		not_ok "$name" "a file written before stop is gone after start"; sb rm -f t1; return
	fi
	sb rm t1 >>"$WORK/out" 2>&1 && { not_ok "$name" "rm of a running sandbox succeeded without -f"; sb rm -f t1; return; }
	sb rm -f t1 >>"$WORK/out" 2>&1 || { not_ok "$name" "rm -f failed"; return; }
	sb ps | grep -q '^t1 ' && { not_ok "$name" "t1 still listed after rm"; return; }
	ok "$name"
}

# expect_cli_error NAME WANT kosa8-args...: one clear line, non-zero exit
# (exec and run use 125 for their own failures, as docker does).
expect_cli_error() {
	local name=$1 want=$2
	shift 2
	# A usage error ends with the pointer to --help (cli_usage_error):
	# not counted as a second message.
	sb "$@" 2>&1 | grep -v "^See 'kosa8 .*--help'\.$" >"$WORK/out"
	rc=${PIPESTATUS[0]}
	if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -gt 125 ] || [ "$(wc -l <"$WORK/out")" -ne 1 ] || ! grep -q -- "$want" "$WORK/out"; then
		not_ok "$name" "rc=$rc, want one line containing '$want'"
		return
	fi
	ok "$name"
}

test_sandbox_bad_input() {
	sb create --name dup >/dev/null 2>&1
	expect_cli_error sandbox-error-name-in-use "exists already" create --name dup
	sb rm dup >/dev/null 2>&1
	expect_cli_error sandbox-error-unknown-image "not built or unknown" create --image no-such-image
	expect_cli_error sandbox-error-missing-workspace "not an existing directory" create --workspace /no/such/dir
	expect_cli_error sandbox-error-gone "no sandbox named" start gone
	expect_cli_error sandbox-error-exec-gone "not running" exec gone -- true
	expect_cli_error sandbox-error-bad-name "bad name" create --name 'Bad/Name'
}

