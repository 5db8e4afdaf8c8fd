#!/usr/bin/env bash
# Builds kosa8's release files from the build tree (docs/release.md):
#
#   packaging/release.sh tree DIR      the installed layout under DIR (bin/, lib/kosa8/, share/)
#   packaging/release.sh deb OUT       OUT/kosa8_VERSION_amd64.deb, checked with lintian
#   packaging/release.sh dist OUT      the tarball, the .deb, install.sh, SHA256SUMS and
#                                      SHA256SUMS.sig in OUT (needs RELEASE_KEY)
#
# What a release holds: the kosa8 binary, the guest kernel (bzImage, from
# guest/kernel/build.sh's cache), the guest agent, the image builder and
# its default recipe, man pages and bash/zsh/fish completions generated from
# the command table.  kosa8 finds its kernel and agent at
# <bin>/../lib/kosa8/ (src/common/util.h), in the tarball as in the package.
#
#   RELEASE_KEY   the Ed25519 private key (PEM) that signs SHA256SUMS
#   RELEASE_URL   where the release will be served: written into the
#                 install.sh that goes with it (curl -fsSL URL/install.sh | sh)
#   REL_DIR       the build folder (build)
set -euo pipefail

cd "$(dirname "$0")/.."
REL_DIR=${REL_DIR:-build}
say() { echo "[release] $*" >&2; }
die() { echo "[release] error: $*" >&2; exit 1; }

version() { sed -n 's/^KOSA8_VERSION := //p' Makefile; }
VERSION=$(version)
ARCH=x86_64-linux
TARNAME=kosa8-$VERSION-$ARCH

