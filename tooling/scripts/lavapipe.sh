#!/usr/bin/env bash
# Mesa's Vulkan software driver (lavapipe) beside the system's OpenGL one, for kernels that need
# what Dawn's OpenGL ES backend lacks: the `subgroups` feature and the core feature level.
# Downloads Debian bookworm's Vulkan loader (libvulkan1) and bookworm-backports' lavapipe
# (mesa-vulkan-drivers 25.x; bookworm's own 22.3 lacks a Vulkan feature Dawn requires) into
# .lavapipe/ (git-ignored) without touching the system's packages. Usage:
#   bash tooling/scripts/lavapipe.sh               # download and unpack (once)
#   source <(bash tooling/scripts/lavapipe.sh --env)
#   bash tooling/scripts/lavapipe.sh --run CMD...  # CMD in that environment (downloads first)
# The environment puts the loader on LD_LIBRARY_PATH and names lavapipe's ICD file in
# KVASIR_LAVAPIPE_ICD. It does not set VK_ICD_FILENAMES: a plain createGpu() still picks the
# OpenGL ES adapter; tests that want lavapipe set VK_ICD_FILENAMES to KVASIR_LAVAPIPE_ICD while
# they open their device (see packages/attention-kernels/src/testing/lavapipe.ts).
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/../.."
root="$PWD/.lavapipe"
lib="$root/root/usr/lib/x86_64-linux-gnu"
icd="$root/lvp_icd.json"

env_lines() {
  echo "export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "export KVASIR_LAVAPIPE_ICD=$icd"
}

fetch() {
  [[ -f "$icd" ]] && return 0
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    echo "[lavapipe] needs apt-get and dpkg-deb (Debian bookworm) to fetch Mesa's lavapipe" >&2
    exit 1
  fi
  echo "[lavapipe] fetching libvulkan1 and mesa-vulkan-drivers (bookworm-backports) into $root" >&2
  rm -rf "$root"
  mkdir -p "$root/lists/partial" "$root/cache/archives/partial" "$root/debs" "$root/root"
  printf '%s\n' "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-backports main" >"$root/sources.list"
  local apt_opts=(-o "Dir::Etc::sourcelist=$root/sources.list" -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$root/lists" -o "Dir::Cache=$root/cache" -o "APT::Get::List-Cleanup=0")
  apt-get "${apt_opts[@]}" update >/dev/null
  (
    cd "$root/debs"
    apt-get "${apt_opts[@]}" download libvulkan1/bookworm mesa-vulkan-drivers/bookworm-backports \
      >/dev/null 2>&1
  )
  for d in "$root"/debs/*.deb; do dpkg-deb -x "$d" "$root/root"; done
  local so="$lib/libvulkan_lvp.so"
  [[ -f "$so" && -f "$lib/libvulkan.so.1" ]] || {
    echo "[lavapipe] download failed: $(ls "$root/debs")" >&2
    exit 1
  }
  local missing
  missing=$(LD_LIBRARY_PATH="$lib" ldd "$so" | awk '/not found/ {print $1}' | tr '\n' ' ')
  if [[ -n "$missing" ]]; then
    echo "[lavapipe] lavapipe needs libraries this machine lacks: $missing" >&2
    echo "[lavapipe] install the Debian packages that ship them (apt-file search NAME)" >&2
    exit 1
  fi
  printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s","api_version":"1.3.0"}}\n' \
    "$so" >"$icd"
  echo "[lavapipe] $(ls "$root/debs" | grep -m1 mesa-vulkan-drivers) unpacked" >&2
}

case "${1:-}" in
  --env)
    [[ -f "$icd" ]] || { echo "run bash tooling/scripts/lavapipe.sh first" >&2; exit 1; }
    env_lines
    ;;
  --run)
    shift
    fetch
    eval "$(env_lines)"
    cd "$here"
    exec "$@"
    ;;
  "")
    fetch
    ;;
  *)
    echo "usage: lavapipe.sh [--env | --run CMD...]" >&2
    exit 2
    ;;
esac
