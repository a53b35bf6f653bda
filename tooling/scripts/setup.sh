#!/usr/bin/env bash
# Everything a fresh Debian machine with Node 20 needs before Kvasir builds and tests:
# system libraries for the software WebGPU adapter (Mesa llvmpipe through EGL), redis-server for
# the offload tests, pnpm at the pinned version, the workspace install from the lockfile, and a build.
set -euo pipefail
cd "$(dirname "$0")/../.."

PNPM_VERSION=$(node -p "require('./package.json').packageManager.split('@')[1]")
# Dawn dlopens the unversioned libEGL.so, which Debian ships only in libegl-dev. libxcb-shm0 is
# the one library Mesa's lavapipe (fetched by tooling/scripts/lavapipe.sh for the subgroup
# kernel tests) links that the OpenGL packages do not already bring.
# clang + lld: @kvasir/model's wasm backend is compiled from C for wasm32 (wasm-ld comes with lld).
# chromium: @kvasir/model's browser test drives it headless through playwright-core.
# redis-tools: redis-cli, which forms the tests' Redis Cluster (redis-server depends on it; named
# so a machine with only redis-server from elsewhere gets it too).
APT_PACKAGES=(libegl1 libegl-dev libgles2 libegl-mesa0 libgl1-mesa-dri libxcb-shm0 redis-server redis-tools clang lld chromium)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # The Debian package starts a system-wide redis on 6379; tests start their own on free ports.
    (command -v systemctl >/dev/null && systemctl disable --now redis-server >/dev/null 2>&1) || true
  else
    echo "[setup] missing system packages: ${missing[*]}" >&2
    echo "[setup] install them with: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

if ! command -v pnpm >/dev/null 2>&1 || [ "$(pnpm --version)" != "$PNPM_VERSION" ]; then
  echo "[setup] installing pnpm@$PNPM_VERSION"
  npm install -g "pnpm@$PNPM_VERSION" >/dev/null
fi

export TURBO_TELEMETRY_DISABLED=1
pnpm install --frozen-lockfile --reporter=silent
pnpm turbo run build --output-logs=errors-only
