#!/usr/bin/env bash
# Builds a kosa8 root filesystem image (ext4) from a recipe: mmdebstrap
# bootstraps Debian into a directory, kosa8's layer goes on top (the guest
# agent as /sbin/init, the user kosa8, /workspace, hostname, resolv.conf),
# then `mkfs.ext4 -d` turns the directory into a sparse image, with no loop
# mount.  The recipe format is in docs/images.md.
#
#   guest/image/build.sh [--arch A] [--agent PATH] [RECIPE|NAME]          build if needed; last stdout line is the path
#   guest/image/build.sh [--arch A] [--agent PATH] --path [RECIPE|NAME]   print the cached image's path, or fail
#   guest/image/build.sh --check [RECIPE|NAME]                            parse the recipe and print it, build nothing
#   guest/image/build.sh [--arch A] [--agent PATH] --path --inputs [RECIPE|NAME]
#                                    the same as --path, after lines saying what the answer depends
#                                    on ("file PATH", "env NAME"): kosa8 remembers it (src/sandbox/lookup.h)
#
# RECIPE is a file; NAME is looked up as NAME.recipe in
# ${KOSA8_CONFIG_DIR:-${XDG_CONFIG_HOME:-$HOME/.config}/kosa8}/images/, then
# next to this script.  Default: the recipe named "default".
# The agent is --agent PATH, else $KOSA8_AGENT, else build/kosa8-agent of
# this checkout (make build/kosa8-agent).
# A is the guest's architecture: x86_64 (the default) or arm64, whose
# packages mmdebstrap runs through qemu-user-static (binfmt_misc); the agent
# must be built for it (make build/arm64/kosa8-agent).
#
# Result: <cache>/images/<name>/<key>/{rootfs.ext4,manifest.json,recipe},
# <cache> = ${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8}, <key> =
# hash of the recipe, this script, the architecture and the agent binary.
# Images of another architecture than x86_64 go to <cache>/images-<A>/
# instead, out of sight of x86_64 sandboxes.  A built image is the
# read-only base of sandbox disks: it is never rewritten, only built under a
# temporary name and renamed into place.  Run under sudo, the image goes to
# the invoking user's cache and belongs to them.  Progress goes to stderr.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
self=$here/$(basename "$0")
tag="[image]"

say() { echo "$tag $*" >&2; }
die() { echo "$tag error: $*" >&2; exit 1; }

usage() {
	sed -n 's/^#   //p' "$self" >&2
	exit 2
}

# ---------------------------------------------------------------- recipe

NAME_RE='^[a-z0-9][a-z0-9._-]{0,63}$'
PKG_RE='^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$'
VARIANTS="essential apt required minbase buildd important standard"
MAX_RECIPE=65536

r_name= r_suite= r_variant= r_size= r_hostname=
r_size_bytes=0
r_packages=()
r_mirrors=()
r_dpkgopts=()
r_runs=()

recipe_file=
lineno=0

bad() { die "$recipe_file:$lineno: $*"; }

trim() {
	local s=$1
	s=${s#"${s%%[![:space:]]*}"}
	s=${s%"${s##*[![:space:]]}"}
	printf '%s' "$s"
}

# "4G" -> bytes; whole MiB only, 256 MiB .. 1 TiB.
parse_size() {
	local v=$1 n unit mult
	[[ $v =~ ^([0-9]{1,13})([KMGT]?)(i?B)?$ ]] || bad "size '$v': expected a number with K, M, G or T (e.g. 4G)"
	n=$((10#${BASH_REMATCH[1]}))
	unit=${BASH_REMATCH[2]}
	case $unit in
	'') mult=1 ;; K) mult=1024 ;; M) mult=$((1 << 20)) ;; G) mult=$((1 << 30)) ;; T) mult=$((1 << 40)) ;;
	esac
	r_size_bytes=$((n * mult))
	[ $((r_size_bytes % (1 << 20))) -eq 0 ] || bad "size '$v' is not a whole number of MiB"
	[ "$r_size_bytes" -ge $((256 << 20)) ] || bad "size '$v' is below 256M"
	[ "$r_size_bytes" -le $((1 << 40)) ] || bad "size '$v' is above 1T"
}

set_once() {
	local var=$1 key=$2 val=$3
	[ -z "${!var}" ] || bad "'$key' given twice"
	printf -v "$var" '%s' "$val"
}

