// Shared vitest preset. Every package writes a JSON report beside itself so that
// tooling/scripts/summarize-tests.mjs can print one `N passed, N failed` line for the repo.
import { defineConfig, mergeConfig } from 'vitest/config';

const FULL_MATRIX = process.env.KVASIR_FULL_MATRIX === '1';

/** @param {import('vitest/config').UserConfig} [overrides] */
export function kvasirVitestConfig(overrides = {}) {
  return mergeConfig(
    defineConfig({
      test: {
        include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
        reporters: ['default', ['json', { outputFile: '.vitest-report.json' }]],
        // Hang detectors, not speed limits: a shared two-core machine running other work can be
        // several times slower than a quiet one, and a test must not fail for that. The slowest
        // CI test takes well under a minute on a quiet machine; KVASIR_FULL_MATRIX=1 runs the
        // serving-sized kernel shapes, each a JIT compile of up to minutes on a software adapter.
        testTimeout: FULL_MATRIX ? 1_800_000 : 300_000,
        hookTimeout: FULL_MATRIX ? 1_800_000 : 300_000,
        // Two cores on CI: property tests and software-GPU kernels are CPU bound.
        maxWorkers: 2,
      },
    }),
    overrides,
  );
}
