// Prefix caching across KV cache groups: the longest hit every group can serve (a full group
// needs every block, a sliding group the blocks its window reaches), and the checks on a
// grouped prefix before a sequence adopts it.
import type { BlockPool } from './block-pool.js';
import { KvAllocatorError } from './errors.js';
import { hashBlock, rootHash } from './hash.js';
import { blocksBeforeWindow, groupExtraKeys, groupHitBlocks, HOLE } from './kv-groups.js';
import type { BlockHash, BlockId, CachedPrefix, CachedPrefixGroup, ExtraKeys } from './types.js';

/** What a grouped prefix lookup runs over. */
export interface GroupLookup {
  readonly pool: BlockPool;
  readonly seed: string;
  readonly blockSize: number;
  readonly windows: readonly (number | null)[];
}

/**
 * The longest prefix of `tokens`, at most `maxBlocks` full blocks, that every group can serve.
 * Shortening the hit moves a sliding group's window, so the groups are asked again until the
 * length holds for all (it only decreases, so this ends).
 */
export function findGroupPrefix(
  k: GroupLookup,
  tokens: ArrayLike<number>,
  extraKeys: ExtraKeys | undefined,
  maxBlocks: number,
): CachedPrefix {
  const bs = k.blockSize;
  const full = Math.min(Math.floor(tokens.length / bs), maxBlocks);
  const hashes: BlockHash[][] = [];
  const found: (BlockId | undefined)[][] = [];
  for (let g = 0; g < k.windows.length; g++) {
    let parent = rootHash(k.seed, groupExtraKeys(extraKeys, g));
    const hs: BlockHash[] = [];
    const bl: (BlockId | undefined)[] = [];
    for (let i = 0; i < full; i++) {
      parent = hashBlock(parent, tokens, i * bs, bs);
      hs.push(parent);
      bl.push(k.pool.lookup(parent));
    }
    hashes.push(hs);
    found.push(bl);
  }
  let m = full;
  for (let changed = true; changed && m > 0; ) {
    changed = false;
    for (let g = 0; g < k.windows.length; g++) {
      const cached = found[g]!.map((b) => b !== undefined);
      const hit = groupHitBlocks(cached, m, k.windows[g]!, bs);
      if (hit < m) {
        m = hit;
        changed = true;
      }
    }
  }
  const groups: CachedPrefixGroup[] = k.windows.map((w, g) => {
    const lo = blocksBeforeWindow(m * bs, w, bs);
    return {
      blocks: found[g]!.slice(0, m).map((b, i) => (i < lo ? HOLE : (b as BlockId))),
      hashes: hashes[g]!.slice(0, m),
    };
  });
  const g0 = groups[0]!;
  return { numTokens: m * bs, blocks: g0.blocks, hashes: g0.hashes, groups };
}

/** Whether every block of every group of `prefix` still holds the hash it was found with. */
export function groupPrefixValid(pool: BlockPool, prefix: CachedPrefix): boolean {
  return (prefix.groups ?? []).every(
    (g) =>
      g.blocks.length === g.hashes.length &&
      g.blocks.every(
        (b, i) =>
          b === HOLE ||
          (Number.isInteger(b) && b >= 0 && b < pool.numBlocks && pool.hashOf(b) === g.hashes[i]),
      ),
  );
}

/**
 * @throws {KvAllocatorError} INVALID_ARGUMENT for a prefix that is not a grouped one of this
 *   manager (a plain prefix with blocks, one sliced by hand, a wrong group count or length);
 *   STALE_PREFIX when one of its blocks no longer holds its content.
 */
export function checkGroupPrefix(
  pool: BlockPool,
  blockSize: number,
  numGroups: number,
  prefix: CachedPrefix,
): void {
  if (prefix.numTokens === 0 && prefix.blocks.length === 0 && prefix.groups === undefined) return;
  const groups = prefix.groups;
  const m = prefix.numTokens / blockSize;
  if (
    groups === undefined ||
    groups.length !== numGroups ||
    !Number.isInteger(m) ||
    groups.some((g) => g.blocks.length !== m || g.hashes.length !== m)
  ) {
    throw new KvAllocatorError(
      'INVALID_ARGUMENT',
      `a prefix for a manager of ${numGroups} KV groups must come from its findCachedPrefix (one part per group, ${String(m)} blocks each; pass maxBlocks there rather than slicing)`,
    );
  }
  if (!groupPrefixValid(pool, prefix)) {
    throw new KvAllocatorError(
      'STALE_PREFIX',
      'a prefix block no longer holds the cached content (evicted since findCachedPrefix?)',
    );
  }
}
