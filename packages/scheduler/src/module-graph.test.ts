import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
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

/** The files `file` imports from this package, type-only imports included (they shape it too). */
function localImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/^(?:import|export)\s[^;]*?from\s+'(\.[^']+)'/gms)) {
    const base = join(dirname(file), m[1]!.replace(/\.js$/, ''));
    out.push(existsSync(`${base}.ts`) ? `${base}.ts` : join(base, 'index.ts'));
  }
  return out;
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
  it('has no import cycles between the source files', () => {
    const files = sources(here);
    expect(files.length).toBeGreaterThan(20);
    expect(findCycle(files)).toBeUndefined();
  });

  it('finds a cycle when there is one (the check itself works)', () => {
    // The facade imports the request table; the table importing the facade back closes a loop.
    const table = join(here, 'request-table.ts');
    const facade = join(here, 'scheduler.ts');
    expect(localImports(facade)).toContain(table);
    const withBackEdge = (f: string) =>
      f === table ? [...localImports(f), facade] : localImports(f);
    const cycle = findCycle(sources(here), withBackEdge);
    expect(cycle).toBeDefined();
    expect(cycle).toContain('request-table.ts');
    expect(cycle).toContain('scheduler.ts');
    expect(cycle![0]).toBe(cycle![cycle!.length - 1]);
  });
});
