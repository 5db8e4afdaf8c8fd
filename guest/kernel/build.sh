#!/usr/bin/env bash
# Builds the kosa8 guest kernel from Debian's linux-source-6.1: `make
# tinyconfig`, then config.fragment (and for arm64 arm64.fragment) merged over
# it, then olddefconfig.  The build fails if olddefconfig dropped or changed any
# option the fragments ask for, naming each one (Kconfig drops an option
# silently when one of its dependencies is missing); where the fragments
# disagree the later one wins, for the check as for merge_config.
#
#   guest/kernel/build.sh [--arch A]          build if needed; last stdout line is the path
#   guest/kernel/build.sh [--arch A] --path   print the path of the cached kernel, or fail
#
# A is x86_64 (the default: bzImage) or arm64 (an uncompressed Image, built
# with Debian's aarch64-linux-gnu- cross compiler).
# Result: <cache>/kernel/<key>/{bzImage|Image,config,System.map}, where <cache>
# is ${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8} and <key> hashes
# this script, the fragments, patches/*.patch, the architecture and the
# linux-source package version.  The unpacked source and the object trees stay
# in <cache>/kernel/work-<version>/ (obj/ for x86_64, obj-arm64/) so that a
# change to a fragment rebuilds only what it touches (about 1.5 GB on disk per
# architecture; delete the folder to reclaim it).  The patches are applied to
# that shared source only for the length of a build, under the cache's lock,
# and taken out again after it: a build of another key (another worktree, an
# older build.sh) always starts from Debian's source.  Progress goes to stderr.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
fragment=$here/config.fragment
arch=x86_64
patches=$(find "$here/patches" -name '*.patch' 2>/dev/null | LC_ALL=C sort)
tarball=/usr/src/linux-source-6.1.tar.xz
pkg=linux-source-6.1
cache=${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8}
kdir=$cache/kernel

say() { echo "[kernel] $*" >&2; }
die() { echo "[kernel] error: $*" >&2; exit 1; }

source_version() {
	local v
	v=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) || v=
	[ -n "$v" ] || die "package $pkg is not installed (run: make deps)"
	[ -r "$tarball" ] || die "$tarball is missing (reinstall $pkg: make deps)"
	echo "$v"
}

mode=build
while [ $# -gt 0 ]; do
	case $1 in
	--path) mode=path ;;
	--arch) [ $# -ge 2 ] || die "usage: $0 [--arch x86_64|arm64] [--path]"; arch=$2; shift ;;
	*) die "usage: $0 [--arch x86_64|arm64] [--path]" ;;
	esac
	shift
done
# Per architecture: make's ARCH, the compiler prefix, the target, the
# fragments in merge order, the object folder.
case $arch in
x86_64) karch=x86 cross= target=bzImage fragments=("$fragment") objname=obj ;;
arm64) karch=arm64 cross=aarch64-linux-gnu- target=Image fragments=("$fragment" "$here/arm64.fragment") objname=obj-arm64 ;;
*) die "unknown architecture '$arch' (x86_64 or arm64)" ;;
esac

version=$(source_version)
# shellcheck disable=SC2086 # one path a line, none with spaces
key=$({ echo "$pkg $version $arch"; cat "${fragments[@]}" "$0" $patches; } | sha256sum | cut -c1-16)
out=$kdir/$key

if [ "$mode" = path ]; then
	[ -f "$out/$target" ] || die "not built yet for $arch, key $key (run: guest/kernel/build.sh --arch $arch)"
	echo "$out/$target"
	exit 0
fi

if [ -f "$out/$target" ]; then
	echo "$out/$target"
	exit 0
fi

check_tools() {
	local t missing=
	for t in make gcc ld "${cross}gcc" "${cross}ld" flex bison bc perl lz4 xz tar flock sha256sum patch; do
		command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
	done
	[ -f /usr/include/gelf.h ] || missing="$missing libelf-dev(gelf.h)"
	[ -z "$missing" ] || die "missing build tools:$missing (run: make deps)"
}

# Unpacks the source once per package version, atomically: a half-unpacked
# tree from an interrupted run is never mistaken for a complete one.
unpack_source() {
	local work=$1 tmp
	[ -f "$work/.unpacked" ] && return 0
	say "unpacking $tarball (about 10 s)"
	rm -rf "$work"
	tmp=$(mktemp -d "$kdir/unpack.XXXXXX")
	tar -xf "$tarball" -C "$tmp"
	mkdir -p "$work"
	mv "$tmp/linux-source-6.1" "$work/src"
	rmdir "$tmp"
	touch "$work/.unpacked"
}

# The option lines of the fragments, the last one for each symbol (the one
# merge_config.sh keeps), in the order they first appear.
wanted_options() {
	awk '/^CONFIG_[A-Za-z0-9_]+=/ { s = $0; sub(/=.*/, "", s) }
	     /^# CONFIG_[A-Za-z0-9_]+ is not set$/ { s = $2 }
	     /^CONFIG_|^# CONFIG_.* is not set$/ { if (!(s in v)) o[n++] = s; v[s] = $0 }
	     END { for (i = 0; i < n; i++) print v[o[i]] }' "$@"
}

# Every CONFIG_X=v line and "# CONFIG_X is not set" line the fragments want
# must be in the final .config exactly; prints each one that is not.
check_config() {
	local config=$1 line sym bad=0
	while IFS= read -r line; do
		case "$line" in
		CONFIG_*=*)
			grep -qxF -- "$line" "$config" && continue
			sym=${line%%=*}
			say "  wanted $line, got: $(grep -E "^(# )?$sym[= ]" "$config" || echo "(absent: unknown symbol?)")"
			bad=$((bad + 1)) ;;
		"# CONFIG_"*" is not set")
			sym=${line#\# }
			sym=${sym%% *}
			grep -qE "^$sym=" "$config" || continue
			say "  wanted $line, got: $(grep -E "^$sym=" "$config")"
			bad=$((bad + 1)) ;;
		esac
	done < <(wanted_options "${fragments[@]}")
	return $bad
}

