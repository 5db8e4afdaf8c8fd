#!/bin/sh
# Installs a kosa8 release for this machine (docs/release.md).
#
#   curl -fsSL URL/install.sh | sh                   from where the release is served
#   curl -fsSL URL/install.sh | sh -s -- --prefix DIR
#   sh install.sh [--from URL|DIR] [--prefix DIR]    from a local copy
#
# It fetches SHA256SUMS and its signature, checks the signature against the
# release key below (openssl), fetches the tarball for this machine and
# checks its checksum, then unpacks it as a new release folder and switches
# to it with one rename: a run that fails or is interrupted leaves the
# installed kosa8 as it was, and running it again upgrades in place.
#
# Where: ~/.local (bin/kosa8, lib/kosa8/, share/) for a user, /usr/local
# for root, or --prefix.  Nothing outside that prefix is touched: what to
# add (PATH, the kvm group) is printed at the end.
#
# The release comes from --from, else $KOSA8_RELEASE_URL, else the address
# this copy was published with, else the folder this script is in when it
# holds a SHA256SUMS.
set -eu

RELEASE_URL=${KOSA8_RELEASE_URL:-}

# The public half of the key that signs kosa8 releases (Ed25519).  Its
# private half never leaves the release signer's machine (docs/release.md).
release_pubkey() {
	cat <<'EOF'
-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEApOSzswQ7wPEvPpyuTp5pukWiNOWiUNWjj2qdf02e5gk=
-----END PUBLIC KEY-----
EOF
}

say() { printf 'kosa8 install: %s\n' "$*" >&2; }
die() {
	printf 'kosa8 install: error: %s\n' "$*" >&2
	exit 1
}

usage() {
	sed -n 's/^#   //p' "$0" 2>/dev/null >&2 || echo "usage: sh install.sh [--from URL|DIR] [--prefix DIR]" >&2
	exit 2
}

# The one platform with a release today.
check_platform() {
	os=$(uname -s)
	arch=$(uname -m)
	case "$os/$arch" in
	Linux/x86_64) ;;
	Darwin/*) die "kosa8 for macOS is not there yet (it needs Hypervisor.framework support); only x86_64 Linux has a release" ;;
	Linux/*) die "kosa8 has no release for $arch Linux yet (only x86_64); build it from source where a port exists" ;;
	*) die "kosa8 has no release for $os $arch yet (only x86_64 Linux)" ;;
	esac
}

need() {
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || die "'$t' is needed and not found (Debian/Ubuntu: sudo apt-get install $(pkg_of "$t"))"
	done
}

pkg_of() {
	case $1 in
	sha256sum | mktemp | uname | readlink) echo coreutils ;;
	openssl) echo openssl ;;
	tar) echo tar ;;
	gzip) echo gzip ;;
	*) echo "$1" ;;
	esac
}

# fetch NAME DEST: one file of the release, from a URL or a folder.
fetch() {
	case $src in
	http://* | https://*)
		if command -v curl >/dev/null 2>&1; then
			curl -fsSL --proto '=https,http' -o "$2" "$src/$1" || die "cannot fetch $src/$1"
		elif command -v wget >/dev/null 2>&1; then
			wget -q -O "$2" "$src/$1" || die "cannot fetch $src/$1"
		else
			die "neither curl nor wget is installed (Debian/Ubuntu: sudo apt-get install curl)"
		fi ;;
	*)
		[ -f "$src/$1" ] || die "$src/$1 does not exist"
		cp "$src/$1" "$2" ;;
	esac
}

# SHA256SUMS must carry the release key's signature: everything else is
# trusted through it.
verify_signature() {
	release_pubkey >"$tmp/release.pub"
	if ! openssl pkeyutl -verify -pubin -inkey "$tmp/release.pub" -rawin \
		-in "$tmp/SHA256SUMS" -sigfile "$tmp/SHA256SUMS.sig" >/dev/null 2>&1; then
		die "the signature on SHA256SUMS from $src does not match kosa8's release key: not installing (a tampered or unofficial release)"
	fi
	say "signature of SHA256SUMS: good (kosa8 release key)"
}

# The tarball for this machine, named in the signed SHA256SUMS.
pick_tarball() {
	tarball=$(awk '$2 ~ /^kosa8-[0-9][0-9A-Za-z.+~]*-x86_64-linux\.tar\.gz$/ { print $2 }' "$tmp/SHA256SUMS")
	[ -n "$tarball" ] || die "SHA256SUMS from $src names no x86_64 Linux tarball"
	[ "$(printf '%s\n' "$tarball" | wc -l)" -eq 1 ] || die "SHA256SUMS from $src names more than one x86_64 Linux tarball"
	top=${tarball%.tar.gz}
}

verify_checksum() {
	(cd "$tmp" && awk -v f="$tarball" '$2 == f' SHA256SUMS | sha256sum -c --quiet - >/dev/null 2>&1) ||
		die "$tarball from $src does not match its checksum in SHA256SUMS: not installing"
	say "checksum of $tarball: good"
}

# Unpacks into a new folder under releases/ and checks that its kosa8 runs
# here (its libraries are present) before anything points at it.
unpack() {
	new=$base/releases/$top.$(date +%Y%m%d%H%M%S).$$
	mkdir -p "$new.part"
	tar -xzf "$tmp/$tarball" -C "$new.part" --no-same-owner || die "cannot unpack $tarball"
	[ -x "$new.part/$top/bin/kosa8" ] || die "$tarball has no $top/bin/kosa8"
	[ -x "$new.part/$top/lib/kosa8/kosa8-vmm" ] || die "$tarball has no $top/lib/kosa8/kosa8-vmm (the VMM)"
	mv "$new.part/$top" "$new"
	rmdir "$new.part"
	if ! "$new/bin/kosa8" --version >"$tmp/version" 2>"$tmp/run.err"; then
		missing=$(ldd "$new/bin/kosa8" 2>/dev/null | awk '/not found/ { printf " %s", $1 }')
		rm -rf "$new"
		[ -z "$missing" ] || die "kosa8 needs these libraries, missing here:$missing
  Debian/Ubuntu: sudo apt-get install libc6 libssl3 libcjson1 libseccomp2 zlib1g libmicrohttpd12 libpsl5 libarchive13 libcurl4
  then run this installer again (nothing was changed)"
		die "the new kosa8 does not run here: $(cat "$tmp/run.err")"
	fi
	# Its libraries are a subset of kosa8's: what can fail here is the file.
	if ! "$new/lib/kosa8/kosa8-vmm" --help >/dev/null 2>"$tmp/run.err"; then
		rm -rf "$new"
		die "the new VMM (lib/kosa8/kosa8-vmm) does not run here: $(cat "$tmp/run.err")"
	fi
}

# link TARGET LINK: a symbolic link of ours, never over a file that is not one.
link() {
	if [ -e "$2" ] && [ ! -L "$2" ]; then
		say "warning: $2 exists and is not a link kosa8 made: left alone"
		return 0
	fi
	mkdir -p "$(dirname "$2")"
	ln -sfn "$1" "$2"
}

# One rename switches bin/kosa8, its kernel, agent and pages together:
# everything is reached through lib/kosa8/current.
switch_to() {
	ln -sfn "releases/${new##*/}" "$base/current.new"
	mv -Tf "$base/current.new" "$base/current"
	link ../lib/kosa8/current/bin/kosa8 "$prefix/bin/kosa8"
	for f in "$base"/current/share/man/man1/*.1; do
		link "../../../lib/kosa8/current/share/man/man1/${f##*/}" "$prefix/share/man/man1/${f##*/}"
	done
	# Pages a newer release no longer has.
	for f in "$prefix"/share/man/man1/kosa8*.1; do
		[ -L "$f" ] && [ ! -e "$f" ] && rm -f "$f"
	done
	link ../../../lib/kosa8/current/share/bash-completion/completions/kosa8 \
		"$prefix/share/bash-completion/completions/kosa8"
	link ../../../lib/kosa8/current/share/zsh/vendor-completions/_kosa8 \
		"$prefix/share/zsh/site-functions/_kosa8"
	link ../../../lib/kosa8/current/share/fish/vendor_completions.d/kosa8.fish \
		"$prefix/share/fish/vendor_completions.d/kosa8.fish"
}

