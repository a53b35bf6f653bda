#!/usr/bin/env node
// Sums the vitest JSON reports of every package (packages/, apps/, tooling/) that has a test
// script and prints one closing line `N passed, N failed[, N skipped]`. A package whose report
// is missing (its runner crashed before writing one) counts as one failure, so a broken package
// can never look green.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('../..', import.meta.url).pathname;
const lintStatus = Number(process.argv[process.argv.indexOf('--lint-status') + 1] ?? 0) || 0;
let passed = 0;
let failed = 0;
let skipped = 0;
const rows = [];

for (const group of ['packages', 'apps', 'tooling']) {
  const dir = join(root, group);
  if (!existsSync(dir)) continue;
  for (const name of readdirSync(dir).sort()) {
    const pkgJson = join(dir, name, 'package.json');
    if (!existsSync(pkgJson)) continue;
    const pkg = JSON.parse(readFileSync(pkgJson, 'utf8'));
    if (!pkg.scripts?.test) continue;
    const report = join(dir, name, '.vitest-report.json');
    if (!existsSync(report)) {
      failed += 1;
      rows.push(`${pkg.name}: no test report (runner crashed or did not run)`);
      continue;
    }
    const r = JSON.parse(readFileSync(report, 'utf8'));
    passed += r.numPassedTests;
    failed += r.numFailedTests;
    skipped += r.numPendingTests + (r.numTodoTests ?? 0);
    // A suite that failed to load (syntax error, failed import) has no tests but is a failure.
    const brokenSuites = (r.testResults ?? []).filter(
      (s) => s.status === 'failed' && (s.assertionResults ?? []).length === 0,
    ).length;
    failed += brokenSuites;
    rows.push(
      `${pkg.name}: ${r.numPassedTests} passed, ${r.numFailedTests + brokenSuites} failed` +
        (r.numPendingTests ? `, ${r.numPendingTests} skipped` : ''),
    );
  }
}

console.log('\nTest summary by package:');
for (const row of rows) console.log(`  ${row}`);
if (lintStatus) console.log('  (lint, typecheck or a test runner exited non-zero)');
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed > 0 || skipped > 0 || lintStatus ? 1 : 0);
