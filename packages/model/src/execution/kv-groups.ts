// KV cache groups on the model side (`@kvasir/kv-allocator`'s `kvGroupLayout`): the layers'
// KV lives in `layersPerGroup` layer buffers of pages shared by the groups; layer `l` writes
// and reads buffer `layerSlot[l]` through the slot mapping and block tables of group
// `layerGroup[l]`. A sliding-window group's tables hold -1 for blocks before the window.
import { layerWindow, type ModelConfig } from '../config.js';
import { ModelError } from '../errors.js';

/** How the layers' KV splits into groups (`LoadModelOptions.kvGroups`). */
export interface KvGroups {
  /** Layer buffers: every group's page holds this many layers. */
  readonly layersPerGroup: number;
  /** Each model layer's group. */
  readonly layerGroup: readonly number[];
  /** Each model layer's buffer (its place in its group's page). */
  readonly layerSlot: readonly number[];
  /** Each group's window (null: full attention); group 0 first. */
  readonly windows: readonly (number | null)[];
}

/** One group's slots and block tables in a `ForwardPlan` (`kvGroups`, groups 1...). */
export interface ForwardKvGroup {
  /** Cache slot of each token in this group's pages, -1 to skip the write. */
  readonly slotMapping: Int32Array;
  /** Each row's block table in this group, logical order; -1 for a block before the window. */
  readonly blockTables: readonly ArrayLike<number>[];
}

/** A group's part of a `NormalizedPlan`, in the flat form kernels take. */
export interface NormalizedKvGroup {
  readonly slotMapping: Int32Array;
  /** `[numSeqs][maxBlocksPerSeq]`, padded with 0; a hole is 0xffffffff (never read). */
  readonly blockTables: Uint32Array;
}

function bad(message: string, details?: Record<string, unknown>): never {
  throw new ModelError('INVALID_ARGUMENT', message, details ? { details } : undefined);
}

/**
 * Checks `g` against the model: one group and one buffer per layer, every (group, buffer) pair
 * one layer's, and each group's window the window of its layers.
 * @throws {ModelError} `INVALID_ARGUMENT` naming the first inconsistency.
 */
export function checkKvGroups(c: ModelConfig, g: KvGroups): void {
  const n = c.numLayers;
  const lpg = g.layersPerGroup;
  if (!(Number.isInteger(lpg) && lpg >= 1 && lpg <= n)) {
    bad(`kvGroups.layersPerGroup must be an integer in [1, ${n}], got ${String(lpg)}`);
  }
  if (g.layerGroup?.length !== n || g.layerSlot?.length !== n) {
    bad(`kvGroups must give a group and a buffer for each of the ${n} layers`);
  }
  const seen = new Set<string>();
  for (let l = 0; l < n; l++) {
    const group = g.layerGroup[l] as number;
    const slot = g.layerSlot[l] as number;
    if (!(Number.isInteger(group) && group >= 0 && group < g.windows.length)) {
      bad(`kvGroups: layer ${l} has group ${group}, not one of the ${g.windows.length}`);
    }
    if (!(Number.isInteger(slot) && slot >= 0 && slot < lpg)) {
      bad(`kvGroups: layer ${l} has buffer ${slot}, outside [0, ${lpg})`);
    }
    const key = `${group}/${slot}`;
    if (seen.has(key)) bad(`kvGroups: layer ${l} shares buffer ${slot} of group ${group}`);
    seen.add(key);
    const want = layerWindow(c, l);
    if (g.windows[group] !== want) {
      bad(
        `kvGroups: layer ${l} attends over ${want === null ? 'the whole context' : `a window of ${want}`} but its group ${group} has window ${String(g.windows[group])}`,
        { layer: l, group },
      );
    }
  }
}

/** Buffer and group of model layer `l` (one buffer per layer without groups). */
export function layerKv(
  groups: KvGroups | undefined,
  l: number,
): { buffer: number; group: number } {
  if (!groups) return { buffer: l, group: 0 };
  return { buffer: groups.layerSlot[l] as number, group: groups.layerGroup[l] as number };
}