# Keeps the release in use and the one before it (to go back by hand).
prune() {
	keep=$(readlink "$base/current")
	keep=${keep##*/}
	prev=${old##*/}
	for d in "$base"/releases/*; do
		[ -d "$d" ] || continue
		case ${d##*/} in "$keep" | "$prev") continue ;; esac
		rm -rf "$d"
	done
}

advise() {
	say "installed $(cat "$tmp/version") in $prefix"
	case ":$PATH:" in
	*":$prefix/bin:"*) ;;
	*) say "add $prefix/bin to your PATH, e.g.: echo 'export PATH=\"$prefix/bin:\$PATH\"' >>~/.profile" ;;
	esac
	if [ ! -e /dev/kvm ]; then
		say "this host has no /dev/kvm: run 'kosa8 doctor' to see what it can do"
	elif [ "$(id -u)" -ne 0 ] && { [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; }; then
		say "you cannot open /dev/kvm yet: sudo usermod -aG $(stat -c %G /dev/kvm) \"\$USER\", then log in again"
	fi
	[ "$prefix" = /usr/local ] || say "zsh completion: add fpath+=($prefix/share/zsh/site-functions) before compinit in ~/.zshrc"
	say "next: kosa8 doctor"
}

main() {
	src=
	prefix=
	while [ $# -gt 0 ]; do
		case $1 in
		--from) [ $# -ge 2 ] || usage; src=$2; shift 2 ;;
		--prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
		-h | --help) usage ;;
		*) say "unknown argument '$1'"; usage ;;
		esac
	done
	check_platform
	[ -n "$src" ] || src=$RELEASE_URL
	if [ -z "$src" ]; then
		# Run from a file (not piped): the release may lie beside it.
		case $0 in */install.sh | install.sh) here=$(dirname "$0") ;; *) here= ;; esac
		if [ -z "$here" ] || [ ! -f "$here/SHA256SUMS" ]; then
			die "where is the release? pass --from URL or --from DIR (or set KOSA8_RELEASE_URL)"
		fi
		src=$here
	fi
	src=${src%/}
	if [ -z "$prefix" ]; then
		if [ "$(id -u)" -eq 0 ]; then prefix=/usr/local; else prefix=${HOME:?HOME is not set}/.local; fi
	fi
	need sha256sum openssl tar gzip mktemp awk
	base=$prefix/lib/kosa8
	mkdir -p "$base/releases"
	mkdir "$base/.installing" 2>/dev/null ||
		die "another kosa8 install is running in $prefix (or one was killed: then remove $base/.installing)"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp" "$base/.installing"; [ -z "${new:-}" ] || rm -rf "$new.part"' EXIT
	trap 'exit 1' INT TERM HUP
	fetch SHA256SUMS "$tmp/SHA256SUMS"
	fetch SHA256SUMS.sig "$tmp/SHA256SUMS.sig"
	verify_signature
	pick_tarball
	fetch "$tarball" "$tmp/$tarball"
	verify_checksum
	old=$(readlink "$base/current" 2>/dev/null || true)
	unpack
	switch_to
	prune
	advise
}

# Nothing runs before the whole script has arrived (curl | sh).
main "$@"
