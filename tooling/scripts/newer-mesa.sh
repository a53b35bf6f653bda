#!/usr/bin/env bash
# A newer llvmpipe beside the system's, for comparing kernels across Mesa versions without
# touching the machine's packages: downloads Debian bookworm-backports' Mesa (25.x) into
# .mesa-backports/ (git-ignored) and prints the environment that makes Dawn's OpenGL ES backend
# load it. Usage:
#   bash tooling/scripts/newer-mesa.sh            # once: download and unpack
#   source <(bash tooling/scripts/newer-mesa.sh --env)
#   pnpm --filter @kvasir/attention-kernels bench --json --only=attention
# The adapter line of the benchmark then names the Mesa version it runs on.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD/.mesa-backports"
lib="$root/root/usr/lib/x86_64-linux-gnu"

if [[ "${1:-}" == "--env" ]]; then
  [[ -d "$lib" ]] || { echo "run bash tooling/scripts/newer-mesa.sh first" >&2; exit 1; }
  echo "export LD_LIBRARY_PATH=$lib"
  echo "export __EGL_VENDOR_LIBRARY_FILENAMES=$root/root/usr/share/glvnd/egl_vendor.d/50_mesa.json"
  echo "export LIBGL_DRIVERS_PATH=$lib/dri"
  echo "export GBM_BACKENDS_PATH=$lib/gbm"
  exit 0
fi

mkdir -p "$root/lists/partial" "$root/debs" "$root/root"
echo "deb http://deb.debian.org/debian bookworm-backports main" > "$root/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$root/sources.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$root/lists" -o "APT::Get::List-Cleanup=0")
apt-get "${apt_opts[@]}" update >/dev/null
cd "$root/debs"
for p in libegl-mesa0 mesa-libgallium libgbm1 libgl1-mesa-dri libdrm2 libdrm-amdgpu1 libdrm-intel1; do
  apt-get "${apt_opts[@]}" download "$p/bookworm-backports" >/dev/null 2>&1
done
for d in *.deb; do dpkg-deb -x "$d" "$root/root"; done
echo "unpacked $(ls "$root/debs" | grep -m1 mesa-libgallium) into $root/root"
