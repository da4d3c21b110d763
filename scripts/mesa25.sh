#!/usr/bin/env bash
# Unpacks Mesa 25.0's lavapipe (Debian bookworm-backports' mesa-vulkan-drivers) into a
# private folder and prints the environment that points the Vulkan loader at it:
#
#     eval "$(scripts/mesa25.sh)"      # exports VK_ICD_FILENAMES and LD_LIBRARY_PATH
#     cargo run -- info                # "llvmpipe ..., Mesa 25.0.x" on Vulkan
#
# Nothing is installed: the system's driver, its apt sources and its package state are
# left alone. The packages come through `apt-get download` with a private sources list
# and package lists, and are unpacked with `dpkg -x`. Mesa 22.3's lavapipe (bookworm's)
# stops any shader loop after 65,535 iterations; 25.0's has no such limit, so the two
# drivers run different paths of the library (see src/gpu/tune/budget.rs).
#
# Environment: MESA25_DIR  the folder (default ~/.cache/wgpu-attention/mesa25);
#              MESA25_SUITE the Debian suite (default bookworm-backports).
# Only stdout carries the exports; progress goes to stderr.
set -euo pipefail

dir="${MESA25_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wgpu-attention/mesa25}"
suite="${MESA25_SUITE:-bookworm-backports}"
# lavapipe 25.0 needs libdrm >= 2.4.121, newer than bookworm's 2.4.114.
packages=(mesa-vulkan-drivers libdrm2 libdrm-amdgpu1)
icd="$dir/lvp_icd.json"
root="$dir/root"

say() { echo "mesa25: $*" >&2; }

if [ ! -s "$icd" ]; then
    command -v apt-get >/dev/null && command -v dpkg >/dev/null || {
        say "needs apt-get and dpkg (a Debian or Ubuntu machine)"
        exit 1
    }
    mkdir -p "$dir"
    apt_dir="$dir/apt"
    rm -rf "$apt_dir" "$root" "$dir/debs"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dir/debs" "$root"
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -r "$keyring" ] || { say "no Debian archive keyring at $keyring"; exit 1; }
    echo "deb [signed-by=$keyring] http://deb.debian.org/debian $suite main" >"$apt_dir/sources.list"
    # Only this sources list, these package lists and this cache: the system's are not
    # read or written (SourceParts off, so sources.list.d is ignored too).
    apt_opts=(
        -o "Dir::Etc::SourceList=$apt_dir/sources.list"
        -o "Dir::Etc::SourceParts=$apt_dir/no-parts"
        -o "Dir::State::Lists=$apt_dir/lists"
        -o "Dir::Cache=$apt_dir/cache"
        -o "Debug::NoLocking=1"
        # The private folders belong to this user, which apt's _apt sandbox cannot read.
        -o "APT::Sandbox::User=$(id -un)"
    )
    say "fetching the $suite package lists"
    apt-get "${apt_opts[@]}" -qq update >&2
    version=$(apt-cache "${apt_opts[@]}" show "mesa-vulkan-drivers/$suite" 2>/dev/null |
        awk '/^Version:/ { print $2; exit }')
    case "$version" in
    25.*) ;;
    *)
        say "$suite has mesa-vulkan-drivers '${version:-none}', not 25.x"
        exit 1
        ;;
    esac
    say "downloading ${packages[*]} from $suite (mesa $version)"
    (cd "$dir/debs" && apt-get "${apt_opts[@]}" -qq download "${packages[@]/%//$suite}" >&2)
    for deb in "$dir"/debs/*.deb; do
        dpkg -x "$deb" "$root"
    done
    shipped=$(find "$root/usr/share/vulkan/icd.d" -name 'lvp_icd*.json' | head -n 1)
    lib=$(find "$root/usr/lib" -name libvulkan_lvp.so | head -n 1)
    [ -n "$shipped" ] && [ -n "$lib" ] || { say "no lavapipe in the unpacked packages"; exit 1; }
    # The shipped manifest names the system path of the library; the loader must load
    # the unpacked one, so the path is made absolute.
    sed -E "s|\"library_path\": *\"[^\"]*\"|\"library_path\": \"$lib\"|" "$shipped" >"$icd.tmp"
    grep -q "\"library_path\": \"$lib\"" "$icd.tmp" || { say "could not rewrite $shipped"; exit 1; }
    echo "$version" >"$dir/version"
    mv "$icd.tmp" "$icd"
    rm -rf "$apt_dir" "$dir/debs"
fi

lib=$(sed -nE 's|.*"library_path": *"([^"]*)".*|\1|p' "$icd")
libdir=$(dirname "$lib")
# Every library lavapipe needs must resolve, from the unpacked folder (libdrm) or the
# system; a missing one would make the loader skip the driver without saying why.
missing=$(LD_LIBRARY_PATH="$libdir" ldd "$lib" | awk '/not found/ { print $1 }')
if [ -n "$missing" ]; then
    say "lavapipe needs libraries this machine lacks: $missing"
    exit 1
fi
say "lavapipe from mesa $(cat "$dir/version" 2>/dev/null || echo '?') in $dir"
printf 'export VK_ICD_FILENAMES=%q\n' "$icd"
printf 'export LD_LIBRARY_PATH=%q\n' "$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
