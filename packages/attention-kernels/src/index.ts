// The f16 conversions live with the other number formats in @kvasir/quantizer; re-exported for
// the kernels' existing users.
export { f16BitsToF32, f32ToF16Bits, roundToF16 } from '@kvasir/quantizer';
export {
  type AttentionMassArgs,
  type AttentionMassBatch,
  AttentionMassPlan,
  PagedAttentionMass,
} from './attention/attention-mass.js';
export {
  MAX_ROWS_PER_WORKGROUP,
  PAGED_ATTENTION_HEAD_DIMS,
  type PagedAttentionConfig,
} from './attention/config.js';
export {
  type DenseAttentionArgs,
  denseAttention,
} from './attention/dense-reference.js';
export type { PagedMassArgs } from './attention/paged-rows-reference.js';
export { CopyBlocks, type CopyBlocksArgs } from './copy-blocks/copy-blocks.js';
export { type BlockPairs, copyBlocksReference } from './copy-blocks/copy-blocks-reference.js';
export {
  chooseDecodeSplits,
  type DecodeKernelKind,
  type PagedDecodeArgs,
  PagedDecodeAttention,
  type PagedDecodeBatch,
  type PagedDecodeOptions,
  PagedDecodePlan,
  type PagedDecodeRunArgs,
} from './decode/paged-decode.js';
export {
  type PagedDecodeCpuArgs,
  pagedDecodeAttentionCpu,
} from './decode/paged-decode-reference.js';
export {
  AttentionKernelError,
  type AttentionKernelErrorCode,
} from './errors.js';
export { f16Format, f16UnpackWgsl, f32Format } from './kv-format/float.js';
export { fp8StaticKvFormat, type StaticKvScales } from './kv-format/fp8-static.js';
export { INT4_KV_GROUP, int4KvFormat } from './kv-format/int4.js';
export { int4H32KvFormat } from './kv-format/int4-h32.js';
export { fp8E4m3KvFormat, fp8E5m2KvFormat, int8KvFormat } from './kv-format/int8-fp8.js';
export { int8H8KvFormat } from './kv-format/int8-h8.js';
export { kvFormat, QUANTIZED_KV_FORMATS, registerKvFormat } from './kv-format/registry.js';
export type { F16Unpack, KvFormat, KvWgslOptions } from './kv-format/types.js';
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
  autoPrefillKernel,
  type PagedPrefillArgs,
  PagedPrefillAttention,
  type PagedPrefillBatch,
  type PagedPrefillOptions,
  PagedPrefillPlan,
  type PagedPrefillRunArgs,
  type PrefillKernelKind,
} from './prefill/paged-prefill.js';
export {
  type PagedPrefillCpuArgs,
  pagedPrefillAttentionCpu,
} from './prefill/paged-prefill-reference.js';
export { ApplyRope, type ApplyRopeArgs } from './rope/rope.js';
export {
  applyRopeReference,
  type Llama3RopeScaling,
  type RopeConfig,
  type RopeStyle,
  type RopeTables,
  ropeInvFrequencies,
  ropeTables,
} from './rope/rope-reference.js';
export { ShiftKeys, type ShiftKeysArgs } from './rope/shift-keys.js';
export {
  type KeyShift,
  type KeyShiftConfig,
  shiftKeysReference,
} from './rope/shift-keys-reference.js';
export { WriteKvCache, type WriteKvCacheArgs } from './write-kv-cache/write-kv-cache.js';
export { writeKvCacheReference } from './write-kv-cache/write-kv-cache-reference.js';
