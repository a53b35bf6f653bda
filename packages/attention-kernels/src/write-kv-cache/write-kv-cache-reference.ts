import { AttentionKernelError } from '../errors.js';
import type { KvCacheLayout } from '../layout.js';

/**
 * CPU twin of the cache writer: encode each token's K and V rows (`[numTokens][numKvHeads]
 * [headDim]` f32) into slot `slotMapping[token]` of `cache` (one layer, the README's layout);
 * slot -1 skips the token. Produces the same words as the GPU kernel.
 *
 * @throws {AttentionKernelError} `SHAPE_MISMATCH` for inconsistent lengths,
 *   `SLOT_OUT_OF_RANGE` for a slot outside the cache; nothing is written then.
 */
export function writeKvCacheReference(
  layout: KvCacheLayout,
  cache: Uint32Array,
  key: Float32Array,
  value: Float32Array,
  slotMapping: Int32Array,
): void {
  const { numKvHeads: H, headDim: D, blockSize: B } = layout;
  const numTokens = slotMapping.length;
  const rowFloats = numTokens * H * D;
  if (key.length !== rowFloats || value.length !== rowFloats) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `key/value have ${key.length}/${value.length} floats; ${numTokens} tokens × ${H} heads × ${D} need ${rowFloats}.`,
    );
  }
  if (cache.length % layout.blockWords !== 0) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `cache has ${cache.length} words, not a multiple of ${layout.blockWords} per block.`,
    );
  }
  const numSlots = (cache.length / layout.blockWords) * B;
  checkSlots(slotMapping, numTokens, numSlots);
  for (let t = 0; t < numTokens; t++) {
    const slot = slotMapping[t]!;
    if (slot < 0) continue;
    const block = Math.floor(slot / B);
    const off = slot % B;
    for (let h = 0; h < H; h++) {
      const src = (t * H + h) * D;
      const slab = block * layout.blockWords + 2 * h * layout.slabWords;
      layout.format.encodeRow(cache, slab, off, key.subarray(src, src + D), B);
      layout.format.encodeRow(cache, slab + layout.slabWords, off, value.subarray(src, src + D), B);
    }
  }
}

/**
 * Check a host slot mapping: `numTokens` entries, each -1 or in `[0, numSlots)`, no slot twice.
 *
 * @throws {AttentionKernelError} `SHAPE_MISMATCH`, `SLOT_OUT_OF_RANGE` or `INVALID_ARGUMENT`
 *   (a slot written twice, which would race on the GPU).
 */
export function checkSlots(slotMapping: Int32Array, numTokens: number, numSlots: number): void {
  if (slotMapping.length !== numTokens) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `slotMapping has ${slotMapping.length} entries for ${numTokens} tokens.`,
    );
  }
  const seen = new Set<number>();
  for (let t = 0; t < numTokens; t++) {
    const slot = slotMapping[t]!;
    if (slot === -1) continue;
    if (slot < 0 || slot >= numSlots) {
      throw new AttentionKernelError(
        'SLOT_OUT_OF_RANGE',
        `slotMapping[${t}] = ${slot} is outside the cache's ${numSlots} slots (use -1 to skip a token).`,
        { details: { token: t, slot, numSlots } },
      );
    }
    if (seen.has(slot)) {
      throw new AttentionKernelError('INVALID_ARGUMENT', `slot ${slot} is written by two tokens.`, {
        details: { token: t, slot },
      });
    }
    seen.add(slot);
  }
}
