import { KvAllocatorError } from './errors.js';
import type { KvGroupSpec } from './types.js';

/**
 * How a model's layers split into KV cache groups of equal page size: a physical block is one
 * page of one group, `blockSize` tokens of `layersPerGroup` layers. Layer `l` belongs to group
 * `layerGroup[l]` and takes place `layerSlot[l]` in its group's page, so an executor keeps
 * `layersPerGroup` layer buffers of `numBlocks` pages, shared by the groups.
 */
export interface KvGroupLayout {
  /** Layers of one page (a group with fewer layers leaves the rest of its page unused). */
  readonly layersPerGroup: number;
  /** The groups' windows, full-attention groups first (`KvCacheManagerOptions.groups`). */
  readonly groups: readonly KvGroupSpec[];
  /** Each model layer's group. */
  readonly layerGroup: readonly number[];
  /** Each model layer's place in its group's page (its layer buffer). */
  readonly layerSlot: readonly number[];
}

/**
 * The KV cache groups of a model whose layer `l` attends over `layerWindows[l]` keys (null:
 * the whole context). Layers of equal window form groups of `layersPerGroup`, the size of the
 * smallest such kind (vLLM's choice: Gemma 3 1B, 4 global and 22 sliding layers, gets one
 * global group and six sliding groups of 4, the last padded). One kind: one group of all.
 * @throws {KvAllocatorError} INVALID_ARGUMENT for no layers or a window that is not a
 *   positive integer or null.
 */
export function kvGroupLayout(layerWindows: readonly (number | null)[]): KvGroupLayout {
  if (layerWindows.length === 0) {
    throw new KvAllocatorError('INVALID_ARGUMENT', 'a KV group layout needs at least one layer');
  }
  const kinds = new Map<number | null, number[]>([[null, []]]);
  for (const [l, w] of layerWindows.entries()) {
    if (w !== null && !(Number.isInteger(w) && w >= 1)) {
      throw new KvAllocatorError(
        'INVALID_ARGUMENT',
        `layer ${l}: window must be a positive integer or null, got ${String(w)}`,
      );
    }
    if (!kinds.has(w)) kinds.set(w, []);
    kinds.get(w)!.push(l);
  }
  if (kinds.get(null)!.length === 0) kinds.delete(null);
  const sizes = [...kinds.values()].map((ls) => ls.length);
  const layersPerGroup = Math.min(...sizes);
  const groups: KvGroupSpec[] = [];
  const layerGroup: number[] = new Array(layerWindows.length);
  const layerSlot: number[] = new Array(layerWindows.length);
  for (const [window, layers] of kinds) {
    for (let start = 0; start < layers.length; start += layersPerGroup) {
      const g = groups.length;
      groups.push({ window });
      layers.slice(start, start + layersPerGroup).forEach((l, i) => {
        layerGroup[l] = g;
        layerSlot[l] = i;
      });
    }
  }
  return { layersPerGroup, groups, layerGroup, layerSlot };
}
