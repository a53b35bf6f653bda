import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import {
  copyWorkspace,
  publicPackages,
  readWorkspace,
  writeRehearsalChangeset,
} from './workspace.js';

function writeJson(file: string, value: unknown): void {
  mkdirSync(join(file, '..'), { recursive: true });
  writeFileSync(file, JSON.stringify(value));
}

describe('a small workspace', () => {
  const root = mkdtempSync(join(tmpdir(), 'rehearsal-ws-'));
  const dest = join(root, '..', `${root.split('/').pop()}-copy`);
  afterAll(() => {
    rmSync(root, { recursive: true, force: true });
    rmSync(dest, { recursive: true, force: true });
  });
  writeFileSync(
    join(root, 'pnpm-workspace.yaml'),
    'packages:\n  - "packages/*"\n  - tools/cfg # one dir\nonlyBuiltDependencies:\n  - esbuild\n',
  );
  writeJson(join(root, 'package.json'), { name: 'root', private: true });
  writeJson(join(root, '.changeset', 'config.json'), {});
  writeJson(join(root, 'packages', 'a', 'package.json'), {
    name: '@s/a',
    version: '0.0.0',
    dependencies: { '@s/b': 'workspace:^' },
    devDependencies: { '@s/cfg': 'workspace:*' },
  });
  writeFileSync(join(root, 'packages', 'a', 'README.md'), 'a');
  mkdirSync(join(root, 'packages', 'a', 'node_modules', 'junk'), { recursive: true });
  writeJson(join(root, 'packages', 'b', 'package.json'), { name: '@s/b', version: '0.0.0' });
  writeJson(join(root, 'tools', 'cfg', 'package.json'), {
    name: '@s/cfg',
    version: '0.0.0',
    private: true,
  });
  writeFileSync(join(root, 'tools', 'cfg', 'secret.txt'), 'not copied');

  test('reads both glob forms and stops at the next top-level key', () => {
    const packages = readWorkspace(root);
    expect(packages.map((p) => [p.name, p.relDir])).toEqual([
      ['@s/a', 'packages/a'],
      ['@s/b', 'packages/b'],
      ['@s/cfg', 'tools/cfg'],
    ]);
    expect(publicPackages(packages).map((p) => p.name)).toEqual(['@s/a', '@s/b']);
  });

  test('copies public packages whole (no node_modules), private ones as a manifest, and links workspace deps', () => {
    const packages = readWorkspace(root);
    copyWorkspace(root, dest, packages);
    writeRehearsalChangeset(dest, packages);
    expect(readFileSync(join(dest, 'packages', 'a', 'README.md'), 'utf8')).toBe('a');
    expect(existsSync(join(dest, 'packages', 'a', 'node_modules', 'junk'))).toBe(false);
    expect(existsSync(join(dest, 'tools', 'cfg', 'package.json'))).toBe(true);
    expect(existsSync(join(dest, 'tools', 'cfg', 'secret.txt'))).toBe(false);
    expect(realpathSync(join(dest, 'packages', 'a', 'node_modules', '@s', 'b'))).toBe(
      realpathSync(join(dest, 'packages', 'b')),
    );
    expect(realpathSync(join(dest, 'packages', 'a', 'node_modules', '@s', 'cfg'))).toBe(
      realpathSync(join(dest, 'tools', 'cfg')),
    );
    expect(
      readFileSync(join(dest, '.changeset', 'rehearsal-bump-every-package.md'), 'utf8'),
    ).toMatch(/^---\n"@s\/a": patch\n"@s\/b": patch\n---\n/);
  });
});

test('the repository: every public package is released, no private one', () => {
  const root = join(import.meta.dirname, '../../..');
  const names = publicPackages(readWorkspace(root)).map((p) => p.name);
  expect(names).toEqual(
    expect.arrayContaining(['@kvasir/errors', '@kvasir/kv-allocator', 'kvasir']),
  );
  expect(names).not.toContain('@kvasir/release-rehearsal');
  expect(names).not.toContain('@kvasir/tsconfig');
});