add_packages() {
	local p
	for p in ${1//,/ }; do
		[[ $p =~ $PKG_RE ]] || bad "'$p' is not a Debian package name (NAME, NAME:ARCH or NAME=VERSION)"
		r_packages+=("$p")
	done
}

parse_line() {
	local line=$1 key val
	line=${line%$'\r'}
	line=$(trim "$line")
	case $line in '' | '#'*) return 0 ;; esac
	[[ $line == *=* ]] || bad "expected 'key = value', got '$line'"
	key=$(trim "${line%%=*}")
	val=$(trim "${line#*=}")
	[ -n "$val" ] || bad "'$key' has an empty value"
	case $key in
	name)
		[[ $val =~ $NAME_RE ]] || bad "name '$val': use a-z, 0-9, '.', '_', '-' (up to 64, starting with a letter or digit)"
		set_once r_name name "$val" ;;
	suite)
		[[ $val =~ ^[a-z][a-z0-9.-]{0,31}$ ]] || bad "suite '$val' is not a Debian suite name (e.g. bookworm)"
		set_once r_suite suite "$val" ;;
	variant)
		[[ " $VARIANTS " == *" $val "* ]] || bad "variant '$val': use one of $VARIANTS"
		set_once r_variant variant "$val" ;;
	size)
		set_once r_size size "$val"
		parse_size "$val" ;;
	hostname)
		[[ $val =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] || bad "hostname '$val' is not a host name label"
		set_once r_hostname hostname "$val" ;;
	packages) add_packages "$val" ;;
	mirror)
		[[ $val =~ ^(https?|file)://[^[:space:]\"\']+$ ]] || bad "mirror '$val': expected an http://, https:// or file:// URL"
		r_mirrors+=("$val") ;;
	path-exclude | path-include)
		[[ $val =~ ^/[^[:space:]]*$ ]] || bad "$key '$val': expected an absolute path or glob without spaces"
		r_dpkgopts+=("$key=$val") ;;
	run) r_runs+=("$val") ;;
	*) bad "unknown key '$key' (known: name suite variant size hostname packages mirror path-exclude path-include run)" ;;
	esac
}