# The installed layout under $1 (a prefix: /usr in the package, the
# tarball's top folder in the tarball).  $2 = deb: man pages compressed,
# Debian's paths and documents.
tree() {
	local d=$1 kind=${2:-tar} kernel c
	[ -x "$REL_DIR/kosa8" ] && [ -x "$REL_DIR/kosa8-tools" ] && [ -x "$REL_DIR/kosa8-vmm" ] &&
		[ -x "$REL_DIR/kosa8-agent" ] ||
		die "build first: make"
	kernel=$(guest/kernel/build.sh --path) || die "no guest kernel: make kernel"
	rm -rf "$d"
	install -d "$d/bin" "$d/lib/kosa8/guest/image" "$d/share/man/man1" \
		"$d/share/bash-completion/completions" "$d/share/zsh/vendor-completions" \
		"$d/share/fish/vendor_completions.d" "$d/share/doc/kosa8"
	install -m 0755 "$REL_DIR/kosa8" "$d/bin/kosa8"
	# The VMM, which the supervisor finds at ../lib/kosa8 from bin/kosa8.
	install -m 0755 "$REL_DIR/kosa8-vmm" "$d/lib/kosa8/kosa8-vmm"
	install -m 0755 "$REL_DIR/kosa8-agent" "$d/lib/kosa8/kosa8-agent"
	# The commands that need libcurl, libarchive, libmicrohttpd (src/cli/tools.c).
	install -m 0755 "$REL_DIR/kosa8-tools" "$d/lib/kosa8/kosa8-tools"
	strip --strip-unneeded "$d/bin/kosa8" "$d/lib/kosa8/kosa8-vmm" "$d/lib/kosa8/kosa8-agent" \
		"$d/lib/kosa8/kosa8-tools"
	install -m 0644 "$kernel" "$d/lib/kosa8/bzImage"
	install -m 0755 guest/image/build.sh "$d/lib/kosa8/guest/image/build.sh"
	install -m 0644 guest/image/default.recipe "$d/lib/kosa8/guest/image/default.recipe"
	# The helper machine where KVM cannot run the guest (kosa8 machine).
	install -d "$d/lib/kosa8/testbed"
	install -m 0755 testbed/run testbed/machine testbed/init "$d/lib/kosa8/testbed/"
	"$REL_DIR/kosa8" help --man >"$d/share/man/man1/kosa8.1"
	for c in $("$REL_DIR/kosa8" help --commands); do
		"$REL_DIR/kosa8" help --man "$c" >"$d/share/man/man1/kosa8-$c.1"
	done
	"$REL_DIR/kosa8" completion bash >"$d/share/bash-completion/completions/kosa8"
	"$REL_DIR/kosa8" completion zsh >"$d/share/zsh/vendor-completions/_kosa8"
	"$REL_DIR/kosa8" completion fish >"$d/share/fish/vendor_completions.d/kosa8.fish"
	chmod 0644 "$d"/share/man/man1/* "$d"/share/*/*/kosa8* "$d/share/zsh/vendor-completions/_kosa8"
	if [ "$kind" = deb ]; then
		gzip -9n "$d"/share/man/man1/*.1
		install -m 0644 packaging/deb/copyright "$d/share/doc/kosa8/copyright"
		sed "s/@VERSION@/$VERSION/; s/@DATE@/$(deb_date)/" packaging/deb/changelog |
			gzip -9n >"$d/share/doc/kosa8/changelog.gz"
		chmod 0644 "$d/share/doc/kosa8/changelog.gz"
	else
		install -m 0644 README.md "$d/share/doc/kosa8/README.md"
	fi
}

# The changelog's date: the commit's, so that the same tree gives the same package.
deb_date() {
	date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)"
}

# Depends from the libraries the binaries link, as dpkg-shlibdeps reads
# them off the installed packages (it wants a debian/control to exist).
shlib_depends() {
	local tmp line bin args=()
	for bin; do args+=(-e "$bin"); done
	tmp=$(mktemp -d)
	mkdir "$tmp/debian"
	printf 'Source: kosa8\n\nPackage: kosa8\nArchitecture: amd64\n' >"$tmp/debian/control"
	line=$(cd "$tmp" && dpkg-shlibdeps -O "${args[@]}" 2>/dev/null) || { rm -rf "$tmp"; die "dpkg-shlibdeps failed on $*"; }
	rm -rf "$tmp"
	line=${line#shlibs:Depends=}
	[ -n "$line" ] || die "no library dependencies found for $*"
	echo "$line"
}

deb() {
	local out=$1 tmp root depends size
	command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null || die "dpkg-dev is missing: make deps"
	mkdir -p "$out"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	root=$tmp/kosa8
	tree "$root/usr" deb
	install -d "$root/DEBIAN" "$root/usr/share/lintian/overrides"
	install -m 0644 packaging/deb/lintian-overrides "$root/usr/share/lintian/overrides/kosa8"
	depends=$(shlib_depends "$root/usr/bin/kosa8" "$root/usr/lib/kosa8/kosa8-tools")
	size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
	sed -e "s/@VERSION@/$VERSION/" -e "s/@DEPENDS@/$depends/" -e "s/@SIZE@/$size/" \
		packaging/deb/control >"$root/DEBIAN/control"
	(cd "$root" && find usr -type f -printf '%P\0' | sort -z | xargs -0 -I{} md5sum usr/{}) \
		>"$root/DEBIAN/md5sums"
	chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
		dpkg-deb --root-owner-group -Zxz --build "$root" "$out/kosa8_${VERSION}_amd64.deb" >/dev/null
	say "Depends: $depends"
	if command -v lintian >/dev/null; then
		lintian --fail-on error,warning "$out/kosa8_${VERSION}_amd64.deb" || die "lintian found problems (above)"
		say "lintian: clean"
	else
		die "lintian is missing: make deps"
	fi
	echo "$out/kosa8_${VERSION}_amd64.deb"
}

# The public half of the key in install.sh, between its PEM markers.
installer_pubkey() {
	sed -n '/^-----BEGIN PUBLIC KEY-----$/,/^-----END PUBLIC KEY-----$/p' install.sh
}

dist() {
	local out=$1 tmp
	[ -n "${RELEASE_KEY:-}" ] && [ -r "$RELEASE_KEY" ] || die "RELEASE_KEY=<Ed25519 private key PEM> is needed to sign (docs/release.md)"
	mkdir -p "$out"
	rm -f "$out"/kosa8-*.tar.gz "$out"/kosa8_*.deb "$out"/SHA256SUMS "$out"/SHA256SUMS.sig "$out"/install.sh
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	tree "$tmp/$TARNAME" tar
	# Reproducible: owner, order and times from the commit, not this run.
	tar --sort=name --owner=0 --group=0 --numeric-owner \
		--mtime="@$(git log -1 --format=%ct 2>/dev/null || date +%s)" \
		-C "$tmp" -cf - "$TARNAME" | gzip -9n >"$out/$TARNAME.tar.gz"
	deb "$out" >/dev/null
	sed "s|^RELEASE_URL=.*|RELEASE_URL=\${KOSA8_RELEASE_URL:-${RELEASE_URL:-}}|" install.sh >"$out/install.sh"
	(cd "$out" && sha256sum "$TARNAME.tar.gz" "kosa8_${VERSION}_amd64.deb" install.sh >SHA256SUMS)
	openssl pkeyutl -sign -rawin -inkey "$RELEASE_KEY" -in "$out/SHA256SUMS" -out "$out/SHA256SUMS.sig" ||
		die "signing with $RELEASE_KEY failed (an Ed25519 private key in PEM?)"
	if [ "$(openssl pkey -in "$RELEASE_KEY" -pubout)" != "$(installer_pubkey)" ]; then
		say "warning: $RELEASE_KEY is not the release key in install.sh: installers will refuse this release"
	fi
	say "release $VERSION in $out:"
	(cd "$out" && ls -l)
}

case ${1:-} in
tree) [ $# -eq 2 ] || die "usage: $0 tree DIR"; tree "$2" tar ;;
deb) [ $# -eq 2 ] || die "usage: $0 deb OUT"; deb "$2" ;;
dist) [ $# -eq 2 ] || die "usage: $0 dist OUT"; dist "$2" ;;
*) sed -n 's/^#   //p' "$0" >&2; exit 2 ;;
esac
