import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { EngineError } from './spec.js';
import { toolCallMessage, toolCallSyntax } from './tools.js';

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

describe('@kvasir/server/tools', () => {
  it('reaches nothing but @kvasir/errors at run time (no node: module: it runs in a browser)', () => {
    const packages = [...valueImports(join(here, 'tools.ts'))].filter((s) => !s.startsWith('/'));
    expect(packages).toEqual(['@kvasir/errors']);
  });

  it('reads calls with ids drawn from Web Crypto', () => {
    const text = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>';
    const hermes = toolCallMessage(toolCallSyntax('hermes'), text, 'stop');
    expect(hermes.content).toBeNull();
    expect(hermes.finish_reason).toBe('tool_calls');
    expect(hermes.tool_calls?.[0]?.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    const mistral = toolCallMessage(
      toolCallSyntax('mistral'),
      '[TOOL_CALLS][{"name": "now", "arguments": {}}]',
      'stop',
    );
    expect(mistral.tool_calls?.[0]?.id).toMatch(/^[A-Za-z0-9]{9}$/);
  });
});
