import { describe, expect, it } from 'vitest';
import { QUANTIZED_KV_FORMATS } from './kv-format/registry.js';
import { mergeWgsl } from './wgsl-merge.js';

describe('mergeWgsl', () => {
  it('drops the second copy of a declared name and keeps the rest, comments included', () => {
    const a = `// shared\nconst K: u32 = 4u;\nfn f(x: f32) -> f32 { return x; }\nstruct S { a: u32 }\n`;
    const b = `fn f(x: f32) -> f32 { return x; }\n// mine\nfn g() -> u32 { if (true) { return K; } return 0u; }\nconst K: u32 = 4u;\nvar<private> p: f32;\n`;
    const m = mergeWgsl(a, b);
    expect(m.match(/fn f\(/g)).toHaveLength(1);
    expect(m.match(/const K/g)).toHaveLength(1);
    expect(m).toContain('// mine\nfn g() -> u32 { if (true) { return K; } return 0u; }');
    expect(m).toContain('var<private> p: f32;');
    expect(m.startsWith(a)).toBe(true);
  });

  it("joins every quantized format's load and store WGSL without a repeated declaration", () => {
    const io = { headDim: 64, blockSize: 16, cacheVar: 'kv', cacheElement: 'u32' } as const;
    for (const f of QUANTIZED_KV_FORMATS) {
      const merged = mergeWgsl(f.wgslLoad(io), f.wgslStore(io));
      const names = [...merged.matchAll(/^\s*(?:fn|const)\s+(\w+)/gm)].map((x) => x[1]);
      expect(new Set(names).size, f.name).toBe(names.length);
      expect(merged, f.name).toContain('fn kv_load8');
      expect(merged, f.name).toContain('fn kv_store_chunk');
    }
  });
});
