import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { checkPublishedShape, entryFiles, shipsCommonJs } from './shape.js';
import type { Manifest } from './workspace.js';

const dual: Manifest = {
  name: '@kvasir/x',
  version: '1.0.0',
  main: './dist/index.cjs',
  types: './dist/index.d.ts',
  bin: { x: './dist/cli.js' },
  exports: {
    '.': {
      import: { types: './dist/index.d.ts', default: './dist/index.js' },
      require: { types: './dist/index.d.cts', default: './dist/index.cjs' },
    },
    './sub/*': './dist/sub/*.js',
    './package.json': './package.json',
  },
  dependencies: { '@kvasir/errors': '^1.0.0' },
};

describe('entryFiles', () => {
  test('lists every export target, main, types and bin, without patterns', () => {
    expect(entryFiles(dual)).toEqual([
      './dist/cli.js',
      './dist/index.cjs',
      './dist/index.d.cts',
      './dist/index.d.ts',
      './dist/index.js',
      './package.json',
    ]);
  });
});

describe('checkPublishedShape', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rehearsal-shape-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  for (const file of entryFiles(dual)) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), '');
  }

  test('accepts a package with all its files and real ranges', () => {
    expect(() => checkPublishedShape(dir, dual)).not.toThrow();
  });

  test('names a workspace range and a missing entry file', () => {
    const broken: Manifest = {
      ...dual,
      main: './dist/gone.cjs',
      peerDependencies: { '@kvasir/gpu': 'workspace:^' },
    };
    expect(() => checkPublishedShape(dir, broken)).toThrow(
      /peerDependencies: @kvasir\/gpu@workspace:\^; missing \.\/dist\/gone\.cjs/,
    );
  });
});

describe('shipsCommonJs', () => {
  test('reads the require condition of the main entry', () => {
    expect(shipsCommonJs(dual)).toBe(true);
    expect(
      shipsCommonJs({ ...dual, exports: { '.': { types: './a.d.ts', default: './a.js' } } }),
    ).toBe(false);
    expect(shipsCommonJs({ name: 'y', version: '1.0.0', main: './index.js' })).toBe(true);
  });
});
