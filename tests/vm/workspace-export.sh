# kosa8 diff / export (sourced by tests/vm/run-all; uses its sb, ok, not_ok
# and $WORK).  Changes an agent makes under /workspace come back as a patch
# that says everything: a text edit, a deleted file, a mode change, a new
# binary file, a new symbolic link, a new folder, CRLF line ends kept even
# when the guest adds a .gitattributes asking git to convert them.  The
# patch applied to a copy of the original gives exactly the guest's tree
# (export --to); the host workspace changes only with --apply (refused
# without --yes off a terminal); --to refuses a folder inside the
# workspace; every export is in the audit log, which still verifies.

test_workspace_export() {
	local name=sandbox-diff-export-apply
	rm -rf "$WORK/ws" "$WORK/orig" "$WORK/exp" "$WORK/applied" "$WORK/patch" "$WORK/patch2"
	mkdir -p "$WORK/ws/sub"
	printf 'line1\nline2\n' >"$WORK/ws/edit.txt"
	echo gone >"$WORK/ws/sub/gone.txt"
	echo stays >"$WORK/ws/sub/stays.txt" # git tracks no empty folders
	echo 'echo hi' >"$WORK/ws/run.sh"
	echo keep >"$WORK/ws/keep.txt"
	cp -a "$WORK/ws" "$WORK/orig"
	sb create --name dx --workspace "$WORK/ws" >"$WORK/out" 2>&1 || { not_ok "$name" "create failed"; return; }
	sb start dx >>"$WORK/out" 2>&1 || { not_ok "$name" "start failed"; sb rm -f dx; return; }
	sb exec dx -- sh -c 'cd /workspace && printf "line1\nchanged\n" >edit.txt && rm sub/gone.txt &&
		chmod +x run.sh && head -c 3000 /dev/urandom >blob.bin && ln -s keep.txt link &&
		mkdir new && echo n >new/file.txt && printf "a\r\nb\r\n" >crlf.txt &&
		printf "* text eol=lf\n" >.gitattributes' >>"$WORK/out" 2>&1 ||
		{ not_ok "$name" "exec failed"; sb rm -f dx; return; }

	sb diff dx >"$WORK/patch" 2>>"$WORK/out" || { not_ok "$name" "diff failed"; sb rm -f dx; return; }
	local want
	for want in '^+changed$' '^deleted file mode 100644' '^new mode 100755' 'GIT binary patch' \
		'^new file mode 120000' '^diff --git a/new/file.txt b/new/file.txt'; do
		grep -q -- "$want" "$WORK/patch" || { not_ok "$name" "the patch lacks '$want'"; sb rm -f dx; return; }
	done
	diff -r "$WORK/orig" "$WORK/ws" >>"$WORK/out" 2>&1 || { not_ok "$name" "diff changed the workspace"; sb rm -f dx; return; }

	sb export dx --to "$WORK/exp" >>"$WORK/out" 2>&1 || { not_ok "$name" "export --to failed"; sb rm -f dx; return; }
	cp -a "$WORK/orig" "$WORK/applied"
	(cd "$WORK/applied" && git apply "$WORK/patch") >>"$WORK/out" 2>&1 ||
		{ not_ok "$name" "the patch does not apply to the original"; sb rm -f dx; return; }
	diff -r --no-dereference "$WORK/applied" "$WORK/exp" >>"$WORK/out" 2>&1 && [ -x "$WORK/exp/run.sh" ] &&
		[ "$(readlink "$WORK/exp/link")" = keep.txt ] ||
		{ not_ok "$name" "original + patch differs from the exported tree"; sb rm -f dx; return; }

	sb export dx --patch "$WORK/patch2" >>"$WORK/out" 2>&1 && cmp -s "$WORK/patch" "$WORK/patch2" ||
		{ not_ok "$name" "export --patch differs from diff"; sb rm -f dx; return; }
	sb export dx --patch "$WORK/patch2" >>"$WORK/out" 2>&1 &&
		{ not_ok "$name" "export --patch overwrote a file"; sb rm -f dx; return; }
	sb export dx --to "$WORK/ws/inside" >>"$WORK/out" 2>&1 || [ -e "$WORK/ws/inside" ] &&
		{ not_ok "$name" "export --to wrote inside the workspace"; sb rm -f dx; return; }
	sb export dx --apply >>"$WORK/out" 2>&1 || ! diff -r "$WORK/orig" "$WORK/ws" >/dev/null &&
		{ not_ok "$name" "--apply without --yes changed the workspace"; sb rm -f dx; return; }

	sb export dx --apply --yes >>"$WORK/out" 2>&1 || { not_ok "$name" "export --apply --yes failed"; sb rm -f dx; return; }
	diff -r --no-dereference "$WORK/ws" "$WORK/exp" >>"$WORK/out" 2>&1 && [ -x "$WORK/ws/run.sh" ] &&
		[ ! -e "$WORK/ws/sub/gone.txt" ] ||
		{ not_ok "$name" "the workspace after --apply differs from the guest's"; sb rm -f dx; return; }
	[ -z "$(sb diff dx 2>>"$WORK/out")" ] || { not_ok "$name" "diff after --apply is not empty"; sb rm -f dx; return; }

	sb audit show --sandbox dx --type workspace.export --json >"$WORK/audit" 2>>"$WORK/out"
	if [ "$(grep -c '"workspace.export"' "$WORK/audit")" -ne 3 ] ||
		! grep -q '"how":"apply"' "$WORK/audit" || ! sb audit verify >>"$WORK/out" 2>&1; then
		cat "$WORK/audit" >>"$WORK/out"
		not_ok "$name" "want 3 workspace.export records (to, patch, apply) in a log that verifies"
		sb rm -f dx
		return
	fi
	sb rm -f dx >>"$WORK/out" 2>&1
	ok "$name"
}

# Errors a user can cause: each a clear line, non-zero exit.
test_workspace_export_errors() {
	expect_cli_error sandbox-diff-error-gone "no sandbox" diff gone
	expect_cli_error sandbox-export-error-no-mode "usage" export gone
	sb create --name nows >/dev/null 2>&1
	expect_cli_error sandbox-diff-error-no-workspace "without --workspace" diff nows
	sb rm -f nows >/dev/null 2>&1
}
