import { kvBytesPerBlock } from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KvasirEngineError } from './errors.js';
import { planMemory } from './memory-plan.js';

const layout = { numLayers: 4, numKvHeads: 2, headDim: 32, blockSize: 16, bytesPerElement: 4 };

describe('planMemory', () => {
  it('gives the KV cache what weights and activations leave', () => {
    const perBlock = kvBytesPerBlock(layout);
    const plan = planMemory({
      deviceBytes: 1000 * perBlock,
      fraction: 0.5,
      weightBytes: 100 * perBlock,
      activationBytes: 50 * perBlock,
      layout,
      maxBindingBytes: 2 ** 30,
    });
    expect(plan.numBlocks).toBe(350);
    expect(plan.numTokens).toBe(350 * 16);
    expect(plan.limitedBy).toBe('memory');
  });

  it('never exceeds the budget or a layer binding, for any sizes', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 34 }),
        fc.double({ min: 0.05, max: 1, noNaN: true }),
        fc.integer({ min: 0, max: 2 ** 32 }),
        fc.integer({ min: 2 ** 16, max: 2 ** 28 }),
        (device, fraction, weights, binding) => {
          let plan: ReturnType<typeof planMemory>;
          try {
            plan = planMemory({
              deviceBytes: device,
              fraction,
              weightBytes: weights,
              activationBytes: 0,
              layout,
              maxBindingBytes: binding,
            });
          } catch (error) {
            expect(KvasirEngineError.isInstance(error)).toBe(true);
            return;
          }
          expect(plan.numBlocks).toBeGreaterThanOrEqual(1);
          expect(weights + plan.kvCacheBytes).toBeLessThanOrEqual(device * fraction);
          expect((plan.kvCacheBytes / layout.numLayers) | 0).toBeLessThanOrEqual(binding);
        },
      ),
    );
  });

  it('refuses a plan where not one block fits', () => {
    expect(() =>
      planMemory({
        deviceBytes: 1000,
        fraction: 1,
        weightBytes: 999,
        activationBytes: 0,
        layout,
        maxBindingBytes: 2 ** 30,
      }),
    ).toThrow(/KV cache/);
  });
});
