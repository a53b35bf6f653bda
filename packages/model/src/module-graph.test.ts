import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));

/**
 * The package's layers, lowest first, as paths below `src/`. A file may import files of a lower
 * layer and of its own folder, never of a higher layer, nor of a sibling at the same rank (one
 * backend does not reach into another; the tokenizer, the kernels and the grammar do not know each
 * other).
 */
const LAYERS: readonly (readonly string[])[] = [
  ['errors.ts'],
  // What a model family adds to the config, read from its files (Gemma 3's fields).
  ['families'],
  // The model config, and the seeded generator that random weights and sampling draw from.
  ['config.ts', 'rng.ts'],
  // Checkpoint files and the tokenizer files inside them (tokenizer.json, GGUF metadata).
  ['formats'],
  ['tokenizer', 'kernels', 'grammar'],
  ['sampling'],
  // The backend seam: plans, the KV cache layout, weights, block transfers.
  ['execution'],
  ['backends/cpu', 'backends/wasm', 'backends/webgpu'],
  // Choosing a backend, its limits, loading a model and generating with it.
  ['model'],
  // The published entry points.
  ['index.ts', 'formats.ts', 'kernels.ts'],
  // Test support, which may use anything.
  ['testing'],
];

/** The layer group (one of {@link LAYERS}' paths) and rank of a source file. */
function placeOf(file: string): { group: string; rank: number } | undefined {
  const path = relative(here, file);
  for (const [rank, groups] of LAYERS.entries()) {
    for (const group of groups) {
      if (path === group || path.startsWith(`${group}/`)) return { group, rank };
    }
  }
  return undefined;
}

/** Every non-test source file below `dir`. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

/**
 * The files `file` imports from this package: static imports and re-exports, type-only ones
 * included (they shape it too), and dynamic `import()` (loaded later, still a dependency).
 */
function localImports(file: string): string[] {
  // The wasm kernels' generated module exists after a build only, and imports nothing.
  if (!existsSync(file)) return [];
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  const found = [
    ...text.matchAll(/^(?:import|export)\s[^;]*?from\s+'(\.[^']+)'/gms),
    ...text.matchAll(/\bimport\(\s*'(\.[^']+)'\s*\)/g),
  ];
  for (const m of found) {
    const base = join(dirname(file), m[1]!.replace(/\.js$/, ''));
    out.push(existsSync(base) ? join(base, 'index.ts') : `${base}.ts`);
  }
  return out;
}

/** Every import that points up the layers or across to a sibling group, as `from -> to`. */
function wrongWayImports(
  files: readonly string[],
  importsOf: (file: string) => string[] = localImports,
): string[] {
  const wrong: string[] = [];
  for (const f of files) {
    const from = placeOf(f);
    for (const g of importsOf(f)) {
      const to = placeOf(g);
      if (!from || !to) continue;
      if (to.rank > from.rank || (to.rank === from.rank && to.group !== from.group)) {
        wrong.push(`${relative(here, f)} -> ${relative(here, g)}`);
      }
    }
  }
  return wrong;
}

/** The first import cycle found, as relative paths from its start back to it, or undefined. */
function findCycle(
  files: readonly string[],
  importsOf: (file: string) => string[] = localImports,
): string[] | undefined {
  const DONE = 2;
  const mark = new Map<string, number>();
  const stack: string[] = [];
  const visit = (f: string): string[] | undefined => {
    if (mark.get(f) === DONE) return undefined;
    if (mark.get(f) === 1) return [...stack.slice(stack.indexOf(f)), f];
    mark.set(f, 1);
    stack.push(f);
    for (const g of importsOf(f)) {
      const cycle = visit(g);
      if (cycle) return cycle;
    }
    stack.pop();
    mark.set(f, DONE);
    return undefined;
  };
  for (const f of files) {
    const cycle = visit(f);
    if (cycle) return cycle.map((p) => relative(here, p));
  }
  return undefined;
}

describe('module graph', () => {
  const files = sources(here);

  it('places every source file in a layer', () => {
    expect(files.length).toBeGreaterThan(60);
    expect(files.filter((f) => !placeOf(f)).map((f) => relative(here, f))).toEqual([]);
  });

  it('imports only downward, and never from a sibling at the same rank', () => {
    expect(wrongWayImports(files)).toEqual([]);
  });

  it('has no import cycles between the source files', () => {
    expect(findCycle(files)).toBeUndefined();
  });

  it('finds an upward import when there is one (the check itself works)', () => {
    // The CPU backend importing the backend choice above it: what choosing used to look like.
    const cpu = join(here, 'backends/cpu/cpu-executor.ts');
    const select = join(here, 'model/backend-select.ts');
    const wasm = join(here, 'backends/wasm/wasm-executor.ts');
    expect(wrongWayImports(files, (f) => (f === cpu ? [...localImports(f), select] : []))).toEqual([
      'backends/cpu/cpu-executor.ts -> model/backend-select.ts',
    ]);
    expect(wrongWayImports(files, (f) => (f === cpu ? [wasm] : []))).toEqual([
      'backends/cpu/cpu-executor.ts -> backends/wasm/wasm-executor.ts',
    ]);
  });

  it('finds a cycle when there is one (the check itself works)', () => {
    // The model facade imports the backend choice; the choice importing the facade back closes a loop.
    const facade = join(here, 'model/model.ts');
    const select = join(here, 'model/backend-select.ts');
    expect(localImports(facade)).toContain(select);
    const withBackEdge = (f: string) =>
      f === select ? [...localImports(f), facade] : localImports(f);
    const cycle = findCycle(files, withBackEdge);
    expect(cycle).toBeDefined();
    expect(cycle).toContain('model/model.ts');
    expect(cycle).toContain('model/backend-select.ts');
    expect(cycle![0]).toBe(cycle![cycle!.length - 1]);
  });
});
