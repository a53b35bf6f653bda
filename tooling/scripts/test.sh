#!/usr/bin/env bash
# The repo's one test command (`npm test`): set up, lint, typecheck, then every package's tests
# and the release rehearsal (tooling/release-rehearsal), ending with one `N passed, N failed`
# line summed over all of them.
set -uo pipefail
cd "$(dirname "$0")/../.."
export TURBO_TELEMETRY_DISABLED=1

bash tooling/scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

status=0
echo "[test] lint"
pnpm exec biome ci . --reporter=summary || status=1
echo "[test] published shape (publint, are-the-types-wrong)"
pnpm turbo run publint --output-logs=errors-only || status=1
echo "[test] typecheck"
pnpm turbo run typecheck --output-logs=errors-only || status=1

rm -f packages/*/.vitest-report.json apps/*/.vitest-report.json tooling/*/.vitest-report.json
echo "[test] tests"
pnpm turbo run test --concurrency=1 --continue --force || status=1

node tooling/scripts/summarize-tests.mjs --lint-status "$status" || status=1
exit "$status"
