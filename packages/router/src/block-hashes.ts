import { type BlockHash, type ExtraKeys, hashBlock, rootHash } from '@kvasir/kv-allocator';

/**
 * The root of a Kvasir engine's hash chain for a model: `kvasir serve` seeds every chain with
 * `rootHash('kvasir', { modelId })`, `modelId` being the name the model is served under (what
 * clients put in `model`). A router must start from the same root to find the replicas' blocks.
 */
export function engineChainRoot(modelId: string, extraKeys?: ExtraKeys): BlockHash {
  return rootHash('kvasir', { ...extraKeys, modelId });
}

/**
 * The hashes of a prompt's full blocks, chained as the engine chains them: block i hashes its
 * parent (the root for the first) and its `blockSize` token ids (`hashBlock`). A partial last
 * block has no hash (the engine does not cache it).
 * @throws KvAllocatorError `INVALID_TOKEN` for a token id that is not a u32 integer.
 */
export function promptBlockHashes(
  tokens: ArrayLike<number>,
  blockSize: number,
  root: BlockHash,
): BlockHash[] {
  const out: BlockHash[] = [];
  let parent = root;
  for (let start = 0; start + blockSize <= tokens.length; start += blockSize) {
    parent = hashBlock(parent, tokens, start, blockSize);
    out.push(parent);
  }
  return out;
}
