// The engine runs wherever JavaScript does: no Node module in its sources, and its entry, with
// everything it imports from the other packages, bundles for a browser.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));

/** Every non-test source file below `dir`. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

/** What in `text` only Node has: `node:` imports and the `process`, `Buffer`, `NodeJS` globals. */
function nodeOnly(text: string): string[] {
  const found = [
    ...text.matchAll(/\bfrom\s+'(node:[^']+)'/g),
    ...text.matchAll(/\bimport\(\s*'(node:[^']+)'\s*\)/g),
    ...text.matchAll(/(?<![.\w])(process|Buffer|NodeJS)\s*\./g),
  ];
  return found.map((m) => m[1]!);
}

/** Bundles `entry` for a browser; the errors name each import a browser cannot resolve. */
async function bundleForBrowser(entry: { path: string } | { contents: string }): Promise<string[]> {
  try {
    await build({
      ...('path' in entry
        ? { entryPoints: [entry.path] }
        : { stdin: { contents: entry.contents, resolveDir: here, loader: 'ts' } }),
      bundle: true,
      format: 'esm',
      platform: 'browser',
      write: false,
      // Other packages' `browser` fields disable their Node-only modules (the model's file
      // reader, worker threads); esbuild warns about those imports, which a page never calls.
      logLevel: 'silent',
    });
    return [];
  } catch (error) {
    const errors = (error as { errors?: { text: string; location?: { file: string } | null }[] })
      .errors;
    if (!errors) throw error;
    return errors.map((e) => `${e.location?.file ?? '?'}: ${e.text}`);
  }
}

describe('the engine without Node', () => {
  const files = sources(here);

  it('has no Node module or Node global in any source file', () => {
    expect(files.length).toBeGreaterThan(20);
    const found = files.flatMap((f) =>
      nodeOnly(readFileSync(f, 'utf8')).map((what) => `${relative(here, f)}: ${what}`),
    );
    expect(found).toEqual([]);
  });

  it('finds a Node import or global when there is one (the check itself works)', () => {
    expect(
      nodeOnly(
        "import { freemem } from 'node:os';\nconst m = await import('node:fs');\nprocess.cwd();\nlet t: NodeJS.Timeout;",
      ),
    ).toEqual(['node:os', 'node:fs', 'process', 'NodeJS']);
    expect(nodeOnly('const x = options.process.cwd; // subprocess.y')).toEqual([]);
  });

  it('bundles for a browser, with everything it imports from the other packages', async () => {
    expect(await bundleForBrowser({ path: join(here, 'index.ts') })).toEqual([]);
  }, 120_000);

  it('fails to bundle for a browser with a Node import (the check itself works)', async () => {
    const errors = await bundleForBrowser({
      contents: "export * from './index.ts';\nexport { freemem } from 'node:os';\n",
    });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/node:os/);
  }, 120_000);
});
