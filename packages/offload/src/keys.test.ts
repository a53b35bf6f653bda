import type { KvLayout } from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { OffloadError } from './errors.js';
import { isBlockHash, type KvNamespaceSpec, kvNamespace, kvNamespaceAsync } from './keys.js';

const base: KvNamespaceSpec = {
  modelId: 'meta-llama/Llama-3.1-8B',
  weightDigest: 'sha256:abcd',
  kvDtype: 'f16',
  blockSize: 16,
  numLayers: 32,
  numKvHeads: 8,
  headDim: 128,
};

describe('kvNamespace', () => {
  it('is a 32-hex fingerprint, stable for equal specs regardless of property order', () => {
    const a = kvNamespace(base);
    const b = kvNamespace({
      headDim: 128,
      numKvHeads: 8,
      numLayers: 32,
      blockSize: 16,
      kvDtype: 'f16',
      weightDigest: 'sha256:abcd',
      modelId: 'meta-llama/Llama-3.1-8B',
    });
    expect(isBlockHash(a)).toBe(true);
    expect(a).toBe(b);
    expect(kvNamespace({ ...base, scaleLayout: 'none', formatVersion: 1 })).toBe(a);
  });

  it('changes when any field that changes the bytes changes', () => {
    const variants: KvNamespaceSpec[] = [
      { ...base, modelId: 'other' },
      { ...base, weightDigest: 'sha256:abce' },
      { ...base, kvDtype: 'int8' },
      { ...base, scaleLayout: 'per-slab-f32' },
      { ...base, blockSize: 32 },
      { ...base, numLayers: 33 },
      { ...base, numKvHeads: 4 },
      { ...base, headDim: 64 },
      { ...base, formatVersion: 2 },
      { ...base, extra: { tpRank: 1 } },
      { ...base, bytesPerElement: 2 },
      { ...base, bytesPerElement: 2, scaleBytesPerTokenHead: 4 },
    ];
    const all = new Set([kvNamespace(base), ...variants.map(kvNamespace)]);
    expect(all.size).toBe(variants.length + 1);
  });

  it('accepts a spread KvLayout from the allocator', () => {
    const layout: KvLayout = {
      numLayers: 32,
      numKvHeads: 8,
      headDim: 128,
      blockSize: 16,
      bytesPerElement: 1,
    };
    const a = kvNamespace({ ...layout, modelId: 'm', weightDigest: 'w', kvDtype: 'int8' });
    const b = kvNamespace({
      ...layout,
      bytesPerElement: 2,
      modelId: 'm',
      weightDigest: 'w',
      kvDtype: 'int8',
    });
    expect(isBlockHash(a)).toBe(true);
    expect(a).not.toBe(b);
  });

  it('never collides for distinct numeric layouts (property)', () => {
    fc.assert(
      fc.property(
        fc.tuple(fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 64 })),
        fc.tuple(fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 64 })),
        ([l1, h1], [l2, h2]) => {
          const a = kvNamespace({ ...base, numLayers: l1, numKvHeads: h1 });
          const b = kvNamespace({ ...base, numLayers: l2, numKvHeads: h2 });
          return (a === b) === (l1 === l2 && h1 === h2);
        },
      ),
    );
  });

  it('refuses malformed specs with INVALID_OPTIONS', () => {
    for (const bad of [
      { ...base, modelId: '' },
      { ...base, blockSize: 0 },
      { ...base, headDim: 1.5 },
      { ...base, numLayers: Number.NaN },
      { ...base, extra: { x: Number.POSITIVE_INFINITY } },
    ]) {
      let err: unknown;
      try {
        kvNamespace(bad);
      } catch (e) {
        err = e;
      }
      expect(OffloadError.isInstance(err)).toBe(true);
      expect((err as OffloadError).code).toBe('INVALID_OPTIONS');
    }
  });
});

describe('isBlockHash', () => {
  it('accepts 32 lowercase hex characters only', () => {
    expect(isBlockHash('0123456789abcdef0123456789abcdef')).toBe(true);
    expect(isBlockHash('0123456789ABCDEF0123456789abcdef')).toBe(false);
    expect(isBlockHash('0123456789abcdef0123456789abcde')).toBe(false);
    expect(isBlockHash('../../etc/passwd')).toBe(false);
    expect(isBlockHash(42)).toBe(false);
  });

  it('kvNamespaceAsync (Web Crypto, for browsers) gives the same fingerprint, and refuses the same specs', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          modelId: fc.string({ minLength: 1 }),
          weightDigest: fc.string({ minLength: 1 }),
          kvDtype: fc.constantFrom('f32', 'f16', 'int8'),
          blockSize: fc.integer({ min: 1, max: 256 }),
          numLayers: fc.integer({ min: 1, max: 128 }),
          numKvHeads: fc.integer({ min: 1, max: 64 }),
          headDim: fc.integer({ min: 1, max: 256 }),
          extra: fc.dictionary(fc.string(), fc.oneof(fc.string(), fc.integer())),
        }),
        async (spec) => {
          expect(await kvNamespaceAsync(spec)).toBe(kvNamespace(spec));
        },
      ),
    );
    await expect(kvNamespaceAsync({ ...base, blockSize: 0 })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
    });
  });
});