parse_recipe() {
	local line size
	recipe_file=$1
	[ -r "$recipe_file" ] || die "$recipe_file: cannot read"
	size=$(stat -c %s "$recipe_file")
	[ "$size" -le $MAX_RECIPE ] || die "$recipe_file: over $MAX_RECIPE bytes, not a recipe"
	[ "$(LC_ALL=C tr -d '\000' <"$recipe_file" | wc -c)" -eq "$size" ] || die "$recipe_file: contains NUL bytes, not a text recipe"
	while IFS= read -r line || [ -n "$line" ]; do
		lineno=$((lineno + 1))
		[ ${#line} -le 4096 ] || bad "line longer than 4096 characters"
		parse_line "$line"
	done <"$recipe_file"
	lineno=0
	[ -n "$r_name" ] || bad "no 'name = ...' line"
	r_suite=${r_suite:-bookworm}
	r_variant=${r_variant:-minbase}
	r_hostname=${r_hostname:-kosa8}
	if [ -z "$r_size" ]; then
		r_size=4G
		r_size_bytes=$((4 << 30))
	fi
	# What kosa8's layer relies on, whatever the recipe lists: the user's
	# shell, useradd, and netfilter for the agent's transparent proxy.
	r_packages+=(bash passwd iptables)
}

print_recipe() {
	local p
	echo "name=$r_name"
	echo "suite=$r_suite"
	echo "variant=$r_variant"
	echo "size=$r_size_bytes"
	echo "hostname=$r_hostname"
	echo "packages=${r_packages[*]}"
	for p in "${r_mirrors[@]}"; do echo "mirror=$p"; done
	for p in "${r_dpkgopts[@]}"; do echo "dpkgopt=$p"; done
	for p in "${r_runs[@]}"; do echo "run=$p"; done
}

config_dir() { echo "${KOSA8_CONFIG_DIR:-${XDG_CONFIG_HOME:-$HOME/.config}/kosa8}"; }

# Under sudo, the invoking user's recipes too.
sudo_user_config() {
	[ "$(id -u)" -eq 0 ] && [ -n "${SUDO_UID:-}" ] && [ "$SUDO_UID" != 0 ] || return 0
	local home
	home=$(getent passwd "$SUDO_UID" | cut -d: -f6)
	[ -z "$home" ] || echo "$home/.config/kosa8/images"
}

find_recipe() {
	local arg=$1 d
	if [ -f "$arg" ]; then
		echo "$arg"
		return
	fi
	if [[ $arg =~ $NAME_RE ]]; then
		for d in "$(config_dir)/images" "$(sudo_user_config)" "$here"; do
			[ -n "$d" ] || continue
			[ -f "$d/$arg.recipe" ] && { echo "$d/$arg.recipe"; return; }
		done
	fi
	local known
	known=$(cd "$here" && ls ./*.recipe 2>/dev/null | sed 's|^\./||; s|\.recipe$||' | paste -sd, -)
	die "unknown recipe '$arg': no such file, and no $arg.recipe in $(config_dir)/images/ or $here/ (shipped: ${known:-none})"
}

# ---------------------------------------------------------------- agent

find_agent() {
	local a=$1
	[ -n "$a" ] || a=${KOSA8_AGENT:-}
	[ -n "$a" ] || a=$(cd "$here/../.." && pwd)/build/kosa8-agent
	if [ ! -f "$a" ]; then
		die "guest agent $a not found: run 'make build/kosa8-agent' first (or give --agent PATH / KOSA8_AGENT)"
	fi
	[ "$(head -c 4 "$a" | od -An -c | tr -d ' ')" = '177ELF' ] || die "guest agent $a is not an ELF binary"
	# It runs as PID 1 before anything is set up: it must be static.
	if command -v readelf >/dev/null 2>&1 && readelf -lW "$a" 2>/dev/null | grep -q 'program interpreter'; then
		die "guest agent $a is dynamically linked; the guest's init must be a static binary"
	fi
	# The agent must run on the guest: the ELF machine field (offset 18).
	local machine
	machine=$(od -An -tu2 -j18 -N2 "$a" | tr -d ' ')
	[ "$machine" = "$elf_machine" ] ||
		die "guest agent $a is not an $arch binary (ELF machine $machine, want $elf_machine)"
	agent=$(cd "$(dirname "$a")" && pwd)/$(basename "$a")
}

# Sets deb_arch and elf_machine for $arch.
set_arch() {
	case $arch in
	x86_64) deb_arch=amd64 elf_machine=62 ;;
	arm64) deb_arch=arm64 elf_machine=183 ;;
	*) die "unknown architecture '$arch' (x86_64 or arm64)" ;;
	esac
}

# A foreign architecture's maintainer scripts and the customize hook's
# chroot commands run through qemu-user, registered with binfmt_misc.
check_foreign() {
	[ "$deb_arch" != "$(dpkg --print-architecture)" ] || return 0
	local qemu=qemu-${arch/arm64/aarch64} f=/proc/sys/fs/binfmt_misc/qemu-${arch/arm64/aarch64}
	command -v "$qemu-static" >/dev/null 2>&1 || [ -x "/usr/libexec/qemu-binfmt/${arch/arm64/aarch64}-binfmt-P" ] ||
		die "building an $arch image needs qemu-user-static (run: make deps)"
	[ -r "$f" ] && [ "$(head -n1 "$f")" = enabled ] ||
		die "$f is not registered: mount binfmt_misc (mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc) and run 'update-binfmts --enable $qemu' (binfmt-support)"
}

# ---------------------------------------------------------------- cache

# Under sudo, build for the user who asked: their cache, their files.
# Sets cache (and owner, under sudo).
owner=
set_cache_dir() {
	cache=${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8}
	if [ -z "${KOSA8_CACHE_DIR:-}" ] && [ "$(id -u)" -eq 0 ] && [ -n "${SUDO_UID:-}" ] && [ "${SUDO_UID}" != 0 ]; then
		local home
		home=$(getent passwd "$SUDO_UID" | cut -d: -f6)
		if [ -n "$home" ] && [ -d "$home" ]; then
			owner="$SUDO_UID:${SUDO_GID:-$SUDO_UID}"
			cache=$home/.cache/kosa8
		fi
	fi
}

# mkdir -p, giving every folder it creates to $owner.
mkdir_owned() {
	local d=$1
	[ -d "$d" ] && return 0
	mkdir_owned "$(dirname "$d")"
	mkdir "$d"
	[ -z "$owner" ] || chown "$owner" "$d"
}

# ---------------------------------------------------------------- build

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
mib() { echo $((($1 + (1 << 20) - 1) >> 20)); }

check_tools() {
	local t missing=
	for t in mmdebstrap mkfs.ext4 e2fsck chroot dpkg-query flock sha256sum truncate du df awk od; do
		command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
	done
	[ -z "$missing" ] || die "missing tools:$missing (run: make deps)"
	# mkfs.ext4 -d (populate from a directory) came with e2fsprogs 1.43.
	local help
	help=$(mkfs.ext4 2>&1 || true)
	[[ $help == *"-d "* ]] || die "this mkfs.ext4 has no -d option (need e2fsprogs >= 1.43)"
}

check_root() {
	[ "$(id -u)" -eq 0 ] && return 0
	die "building an image needs root: mmdebstrap creates files owned by root and other users, and its rootless (user namespace) mode is not supported here yet; run 'sudo kosa8 image build ...' (the image still goes to your cache)"
}

# The tree, the downloaded packages and the image side by side.
NEED_MIB=3072
check_space() {
	local dir=$1 avail
	avail=$(df -P -k "$dir" | awk 'NR == 2 { print int($4 / 1024) }')
	[ "$avail" -ge "$NEED_MIB" ] || die "no space: $dir has $avail MiB free, a build needs about $NEED_MIB MiB (tree, packages, image)"
}

# Fails with a clear line when a step died for want of space.
space_hint() {
	local avail
	avail=$(df -P -k "$imgroot" | awk 'NR == 2 { print int($4 / 1024) }')
	[ "$avail" -ge 64 ] || die "no space left in $imgroot ($avail MiB free) during $1"
}

write_kosa8_hook() {
	local hook=$1 q_host q_runs='' r
	printf -v q_host '%q' "$r_hostname"
	for r in "${r_runs[@]}"; do
		printf -v r '%q' "$r"
		q_runs+="echo \"$tag   run: \"$r >&2"$'\n'"chroot \"\$root\" /bin/sh -ec $r"$'\n'
	done
	cat >"$hook" <<-EOF
	#!/bin/bash
	# Generated by guest/image/build.sh: kosa8's layer (but the agent, which
	# goes in later), then the recipe's 'run' commands.  mmdebstrap runs it
	# as a customize hook, \$1 = the tree.
	set -euo pipefail
	root=\$1
	chroot "\$root" useradd --uid 1000 --user-group --create-home \\
		--home-dir /home/kosa8 --shell /bin/bash --comment "kosa8 sandbox user" kosa8
	install -d -o 1000 -g 1000 -m 0755 "\$root/workspace"
	echo $q_host >"\$root/etc/hostname"
	printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' $q_host >"\$root/etc/hosts"
	rm -f "\$root/etc/resolv.conf"
	cat >"\$root/etc/resolv.conf" <<-'RESOLV'
	# kosa8: the guest has no network device.  kosa8-agent answers DNS on this
	# address and passes each query to the host over vsock, where the sandbox's
	# policy decides; no query ever goes to a real resolver from here.
	nameserver 127.0.0.53
	options edns0
	RESOLV
	$q_runs
	EOF
	chmod 0755 "$hook"
}

# The recipe's path-exclude/path-include go into dpkg's configuration once
# the essential packages are in: mmdebstrap would otherwise push every file
# of those through a Python filter while extracting them (minutes here).
# dpkg then applies them itself to every later package, in the sandbox too;
# the essential set's own few MiB of documentation stay.
write_filter_hook() {
	local hook=$1 f
	[ ${#r_dpkgopts[@]} -gt 0 ] || return 0
	{
		echo '#!/bin/sh'
		echo 'set -e'
		echo 'cat >"$1/etc/dpkg/dpkg.cfg.d/90kosa8-paths" <<'"'EOF'"
		echo '# From the kosa8 image recipe: files dpkg leaves out.'
		for f in "${r_dpkgopts[@]}"; do echo "$f"; done
		echo 'EOF'
	} >"$hook"
	chmod 0755 "$hook"
}

# The essential packages went in before dpkg had the filters: remove what
# the filters would have left out, with dpkg's rule (fnmatch on the path,
# '*' crosses '/', the last matching rule wins).  Files and links only.
apply_path_filters() {
	local root=$1 n
	[ ${#r_dpkgopts[@]} -gt 0 ] || return 0
	n=$(cd "$root" && find . -xdev \( -type f -o -type l \) -printf '/%P\n' |
		awk -v rules="$(printf '%s\n' "${r_dpkgopts[@]}")" '
		function re(g,   i, c, r, inb) {
			r = "^"
			for (i = 1; i <= length(g); i++) {
				c = substr(g, i, 1)
				if (inb) { r = r c; if (c == "]") inb = 0; continue }
				if (c == "*") r = r ".*"
				else if (c == "?") r = r "."
				else if (c == "[") { inb = 1; r = r "["; if (substr(g, i + 1, 1) == "!") { r = r "^"; i++ } }
				else if (index("\\.^$+(){}|", c)) r = r "\\" c
				else r = r c
			}
			return r "$"
		}
		BEGIN {
			n = split(rules, R, "\n")
			for (i = 1; i <= n; i++) {
				ex[i] = (substr(R[i], 1, 13) == "path-exclude=")
				rx[i] = re(substr(R[i], 14))
			}
		}
		{
			drop = 0
			for (i = 1; i <= n; i++) if ($0 ~ rx[i]) drop = ex[i]
			if (drop) print "." $0
		}' | (cd "$root" && xargs -r -d '\n' rm -f -- && echo ok))
	[ "$n" = ok ] || die "could not apply the recipe's path filters to the tree"
}

EATMYDATA_HOOKS=/usr/share/mmdebstrap/hooks/eatmydata

# Downloaded packages are kept in <cache>/images/.debs between builds (apt
# fetches only what changed); mmdebstrap's sync hooks take a path without
# spaces, so a cache path with spaces simply goes without.
deb_cache_hooks() {
	local d=$imgroot/.debs
	[[ $d =~ ^[^[:space:]\'\"]+$ ]] || return 0
	mkdir_owned "$d"
	echo "--skip=essential/unlink"
	echo "--setup-hook=mkdir -p \"\$1\"/var/cache/apt/archives/"
	echo "--setup-hook=sync-in $d /var/cache/apt/archives/"
	echo "--customize-hook=sync-out /var/cache/apt/archives $d"
}

# mmdebstrap's own I:/W:/E: lines, and every 20 s while packages install a
# count of those set up so far (apt's own output, --verbose, is in the log).
show_progress() {
	local log=$1 line total=? unpacked=0 done=0 last=$SECONDS
	while IFS= read -r line; do
		printf '%(%T)T %s\n' -1 "$line" >>"$log"
		case $line in
		# apt's notice that _apt cannot reach a root-only folder: harmless
		# (root downloads instead), and it would be most of the screen.
		"W: Download is performed unsandboxed"*) ;;
		I:* | W:* | E:* | "$tag"*) echo "$tag   ${line#"$tag   "}" >&2 ;;
		*" newly installed, "*)
			[[ $line =~ ([0-9]+)\ newly\ installed ]] && total=${BASH_REMATCH[1]}
			unpacked=0 done=0 ;;
		"Unpacking "*) unpacked=$((unpacked + 1)) ;;
		"Setting up "*) done=$((done + 1)) ;;
		*) continue ;;
		esac
		if [ $((SECONDS - last)) -ge 20 ]; then
			last=$SECONDS
			echo "$tag   packages: $unpacked/$total unpacked, $done/$total set up" >&2
		fi
	done
}

verify_tree() {
	local root=$1 f
	[ -x "$root/usr/sbin/kosa8-agent" ] || die "kosa8-agent missing from the tree"
	[ "$(readlink "$root/usr/sbin/init")" = kosa8-agent ] || die "/sbin/init is not the kosa8 agent"
	grep -q '^kosa8:x:1000:1000:[^:]*:/home/kosa8:/bin/bash$' "$root/etc/passwd" || die "user kosa8 missing from /etc/passwd"
	[ "$(stat -c %u:%g "$root/workspace")" = 1000:1000 ] || die "/workspace is not owned by kosa8 (a recipe 'run' changed it?)"
	# Resolved inside the tree: iptables is an absolute alternatives link.
	for f in /bin/bash /usr/sbin/iptables /usr/sbin/useradd; do
		chroot "$root" test -x "$f" || die "$f missing from the tree"
	done
	if [ -e "$root/lib/systemd/systemd" ]; then
		say "warning: systemd is installed (some package pulled it in); it is not the init, kosa8-agent is"
	fi
}

json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# One JSON document; package names and versions are plain Debian tokens,
# quoted and escaped anyway.
write_manifest() {
	local root=$1 out=$2 tree_bytes=$3 alloc=$4 secs=$5
	{
		printf '{\n'
		printf '  "name": %s,\n  "key": "%s",\n' "$(json_str "$r_name")" "$key"
		printf '  "arch": "%s",\n' "$arch"
		printf '  "suite": %s,\n  "variant": %s,\n' "$(json_str "$r_suite")" "$(json_str "$r_variant")"
		printf '  "built": "%s",\n  "build_seconds": %s,\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$secs"
		printf '  "virtual_size": %s,\n  "allocated_size": %s,\n  "tree_bytes": %s,\n' "$r_size_bytes" "$alloc" "$tree_bytes"
		printf '  "agent_sha256": "%s",\n' "${agent_sum%% *}"
		printf '  "packages": ['
		dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Package}\t${Version}\t${Installed-Size}\n' |
			LC_ALL=C sort | awk -F '\t' '
			function q(s) { gsub(/[\\"]/, "\\\\&", s); return "\"" s "\"" }
			{ printf "%s\n    {\"name\": %s, \"version\": %s, \"installed_kib\": %d}", (NR > 1 ? "," : ""), q($1), q($2), $3 + 0 }'
		printf '\n  ]\n}\n'
	} >"$out"
}

# mmdebstrap into root, with kosa8's layer and the recipe's commands.
bootstrap() {
	local root=$1 t
	say "1/4 bootstrap with mmdebstrap: download and install the packages, the long part (full log: $log)"
	t=$(now)
	local -a mm=(mmdebstrap --verbose --mode=root --arch="$deb_arch" --variant="$r_variant" --include="${r_packages[*]}")
	# dpkg's fsync after every file is most of the time, and worthless for a
	# tree that is copied into an image next: eatmydata drops it.
	[ ! -d "$EATMYDATA_HOOKS" ] || mm+=(--hook-dir="$EATMYDATA_HOOKS")
	local -a debs
	mapfile -t debs < <(deb_cache_hooks)
	mm+=("${debs[@]}")
	mm+=(--hook-dir="$tmp/hooks" "$r_suite" "$root" "${r_mirrors[@]}")
	if ! "${mm[@]}" </dev/null 2>&1 | show_progress "$log"; then
		space_hint "mmdebstrap"
		tail -n 20 "$log" >&2
		die "mmdebstrap failed (full log: $log)"
	fi
	apply_path_filters "$root"
	say "1/4 done in $(since "$t")"
}

# The bootstrapped tree does not depend on the agent, so it is kept as
# <cache>/images/<name>/.tree-<treekey> (recipe and build.sh only): a new
# agent then costs an mkfs, not a bootstrap.  Only when building as root for
# root: under sudo the user could not delete a tree of root's files.
# Sets root to the tree to make the image from.
get_tree() {
	local treekey kept d
	treekey=$({ cat "$recipe_file" "$self"; echo "$arch"; } | sha256sum | cut -c1-16)
	kept=$imgroot/$r_name/.tree-$treekey
	if [ -z "$owner" ] && [ -f "$kept.ok" ] && [ -d "$kept" ]; then
		say "1/4 bootstrap: reusing $kept (same recipe and build.sh; only the agent changed)"
		root=$kept
		return
	fi
	root=$tmp/root
	bootstrap "$root"
	[ -z "$owner" ] || return 0
	for d in "$imgroot/$r_name"/.tree-*; do
		[ -e "$d" ] || continue
		rm -rf --one-file-system "$d"
	done
	mv -T "$root" "$kept"
	touch "$kept.ok"
	root=$kept
}

build() {
	local t0 t root hook img alloc tree_bytes npkg uuid fsck_out
	check_root
	check_tools
	check_foreign
	check_space "$imgroot"
	t0=$(now)
	say "building '$r_name' ($arch, $r_suite, $r_variant, ${#r_packages[@]} packages listed) -> $out/rootfs.ext4"
	tmp=$(mktemp -d "$imgroot/$r_name/.build-$key.XXXXXX")
	# apt downloads as user _apt, which must reach the tree's lists and cache.
	chmod 0755 "$tmp"
	mkdir -p "$tmp/hooks" "$tmp/out"
	hook=$tmp/hooks/customize50-kosa8
	log=$imgroot/$r_name/build.log
	: >"$log"
	[ -z "$owner" ] || chown "$owner" "$log"
	write_kosa8_hook "$hook"
	write_filter_hook "$tmp/hooks/essential50-kosa8-filters"
	# The agent as it was when the key was computed: a rebuild of it
	# meanwhile must not end up under the old key.
	cp "$agent" "$tmp/agent"
	[ "$(sha256sum <"$tmp/agent")" = "$agent_sum" ] || die "$agent changed during the build; run it again"
	get_tree
	# Bookworm has a merged /usr: /sbin is a link to usr/sbin.
	install -m 0755 "$tmp/agent" "$root/usr/sbin/kosa8-agent"
	ln -sfn kosa8-agent "$root/usr/sbin/init"
	verify_tree "$root"

	say "2/4 manifest"
	t=$(now)
	tree_bytes=$(du -s -B1 --apparent-size --one-file-system "$root" | cut -f1)
	npkg=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Package}\n' | wc -l)
	# ext4 metadata, journal and room to work: refuse a size the tree nearly fills.
	[ "$r_size_bytes" -ge $((tree_bytes + tree_bytes / 4 + (256 << 20))) ] ||
		die "size $r_size is too small for a $(mib "$tree_bytes") MiB tree; raise 'size' in $recipe_file"
	say "2/4 $npkg packages, $(mib "$tree_bytes") MiB of files, done in $(since "$t")"

	say "3/4 mkfs.ext4 -d into a sparse $r_size image"
	t=$(now)
	img=$tmp/out/rootfs.ext4
	truncate -s "$r_size_bytes" "$img"
	# The file system UUID follows the key: two builds of the same inputs
	# differ only where Debian's archive changed.
	uuid=$(echo "$key" | sha256sum | sed -E 's/^(.{8})(.{4}).(.{3}).(.{3})(.{12}).*/\1-\2-4\3-8\4-\5/')
	if ! mkfs.ext4 -q -F -L kosa8-root -U "$uuid" -E root_owner=0:0 -d "$root" "$img" >>"$log" 2>&1; then
		space_hint "mkfs.ext4"
		tail -n 20 "$log" >&2
		die "mkfs.ext4 failed (full log: $log)"
	fi
	say "3/4 done in $(since "$t")"

	say "4/4 e2fsck -fn and install"
	t=$(now)
	if ! fsck_out=$(e2fsck -fn "$img" 2>&1); then
		printf '%s\n' "$fsck_out" >&2
		die "e2fsck found errors in the new image"
	fi
	alloc=$(($(stat -c %b "$img") * $(stat -c %B "$img")))
	cp "$recipe_file" "$tmp/out/recipe"
	write_manifest "$root" "$tmp/out/manifest.json" "$tree_bytes" "$alloc" "$(since "$t0" | cut -d' ' -f1)"
	# A base image is read-only for ever (sandbox deltas sit on top of it).
	chmod 0444 "$img" "$tmp/out/manifest.json" "$tmp/out/recipe"
	chmod 0755 "$tmp/out"
	[ -z "$owner" ] || chown -R "$owner" "$tmp/out"
	mv -T "$tmp/out" "$out"
	say "4/4 done in $(since "$t")"
	say "built '$r_name' in $(since "$t0"): $npkg packages, $(mib "$alloc") MiB allocated, $(mib "$r_size_bytes") MiB virtual"
}

cleanup() {
	[ -n "${tmp:-}" ] || return 0
	# --one-file-system: a build killed inside mmdebstrap may leave /proc
	# or /dev mounted in the tree; never recurse into the host's.
	rm -rf --one-file-system "$tmp" 2>/dev/null || say "could not remove $tmp entirely (leftover mounts? see: findmnt | grep $tmp)"
}

# Under the lock no build runs, so any .build-* folder is a dead one, and so
# is a .tree-* one without its .ok mark.
remove_stale() {
	local d
	for d in "$imgroot"/*/.build-* "$imgroot"/*/.tree-*; do
		[ -d "$d" ] || continue
		[[ $d != */.tree-* ]] || [ ! -f "$d.ok" ] || continue
		say "removing $d, left by an interrupted build"
		rm -rf --one-file-system "$d" || die "cannot remove $d (leftover mounts? see: findmnt | grep .build-)"
	done
}

# ---------------------------------------------------------------- --inputs

# Everything --path's answer is made from: the variables that pick the
# folders, every recipe file looked at (a missing one that appears would
# be found first), the files the key hashes, and the image itself.
print_inputs() {
	local v d arg=${recipe_arg:-default} sudo_cfg
	for v in KOSA8_CONFIG_DIR XDG_CONFIG_HOME HOME SUDO_UID KOSA8_AGENT KOSA8_CACHE_DIR XDG_CACHE_HOME; do
		echo "env $v"
	done
	echo "file $self"
	case $arg in /*) echo "file $arg" ;; *) echo "file $PWD/$arg" ;; esac
	sudo_cfg=$(sudo_user_config)
	[ -z "$sudo_cfg" ] || echo "file /etc/passwd"
	if [ ! -f "$arg" ] && [[ $arg =~ $NAME_RE ]]; then
		for d in "$(config_dir)/images" "$sudo_cfg" "$here"; do
			[ -n "$d" ] || continue
			echo "file $d/$arg.recipe"
			[ -f "$d/$arg.recipe" ] && break
		done
	fi
	echo "file $agent"
	echo "file $out/rootfs.ext4"
}

# ---------------------------------------------------------------- main

main() {
	mode=build
	agent_arg=
	recipe_arg=
	arch=x86_64
	inputs=
	while [ $# -gt 0 ]; do
		case $1 in
		--path) mode=path ;;
		--inputs) inputs=1 ;;
		--arch)
			[ $# -ge 2 ] || usage
			arch=$2
			shift ;;
		--check) mode=check ;;
		--agent)
			[ $# -ge 2 ] || usage
			agent_arg=$2
			shift ;;
		--agent=*) agent_arg=${1#--agent=} ;;
		-h | --help) usage ;;
		-*) die "unknown option '$1' (see $0 --help)" ;;
		*)
			[ -z "$recipe_arg" ] || die "one recipe at a time ('$recipe_arg' and '$1')"
			recipe_arg=$1 ;;
		esac
		shift
	done

	recipe_path=$(find_recipe "${recipe_arg:-default}") || exit 1
	parse_recipe "$recipe_path"
	if [ "$mode" = check ]; then
		print_recipe
		exit 0
	fi

	set_arch
	find_agent "$agent_arg"
	agent_sum=$(sha256sum <"$agent")
	key=$({ cat "$recipe_file" "$self"; echo "$agent_sum $arch"; } | sha256sum | cut -c1-16)
	set_cache_dir
	imgroot=$cache/images
	[ "$arch" = x86_64 ] || imgroot=$cache/images-$arch
	out=$imgroot/$r_name/$key

	if [ "$mode" = path ]; then
		[ -f "$out/rootfs.ext4" ] || die "image '$r_name' is not built for key $key (run: kosa8 image build $recipe_arg)"
		[ -z "$inputs" ] || print_inputs
		echo "$out/rootfs.ext4"
		exit 0
	fi

	if [ -f "$out/rootfs.ext4" ]; then
		say "'$r_name' is up to date (key $key)"
		echo "$out/rootfs.ext4"
		exit 0
	fi

	check_root
	mkdir_owned "$imgroot/$r_name"
	# One build at a time per cache: a second caller waits, then finds the result.
	exec 9>>"$imgroot/.lock"
	[ -z "$owner" ] || chown "$owner" "$imgroot/.lock"
	if ! flock -n 9; then
		say "another build holds $imgroot/.lock; waiting"
		flock 9
	fi
	if [ ! -f "$out/rootfs.ext4" ]; then
		remove_stale
		trap cleanup EXIT
		build
	fi
	echo "$out/rootfs.ext4"
}

# One line, parsed whole before it runs: editing this file during a build
# cannot change what the running build does next.
main "$@"; exit $?
