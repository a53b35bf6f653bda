export { CopyBlocks, type CopyBlocksArgs } from './copy-blocks.js';
export { type BlockPairs, copyBlocksReference } from './copy-blocks-reference.js';
export { type DenseAttentionArgs, denseAttention } from './dense-reference.js';
export {
  AttentionKernelError,
  type AttentionKernelErrorCode,
} from './errors.js';
export {
  type F16Unpack,
  f16BitsToF32,
  f16Format,
  f16UnpackWgsl,
  f32Format,
  f32ToF16Bits,
  type KvFormat,
  type KvWgslOptions,
  kvFormat,
  registerKvFormat,
  roundToF16,
} from './kv-format.js';
export {
  fp8E4m3KvFormat,
  fp8E5m2KvFormat,
  fp8StaticKvFormat,
  INT4_KV_GROUP,
  int4KvFormat,
  int8KvFormat,
  QUANTIZED_KV_FORMATS,
  type StaticKvScales,
} from './kv-format-quantized.js';
export { int4H32KvFormat, int8H8KvFormat } from './kv-format-quantized-rotated.js';
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
export {
  chooseDecodeSplits,
  type DecodeKernelKind,
  type PagedDecodeArgs,
  PagedDecodeAttention,
  type PagedDecodeBatch,
  type PagedDecodeOptions,
  PagedDecodePlan,
  type PagedDecodeRunArgs,
} from './paged-decode.js';
export { type PagedDecodeCpuArgs, pagedDecodeAttentionCpu } from './paged-decode-reference.js';
export {
  MAX_ROWS_PER_WORKGROUP,
  PAGED_ATTENTION_HEAD_DIMS,
  type PagedAttentionConfig,
} from './paged-decode-validation.js';
export {
  autoPrefillKernel,
  type PagedPrefillArgs,
  PagedPrefillAttention,
  type PagedPrefillBatch,
  type PagedPrefillOptions,
  PagedPrefillPlan,
  type PagedPrefillRunArgs,
  type PrefillKernelKind,
} from './paged-prefill.js';
export { type PagedPrefillCpuArgs, pagedPrefillAttentionCpu } from './paged-prefill-reference.js';
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
