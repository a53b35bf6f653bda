// Shared vitest preset. Every package writes a JSON report beside itself so that
// tooling/scripts/summarize-tests.mjs can print one `N passed, N failed` line for the repo.
import { defineConfig, mergeConfig } from 'vitest/config';

/** @param {import('vitest/config').UserConfig} [overrides] */
export function kvasirVitestConfig(overrides = {}) {
  return mergeConfig(
    defineConfig({
      test: {
        include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
        reporters: ['default', ['json', { outputFile: '.vitest-report.json' }]],
        testTimeout: 60_000,
        hookTimeout: 60_000,
        // Two cores on CI: property tests and software-GPU kernels are CPU bound.
        maxWorkers: 2,
      },
    }),
    overrides,
  );
}
