// KV bytes an 8k-token sequence holds on models with sliding-window layers, MEASURED from the
// allocator: a KvCacheManager with one group of every layer (the whole-context cache, llama.cpp's
// --swa-full) and one with the model's KV cache groups (kvGroupLayout: sliding groups release the
// blocks before their window), each running the same chunked prefill and decode; held bytes are
// the pool's used blocks times the page bytes of each layout. Then how many 8k sequences a fixed
// cache admits, one after another, until the next one's blocks do not fit. Prints one JSON object.
//   pnpm --filter @kvasir/kv-allocator exec tsx bench/kv-bytes-windowed.ts
import { KvCacheManager, kvBytesPerToken, kvGroupLayout } from '../src/index.js';

const CONTEXT = 8192;
const BLOCK_SIZE = 16;
/** The fixed cache the concurrency figure fills. */
const CACHE_BYTES = 8 * 2 ** 30;

interface Shape {
  readonly name: string;
  readonly numLayers: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly window: number;
  /** Model indices of the sliding-window layers. */
  readonly sliding: (numLayers: number) => number[];
}

// Gemma 3: of every six layers the first five slide (llama.cpp's pattern 6); gpt-oss alternates.
const gemmaPattern = (n: number) => Array.from({ length: n }, (_, l) => l).filter((l) => l % 6 < 5);
const alternating = (n: number) =>
  Array.from({ length: n }, (_, l) => l).filter((l) => l % 2 === 0);

const SHAPES: readonly Shape[] = [
  {
    name: 'gemma-3-1b',
    numLayers: 26,
    numKvHeads: 1,
    headDim: 256,
    window: 512,
    sliding: gemmaPattern,
  },
  {
    name: 'gemma-3-4b',
    numLayers: 34,
    numKvHeads: 4,
    headDim: 256,
    window: 1024,
    sliding: gemmaPattern,
  },
  {
    name: 'gemma-3-27b',
    numLayers: 62,
    numKvHeads: 16,
    headDim: 128,
    window: 1024,
    sliding: gemmaPattern,
  },
  {
    name: 'gpt-oss-20b',
    numLayers: 24,
    numKvHeads: 8,
    headDim: 64,
    window: 128,
    sliding: alternating,
  },
];

const perLayerToken = (s: Shape) =>
  kvBytesPerToken({
    numLayers: 1,
    numKvHeads: s.numKvHeads,
    headDim: s.headDim,
    blockSize: BLOCK_SIZE,
    bytesPerElement: 2,
  });

/** Prefill chunk (the scheduler's long-prefill chunk): a sliding group holds window + chunk. */
const CHUNK = 512;
/** Decode steps after the prefill, so that the measured state is a decode at 8k. */
const DECODE = 16;

/** Runs one sequence to CONTEXT tokens: chunked prefill, then decode steps. False when out of blocks. */
function runSequence(kv: KvCacheManager, id: number, peak: { blocks: number }): boolean {
  const token = (i: number) => (id * 7919 + i) % 50_000;
  const prefill = CONTEXT - DECODE;
  for (let start = 0; start < CONTEXT; ) {
    const n = start < prefill ? Math.min(CHUNK, prefill - start) : 1;
    const r = kv.allocateSlots(
      id,
      Array.from({ length: n }, (_, i) => token(start + i)),
    );
    if (!r.ok) {
      kv.free(id, { keepCached: false });
      return false;
    }
    // No prefix caching here: every block not available is used.
    peak.blocks = Math.max(peak.blocks, kv.numBlocks - kv.numAvailableBlocks());
    start += n;
  }
  return true;
}

/** Held bytes of one 8k sequence and the 8k sequences a CACHE_BYTES cache admits, for a layout. */
function measure(windows: (number | null)[], layerBlockBytes: number) {
  const layout = kvGroupLayout(windows);
  const pageBytes = layout.layersPerGroup * layerBlockBytes;
  const numBlocks = Math.floor(CACHE_BYTES / pageBytes);
  const one = new KvCacheManager({
    numBlocks,
    blockSize: BLOCK_SIZE,
    enablePrefixCaching: false,
    groups: layout.groups,
  });
  const peak = { blocks: 0 };
  runSequence(one, 0, peak);
  const held = one.stats().usedBlocks * pageBytes;
  const kv = new KvCacheManager({
    numBlocks,
    blockSize: BLOCK_SIZE,
    enablePrefixCaching: false,
    groups: layout.groups,
  });
  let seqs = 0;
  while (runSequence(kv, seqs, { blocks: 0 })) seqs++;
  return {
    groups: layout.groups.length,
    layers_per_page: layout.layersPerGroup,
    held_bytes: held,
    peak_bytes: peak.blocks * pageBytes,
    max_seqs: seqs,
  };
}

const out = SHAPES.map((s) => {
  const layerBlockBytes = perLayerToken(s) * BLOCK_SIZE;
  const sliding = new Set(s.sliding(s.numLayers));
  const windows = Array.from({ length: s.numLayers }, (_, l) => (sliding.has(l) ? s.window : null));
  const whole = measure(new Array(s.numLayers).fill(null), layerBlockBytes);
  const windowed = measure(windows, layerBlockBytes);
  const global = s.numLayers - sliding.size;
  return {
    model: s.name,
    layers: { global, sliding: sliding.size },
    window: s.window,
    kv_groups: windowed.groups,
    layers_per_page: windowed.layers_per_page,
    kv_bytes_8k_whole: whole.held_bytes,
    kv_bytes_8k_windowed: windowed.held_bytes,
    kv_bytes_per_token_8k_whole: whole.held_bytes / CONTEXT,
    kv_bytes_per_token_8k_windowed: windowed.held_bytes / CONTEXT,
    windowed_over_whole: Number((windowed.held_bytes / whole.held_bytes).toFixed(4)),
    global_layer_share: Number((global / s.numLayers).toFixed(4)),
    peak_bytes_prefill_windowed: windowed.peak_bytes,
    max_seqs_8k_whole: whole.max_seqs,
    max_seqs_8k_windowed: windowed.max_seqs,
  };
});
console.log(
  JSON.stringify(
    {
      context: CONTEXT,
      block_size: BLOCK_SIZE,
      kv_dtype: 'f16',
      prefill_chunk: CHUNK,
      measured: 'allocator used blocks x page bytes',
      cache_bytes: CACHE_BYTES,
      models: out,
    },
    null,
    1,
  ),
);