# make for the chosen architecture.
kmake() { make ARCH="$karch" CROSS_COMPILE="$cross" "$@"; }

configure() {
	local src=$1 obj=$2 bad=0 names
	names=$(for f in "${fragments[@]}"; do basename "$f"; done | paste -sd+)
	say "configuring $arch: tinyconfig + $names + olddefconfig"
	kmake -s -C "$src" O="$obj" tinyconfig >/dev/null
	# merge_config warns about every choice the fragment overrides (compression,
	# allocator...): expected, so its output is shown only if it fails.
	(cd "$src" && ARCH=$karch CROSS_COMPILE=$cross scripts/kconfig/merge_config.sh -m -O "$obj" "$obj/.config" "${fragments[@]}") \
		>"$obj/merge.log" 2>&1 || { cat "$obj/merge.log" >&2; die "merge_config.sh failed"; }
	kmake -s -C "$src" O="$obj" olddefconfig >>"$obj/merge.log" 2>&1 ||
		{ cat "$obj/merge.log" >&2; die "make olddefconfig failed"; }
	check_config "$obj/.config" || bad=$?
	[ "$bad" -eq 0 ] || die "olddefconfig dropped or changed $bad option(s) of $names (listed above); fix their dependencies in the fragment"
}

# Objects a build from scratch of this tree's config compiles, as counted
# by full builds of it (x86_64 2026-12-07 in CI; arm64 in docs/arm64-guest.md):
# a first build's progress line has a total to go against before the cache
# has one of its own.  Only a hint: a changed fragment moves it a little.
full_objects() {
	case $arch in
	x86_64) echo 1325 ;;
	arm64) echo 938 ;;
	*) echo "?" ;;
	esac
}

# Runs make in the background and prints one line every 30 s with the number
# of objects compiled so far, against the count of the last full build.
run_make() {
	local src=$1 obj=$2 log=$3 total_file=$kdir/objects-total pid n total rc start full=0
	[ "$arch" = x86_64 ] || total_file=$total_file-$arch
	total=$(cat "$total_file" 2>/dev/null || full_objects)
	[ -f "$obj/vmlinux" ] || full=1
	start=$(date +%s)
	say "building $arch $target with make -j$(nproc), log in $log"
	KBUILD_BUILD_USER=kosa8 KBUILD_BUILD_HOST=kosa8 KBUILD_BUILD_TIMESTAMP="kosa8 $version" \
		kmake -C "$src" O="$obj" -j"$(nproc)" "$target" >"$log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		for _ in $(seq 30); do
			sleep 1
			kill -0 "$pid" 2>/dev/null || break
		done
		n=$(grep -c '^  CC ' "$log" || true)
		say "$n objects compiled (a full build has $total), $(($(date +%s) - start)) s"
	done
	rc=0
	wait "$pid" || rc=$?
	if [ "$rc" -ne 0 ]; then
		tail -n 40 "$log" >&2
		die "make $target failed (exit $rc); full log: $log"
	fi
	n=$(grep -c '^  CC ' "$log" || true)
	# Only a build from scratch gives a useful total for the next one.
	[ "$full" -eq 0 ] || echo "$n" >"$total_file"
	say "built in $(($(date +%s) - start)) s"
}

# The patches go in with the source's state recorded in src/.kosa8-patched,
# so that a build killed half-way is undone by the next one.
patch_in() {
	local src=$1 p
	unpatch "$src"
	[ -n "$patches" ] || return 0
	say "applying $(echo "$patches" | wc -l) patch(es) from $here/patches"
	# In reverse order, the order they come out in.
	echo "$patches" | tac | xargs cat >"$src/.kosa8-patched"
	for p in $patches; do
		patch -s -p1 -N -d "$src" <"$p" || die "patch $p does not apply to $pkg $version"
	done
}

unpatch() {
	local src=$1
	[ -f "$src/.kosa8-patched" ] || return 0
	patch -s -R -p1 -d "$src" <"$src/.kosa8-patched" || die "cannot take the patches out of $src (delete $kdir/work-$version)"
	rm -f "$src/.kosa8-patched"
}

build() {
	local work=$kdir/work-$version tmp
	check_tools
	unpack_source "$work"
	local obj=$work/$objname log=$work/build.log
	[ "$arch" = x86_64 ] || log=$work/build-$arch.log
	mkdir -p "$obj"
	patch_in "$work/src"
	trap 'unpatch "$work/src"' EXIT
	configure "$work/src" "$obj"
	run_make "$work/src" "$obj" "$log"
	unpatch "$work/src"
	trap - EXIT
	tmp=$(mktemp -d "$kdir/$key.XXXXXX")
	cp "$obj/arch/$karch/boot/$target" "$tmp/$target"
	cp "$obj/.config" "$tmp/config"
	cp "$obj/System.map" "$tmp/System.map"
	chmod 755 "$tmp"
	mv -T "$tmp" "$out"
	say "$out/$target ($(stat -c %s "$out/$target") bytes)"
}

mkdir -p "$kdir"
# One build at a time per cache: a second caller waits, then finds the result.
exec 9>"$kdir/.lock"
if ! flock -n 9; then
	say "another build holds $kdir/.lock; waiting"
	flock 9
fi
[ -f "$out/$target" ] || build
echo "$out/$target"
