# An image carried as one archive (kosa8 image export, then import into
# another cache under another name) boots a sandbox as the built one does,
# found by its name.  Sourced after tests/vm/lib.sh (sb, ok, not_ok,
# $WORK); KOSA8_KERNEL must be set (the other cache has no kernel).
test_sandbox_imported_image() {
	local name=sandbox-imported-image c=$WORK/import-cache got
	rm -rf "$c" "$WORK"/img.tar.zst*
	sb image export default "$WORK/img.tar.zst" --sha256-file >"$WORK/out" 2>&1 ||
		{ not_ok "$name" "export failed"; return; }
	KOSA8_CACHE_DIR=$c sb image import "$WORK/img.tar.zst" --name imported >>"$WORK/out" 2>&1 ||
		{ not_ok "$name" "import failed"; rm -f "$WORK"/img.tar.zst*; return; }
	rm -f "$WORK"/img.tar.zst*
	got=$(KOSA8_CACHE_DIR=$c sb run --rm --cold --image imported -- id -un 2>>"$WORK/out")
	rm -rf "$c"
	[ "$got" = kosa8 ] || { not_ok "$name" "got '$got' from a sandbox on the imported image, want kosa8"; return; }
	ok "$name"
}
