import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, test } from 'vitest';
import { RehearsalError } from './errors.js';
import {
  checkExampleImports,
  extractExamples,
  importedModules,
  packageOf,
  toNodeProgram,
} from './examples.js';

const fence = '```';

describe('extractExamples', () => {
  test('returns only blocks marked rehearsal, with language and line', () => {
    const md = [
      '# x', // 1
      `${fence}ts`, // 2
      'notMarked();',
      fence,
      `${fence}ts rehearsal`, // 5
      "import { a } from 'x';",
      fence,
      `${fence}sh rehearsal`, // 8
      'npm install -g x',
      fence,
    ].join('\n');
    expect(extractExamples(md)).toEqual([
      { lang: 'ts', code: "import { a } from 'x';\n", line: 5 },
      { lang: 'sh', code: 'npm install -g x\n', line: 8 },
    ]);
  });

  test('a marked-looking fence inside another block is part of that block, not a mark', () => {
    const md = ['````md', `${fence}ts rehearsal`, 'inner();', fence, '````'].join('\n');
    expect(extractExamples(md)).toEqual([]);
  });

  test('refuses a marked block it cannot run, or one never closed', () => {
    expect(() => extractExamples(`${fence}json rehearsal\n{}\n${fence}`)).toThrow(
      /mark only ts, js or sh/,
    );
    const unclosed = (() => {
      try {
        extractExamples(`${fence}ts rehearsal\nx();\n`);
      } catch (error) {
        return error;
      }
    })();
    expect(RehearsalError.isInstance(unclosed) && unclosed.code).toBe('BAD_EXAMPLE');
  });

  test('the code of any marked block comes back verbatim', () => {
    const line = fc.stringMatching(/^[a-z0-9 ();=.'{}]*$/);
    fc.assert(
      fc.property(fc.array(line, { maxLength: 8 }), (body) => {
        const md = ['intro', `${fence}js rehearsal`, ...body, fence, 'outro'].join('\n');
        const [example] = extractExamples(md);
        expect(example?.code).toBe(`${body.join('\n')}\n`);
      }),
    );
  });
});

describe('imports', () => {
  test('finds static, type-only, re-export, dynamic and require imports', () => {
    const code = [
      "import { a, type B } from '@kvasir/x';",
      "import type { C } from '@kvasir/types';",
      "export { d } from 'node:fs';",
      "const e = await import('@scope/pkg/sub');",
      "const f = require('left-pad');",
    ].join('\n');
    expect(importedModules(code).sort()).toEqual([
      '@kvasir/types',
      '@kvasir/x',
      '@scope/pkg/sub',
      'left-pad',
      'node:fs',
    ]);
  });

  test('packageOf names the package of a specifier and skips builtins and paths', () => {
    expect(packageOf('@kvasir/scheduler/sim')).toBe('@kvasir/scheduler');
    expect(packageOf('lodash/fp')).toBe('lodash');
    expect(packageOf('node:path')).toBeUndefined();
    expect(packageOf('fs')).toBeUndefined();
    expect(packageOf('../src/index.js')).toBeUndefined();
  });

  test('allows the package, its subpaths, its dependencies and builtins', () => {
    const code = "import '@kvasir/a/sub'; import '@kvasir/dep'; import 'node:os'; import 'path';";
    expect(() => checkExampleImports(code, '@kvasir/a', ['@kvasir/dep'])).not.toThrow();
  });

  test('refuses a package npm install would not bring, and a path into the repository', () => {
    expect(() => checkExampleImports("import 'openai';", '@kvasir/a', ['@kvasir/dep'])).toThrow(
      /imports 'openai', which `npm install @kvasir\/a` does not install/,
    );
    expect(() =>
      checkExampleImports("import { x } from '../src/index.js';", '@kvasir/a', []),
    ).toThrow(/a path a user who installed the package does not have/);
  });
});

describe('toNodeProgram', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rehearsal-examples-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  // Types to strip, a builtin import and top-level await: what README examples use.
  const example = [
    "import { basename } from 'node:path';",
    'type Pair = [string, number];',
    "const pair: Pair = [basename('/a/b.txt'), await Promise.resolve(2)];",
    'console.log(JSON.stringify({ pair, esm: typeof require === "undefined" }));',
  ].join('\n');

  test.each([
    ['esm', 'mjs', true],
    ['cjs', 'cjs', false],
  ] as const)('%s: runs under Node with types stripped and top-level await', (format, ext, esm) => {
    const file = join(dir, `example.${ext}`);
    writeFileSync(file, toNodeProgram(example, format));
    const out = execFileSync(process.execPath, [file], { encoding: 'utf8' });
    expect(JSON.parse(out)).toEqual({ pair: ['b.txt', 2], esm });
  });

  test('cjs: a throwing example exits non-zero', () => {
    const file = join(dir, 'throws.cjs');
    writeFileSync(file, toNodeProgram("await Promise.reject(new Error('boom'));", 'cjs'));
    expect(() => execFileSync(process.execPath, [file], { stdio: 'pipe' })).toThrow(/boom/);
  });
});
