import { KvAllocatorError } from './errors.js';
import type { KvLayout } from './types.js';

function check(layout: KvLayout): void {
  const ints: (keyof KvLayout)[] = ['numLayers', 'numKvHeads', 'headDim', 'blockSize'];
  for (const key of ints) {
    const v = layout[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
      throw new KvAllocatorError('INVALID_ARGUMENT', `layout.${key} must be a positive integer`, {
        details: { [key]: v },
      });
    }
  }
  if (!(layout.bytesPerElement > 0) || !Number.isFinite(layout.bytesPerElement)) {
    throw new KvAllocatorError('INVALID_ARGUMENT', 'layout.bytesPerElement must be positive', {
      details: { bytesPerElement: layout.bytesPerElement },
    });
  }
  const scale = layout.scaleBytesPerTokenHead ?? 0;
  if (!(scale >= 0) || !Number.isFinite(scale)) {
    throw new KvAllocatorError('INVALID_ARGUMENT', 'layout.scaleBytesPerTokenHead must be ≥ 0', {
      details: { scaleBytesPerTokenHead: scale },
    });
  }
}

/**
 * KV-cache bytes one token occupies across all layers:
 * 2 (K and V) × layers × kv heads × (head dim × bytes per element + scale bytes).
 *
 * @example OPT-13B (40 layers, 40 heads of 128, f16): 2 × 40 × 40 × 128 × 2 = 819,200 B ≈ 800 KB.
 * @example Llama-2-70B with GQA (80 layers, 8 KV heads of 128, f16): 327,680 B = 320 KiB.
 * @throws {KvAllocatorError} INVALID_ARGUMENT for a malformed layout.
 */
export function kvBytesPerToken(layout: KvLayout): number {
  check(layout);
  const perHead = layout.headDim * layout.bytesPerElement + (layout.scaleBytesPerTokenHead ?? 0);
  return 2 * layout.numLayers * layout.numKvHeads * perHead;
}

/**
 * KV-cache bytes of one block (`blockSize` tokens of every layer).
 * @throws {KvAllocatorError} INVALID_ARGUMENT for a malformed layout.
 */
export function kvBytesPerBlock(layout: KvLayout): number {
  return kvBytesPerToken(layout) * layout.blockSize;
}

/**
 * How many whole blocks fit in `bytes` of KV memory.
 * @throws {KvAllocatorError} INVALID_ARGUMENT for a malformed layout or negative bytes.
 */
export function blocksThatFit(layout: KvLayout, bytes: number): number {
  if (!(bytes >= 0)) {
    throw new KvAllocatorError('INVALID_ARGUMENT', 'bytes must be ≥ 0', { details: { bytes } });
  }
  return Math.floor(bytes / kvBytesPerBlock(layout));
}
