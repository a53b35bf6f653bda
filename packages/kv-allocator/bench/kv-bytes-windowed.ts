// KV bytes an 8k-token sequence holds on models with sliding-window layers, with every layer
// keeping its whole context (what Kvasir's single block pool does today) and with sliding-window
// layers holding only the blocks their window reaches (the per-layer-group allocator the README's
// "Sliding-window layers" section designs). Layout arithmetic, not a measurement: it is the
// figure the per-group allocator has to reach. Prints one JSON object.
//   pnpm --filter @kvasir/kv-allocator exec tsx bench/kv-bytes-windowed.ts
import { kvBytesPerToken } from '../src/index.js';

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

const out = SHAPES.map((s) => {
  const blocks = Math.ceil(CONTEXT / BLOCK_SIZE);
  // A decode at position p reads keys p - window + 1 .. p: at most this many blocks.
  const windowBlocks = Math.min(blocks, Math.ceil(s.window / BLOCK_SIZE) + 1);
  const sliding = s.sliding(s.numLayers).length;
  const global = s.numLayers - sliding;
  const blockLayerBytes = perLayerToken(s) * BLOCK_SIZE;
  const full = blocks * s.numLayers * blockLayerBytes;
  const windowed = (blocks * global + windowBlocks * sliding) * blockLayerBytes;
  return {
    model: s.name,
    layers: { global, sliding },
    window: s.window,
    kv_bytes_8k_full: full,
    kv_bytes_8k_windowed: windowed,
    windowed_over_full: Number((windowed / full).toFixed(4)),
    global_layer_share: Number((global / s.numLayers).toFixed(4)),
    max_seqs_8k_in_8gib_full: Math.floor(CACHE_BYTES / full),
    max_seqs_8k_in_8gib_windowed: Math.floor(CACHE_BYTES / windowed),
  };
});
console.log(
  JSON.stringify(
    {
      context: CONTEXT,
      block_size: BLOCK_SIZE,
      kv_dtype: 'f16',
      cache_bytes: CACHE_BYTES,
      models: out,
    },
    null,
    1,
  ),
);
