export { CopyBlocks, type CopyBlocksArgs } from './copy-blocks.js';
export { type BlockPairs, copyBlocksReference } from './copy-blocks-reference.js';
export {
  AttentionKernelError,
  type AttentionKernelErrorCode,
} from './errors.js';
export {
  f16BitsToF32,
  f16Format,
  f32Format,
  f32ToF16Bits,
  type KvFormat,
  type KvWgslOptions,
  kvFormat,
  registerKvFormat,
  roundToF16,
} from './kv-format.js';
export {
  blocksInCache,
  cacheBytes,
  type KvCacheConfig,
  type KvCacheLayout,
  kRowOffset,
  kvCacheLayout,
  slabOffset,
  vRowOffset,
} from './layout.js';
export { ApplyRope, type ApplyRopeArgs } from './rope.js';
export {
  applyRopeReference,
  type Llama3RopeScaling,
  type RopeConfig,
  type RopeStyle,
  type RopeTables,
  ropeInvFrequencies,
  ropeTables,
} from './rope-reference.js';
export { WriteKvCache, type WriteKvCacheArgs } from './write-kv-cache.js';
export { writeKvCacheReference } from './write-kv-cache-reference.js';
