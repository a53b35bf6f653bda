import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { EngineError } from './spec.js';

const here = dirname(fileURLToPath(import.meta.url));

/** Every module `file` reaches through its value imports (type-only imports are erased). */
function valueImports(file: string, seen = new Set<string>()): Set<string> {
  const text = readFileSync(file, 'utf8');
  for (const m of text.matchAll(/^(?:import|export)\s+(?!type\b)[^;]*?from\s+'([^']+)'/gms)) {
    const spec = m[1]!;
    if (!spec.startsWith('.')) {
      seen.add(spec);
      continue;
    }
    const path = join(dirname(file), spec.replace(/\.js$/, '.ts'));
    if (seen.has(path)) continue;
    seen.add(path);
    valueImports(path, seen);
  }
  return seen;
}

describe('@kvasir/server/spec', () => {
  it('reaches no HTTP framework, validator or metrics library at run time', () => {
    const packages = [...valueImports(join(here, 'spec.ts'))].filter((s) => !s.startsWith('/'));
    expect(packages).toEqual(['@kvasir/errors']);
  });

  it('exports the error type engines throw', () => {
    const error = new EngineError('QUEUE_FULL', 'full');
    expect(EngineError.isInstance(error)).toBe(true);
    expect(error.code).toBe('QUEUE_FULL');
  });
});
