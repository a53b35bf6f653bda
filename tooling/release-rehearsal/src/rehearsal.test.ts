// The release rehearsal: every public package published to a private registry the
// way a release publishes, then installed alone in a fresh project and its README's marked
// examples run there, under ESM and, where the package ships CommonJS, under CJS. One test per
// package and example, so the summary line says which package a release would break.
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { extractExamples, type ReadmeExample } from './examples.js';
import { type InstalledPackage, Rehearsal } from './rehearsal.js';
import { shipsCommonJs } from './shape.js';
import { publicPackages, readWorkspace, type WorkspacePackage } from './workspace.js';

const root = resolve(import.meta.dirname, '../../..');
const released = publicPackages(readWorkspace(root));

let rehearsal: Rehearsal | undefined;
let prepareError: unknown;

// A failed preparation (a package that cannot be published) fails every test with its error,
// rather than skipping them: the summary must count a broken release as failures.
beforeAll(async () => {
  try {
    rehearsal = await Rehearsal.prepare(root, readWorkspace(root));
  } catch (error) {
    prepareError = error;
  }
}, 900_000);

afterAll(async () => {
  await rehearsal?.dispose();
});

function prepared(): Rehearsal {
  if (rehearsal === undefined) throw prepareError;
  return rehearsal;
}

function readmeOf(pkg: WorkspacePackage): string {
  const file = join(pkg.dir, 'README.md');
  return existsSync(file) ? readFileSync(file, 'utf8') : '';
}

/** One install per package, shared by its tests; a failed install fails each of them. */
function installer(name: string): () => Promise<InstalledPackage> {
  let installed: Promise<InstalledPackage> | undefined;
  return () => {
    installed ??= Promise.resolve().then(() => prepared().installAlone(name));
    return installed;
  };
}

test('the workspace has packages to release', () => {
  const names = released.map((p) => p.name);
  expect(names).toContain('@kvasir/errors');
  // Its native dependency (zeromq's prebuilt binaries) is the one a fresh install most often
  // breaks on: the router must stay in the rehearsal.
  expect(names).toContain('@kvasir/router');
});

describe.each(released)('$name', (pkg) => {
  const readme = readmeOf(pkg);
  const install = installer(pkg.name);
  const examples: ReadmeExample[] = extractExamples(readme);
  const cjs = shipsCommonJs(pkg.manifest);

  test('README says how to install it', () => {
    expect(readme, `${pkg.relDir}/README.md: no \`npm install ${pkg.name}\` line`).toMatch(
      new RegExp(`npm (i|install)( -g)? ${pkg.name.replace(/[/@]/g, '\\$&')}\\b`),
    );
  });

  test('installs alone from the registry, with its entry files and real version ranges', async () => {
    const installed = await install();
    expect(installed.manifest.version).toBe(prepared().version(pkg.name));
  });

  test('README marks a runnable example', () => {
    expect(
      examples.length,
      `${pkg.relDir}/README.md: no \`\`\`ts rehearsal (or js/sh) block`,
    ).toBeGreaterThan(0);
  });

  for (const example of examples) {
    const formats: Array<'esm' | 'cjs'> =
      example.lang === 'sh' ? ['esm'] : cjs ? ['esm', 'cjs'] : ['esm'];
    for (const format of formats) {
      const label =
        example.lang === 'sh' ? 'with bash' : `under ${format === 'esm' ? 'ESM' : 'CommonJS'}`;
      test(`README example at line ${example.line} runs ${label}`, async () => {
        const installed = await install();
        await prepared().runExample(installed, example, format);
      });
    }
  }
});
