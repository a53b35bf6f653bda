import type { ModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import { normWeightShift } from '../families/gemma3.js';
import type { CheckpointReader } from '../formats/checkpoint-reader.js';
import type { LoadProgress } from '../formats/checkpoint-stream.js';
import { decodeToF32, isBlockDtype } from '../formats/dtype.js';
import {
  DEFAULT_INT8_GROUP_SIZE,
  isGgmlFormat,
  packable,
  packRows,
  type StoredFormat,
  type StoredWeight,
  type WeightFormat,
  weightRowBytes,
  weightWords,
} from '../kernels/weight-format.js';

/** Where packed rows of one matrix go (a host array or a GPU buffer). */
export interface WeightSink<W> {
  /**
   * Stores packed rows starting at row `rowStart` (with their int8 scales). For GGML block
   * formats `data` holds whole rows of blocks from byte 0, zero-padded to a whole word, and
   * goes at byte `rowStart · weightRowBytes(format, cols)` (always a multiple of 4).
   */
  write(rowStart: number, data: Uint32Array, scales: Float32Array | undefined): void;
  /** The finished weight. */
  finish(): W;
}

/**
 * Allocates the storage of one packed matrix. `F` is what the backend can store: the dense
 * formats ({@link loadWeights}) or GGML blocks as well ({@link loadBlockWeights}).
 */
export type WeightAllocator<W, F extends StoredFormat = WeightFormat> = (
  name: string,
  rows: number,
  cols: number,
  format: F,
  groupSize: number,
) => WeightSink<W>;

/** One transformer layer's weights: matrices as `W`, norms and biases on the host. */
export interface LayerWeights<W> {
  readonly inputNorm: Float32Array;
  readonly q: W;
  readonly k: W;
  readonly v: W;
  readonly qBias: Float32Array | undefined;
  readonly kBias: Float32Array | undefined;
  readonly vBias: Float32Array | undefined;
  /** Per-head RMSNorm weights of Q and K (`headDim` each), when the config has `qkNorm`. */
  readonly qNorm: Float32Array | undefined;
  readonly kNorm: Float32Array | undefined;
  readonly o: W;
  readonly oBias: Float32Array | undefined;
  /** The norm before the MLP (Gemma's `pre_feedforward_layernorm`). */
  readonly postNorm: Float32Array;
  /**
   * With the config's `sandwichNorms` (Gemma), the norms of attention's and of the MLP's
   * outputs before their residual adds.
   */
  readonly attnOutNorm?: Float32Array | undefined;
  readonly mlpOutNorm?: Float32Array | undefined;
  /**
   * gate and up projections interleaved by row (row 2j = gate_j, 2j+1 = up_j); undefined in a
   * mixture-of-experts layer, whose experts are in `moe`.
   */
  readonly gateUp: W | undefined;
  readonly down: W | undefined;
  /** A mixture-of-experts layer's router and experts (configs with `moe`). */
  readonly moe?: MoeLayerWeights<W>;
  /** One attention-sink logit per query head (configs with `attentionSinks`). */
  readonly sinks?: Float32Array;
}

/** One expert of a mixture of experts: as a dense MLP, with gpt-oss's biases when it has them. */
export interface ExpertWeights<W> {
  readonly gateUp: W;
  readonly down: W;
  /** gate and up biases interleaved as `gateUp`'s rows (row 2j = gate_j, 2j+1 = up_j). */
  readonly gateUpBias?: Float32Array;
  readonly downBias?: Float32Array;
}

/** The MLP of a mixture-of-experts layer. */
export interface MoeLayerWeights<W> {
  /** Router logits `[numExperts][hiddenSize]`. */
  readonly router: W;
  /** The router's bias (gpt-oss), `[numExperts]`. */
  readonly routerBias?: Float32Array;
  /** Each expert's gate and up interleaved as a dense layer's `gateUp`, and its `down`. */
  readonly experts: readonly ExpertWeights<W>[];
}

/** All weights of a model. `lmHead` is the embedding object itself when tied. */
export interface ModelWeights<W> {
  readonly embed: W;
  readonly layers: readonly LayerWeights<W>[];
  readonly finalNorm: Float32Array;
  readonly lmHead: W;
}

/**
 * The weights one shard of a model split by layer holds: its layers, the embedding on the
 * first shard (and on the last when the head is tied to it), the final norm and head on the
 * last. A whole model is the shard holding every layer.
 */
export interface ShardWeights<W> {
  readonly embed: W | undefined;
  /** The shard's layers, its first layer at index 0. */
  readonly layers: readonly LayerWeights<W>[];
  readonly finalNorm: Float32Array | undefined;
  readonly lmHead: W | undefined;
}

/** Options of {@link loadWeights}. */
export interface LoadWeightsOptions {
  /** Quantize matrices to int8 with group scales at load. */
  readonly weightQuant?: 'int8' | undefined;
  /** int8 group size along the input dimension (default 32). */
  readonly groupSize?: number;
  /**
   * Storage of matrices: `'auto'` (default) keeps f32 tensors in f32, GGML block tensors
   * (Q8_0, Q4_K, ...) as their blocks under {@link loadBlockWeights}, and stores every other
   * dtype (f16, bf16, and GGML blocks under {@link loadWeights}) as f16.
   */
  readonly weightDtype?: 'auto' | 'f32' | 'f16';
  readonly progress?: LoadProgress | undefined;
  /** Upper bound on one read chunk (bytes). */
  readonly maxChunkBytes?: number;
  /** Elements decoded per pack-and-write batch (default 2^20): bounds host memory. */
  readonly maxBatchElements?: number;
}

/** Layers `[firstLayer, firstLayer + numLayers)` of a model, for {@link loadShardWeights}. */
export interface WeightSlice {
  readonly firstLayer: number;
  readonly numLayers: number;
}

// Rows decoded per pack-and-write batch: bounded host memory whatever the matrix size.
const TARGET_BATCH_ELEMENTS = 1 << 20;

/**
 * Streams a checkpoint's weights into packed storage, chunk by chunk: no tensor is ever held
 * whole (beyond one batch of rows), so multi-gigabyte files load in bounded memory. GGML
 * block tensors (a GGUF file's Q4_K, Q6_K, ...) are dequantized to f16 (or to the asked
 * `weightDtype` / int8): for backends whose kernels read dense formats only.
 *
 * @throws {ModelError} `INVALID_CONFIG` when a matrix cannot be packed in the asked format
 *   (columns not a multiple of 4, or of the int8 group size); reader errors as they come.
 */
export function loadWeights<W>(
  reader: CheckpointReader,
  allocate: WeightAllocator<W>,
  options: LoadWeightsOptions = {},
): Promise<ModelWeights<W>> {
  return load(reader, allocate as WeightAllocator<W, StoredFormat>, options, false).then(whole);
}

/**
 * {@link loadWeights} for backends that multiply straight from GGML blocks: with the default
 * `weightDtype: 'auto'`, a block tensor keeps its file bytes and its type as the format
 * (gate and up of one layer in two different block types are the exception: they are
 * interleaved into one matrix, so both go to f16).
 *
 * @throws {ModelError} as {@link loadWeights}.
 */
export function loadBlockWeights<W>(
  reader: CheckpointReader,
  allocate: WeightAllocator<W, StoredFormat>,
  options: LoadWeightsOptions = {},
): Promise<ModelWeights<W>> {
  return load(reader, allocate, options, true).then(whole);
}

/**
 * {@link loadBlockWeights} for one shard of a model split by layer: only the tensors the slice
 * runs are read (see {@link ShardWeights}).
 * @throws {ModelError} as {@link loadWeights}.
 */
export function loadShardWeights<W>(
  reader: CheckpointReader,
  allocate: WeightAllocator<W, StoredFormat>,
  options: LoadWeightsOptions,
  slice: WeightSlice | undefined,
): Promise<ShardWeights<W>> {
  return load(reader, allocate, options, true, slice);
}

function whole<W>(w: ShardWeights<W>): ModelWeights<W> {
  const { embed, finalNorm, lmHead, layers } = w;
  if (embed === undefined || finalNorm === undefined || lmHead === undefined) {
    throw new ModelError('INVALID_ARGUMENT', 'a whole model needs its embedding and head');
  }
  return { embed, layers, finalNorm, lmHead };
}

/**
 * Whether a tensor belongs to the shard: its layers' tensors, the embedding on the first (and
 * on the last when the head is tied to it), the final norm and head on the last.
 */
export function shardHoldsTensor(
  c: ModelConfig,
  slice: WeightSlice | undefined,
  name: string,
): boolean {
  const first = slice?.firstLayer ?? 0;
  const count = slice?.numLayers ?? c.numLayers;
  const head = first + count === c.numLayers;
  const layer = /^model\.layers\.(\d+)\./.exec(name);
  if (layer) {
    const l = Number(layer[1]);
    return l >= first && l < first + count;
  }
  if (name === 'model.embed_tokens.weight') return first === 0 || (head && c.tieWordEmbeddings);
  if (name === 'lm_head.weight') return head && !c.tieWordEmbeddings;
  if (name === 'model.norm.weight') return head;
  return first === 0;
}

async function load<W>(
  reader: CheckpointReader,
  allocate: WeightAllocator<W, StoredFormat>,
  options: LoadWeightsOptions,
  keepBlocks: boolean,
  slice?: WeightSlice,
): Promise<ShardWeights<W>> {
  const c = reader.config;
  const first = slice?.firstLayer ?? 0;
  const count = slice?.numLayers ?? c.numLayers;
  const embeds = first === 0;
  const heads = first + count === c.numLayers;
  const groupSize = options.groupSize ?? DEFAULT_INT8_GROUP_SIZE;
  const progress = options.progress;
  const names = [...reader.tensors.keys()].filter(
    (n) => (n !== 'lm_head.weight' || !c.tieWordEmbeddings) && shardHoldsTensor(c, slice, n),
  );
  progress?.start(
    names.reduce((a, n) => a + reader.tensor(n).byteLength, 0),
    names.length,
  );
  const formatOf = (name: string, cols: number): StoredFormat => {
    const dtype = reader.tensor(name).dtype;
    let f: StoredFormat;
    if (options.weightQuant === 'int8') f = 'int8';
    else if (options.weightDtype === 'f32' || options.weightDtype === 'f16')
      f = options.weightDtype;
    else if (keepBlocks && isBlockDtype(dtype)) return dtype;
    else f = dtype === 'F32' ? 'f32' : 'f16';
    if (!packable(f, cols, groupSize)) {
      throw new ModelError(
        'INVALID_CONFIG',
        `tensor ${name}: ${cols} columns cannot be stored as ${f}${f === 'int8' ? ` with group size ${groupSize}` : ''} (need a multiple of ${f === 'int8' ? groupSize : 4})`,
        { details: { tensor: name, cols, format: f } },
      );
    }
    return f;
  };
  const batchElements = options.maxBatchElements ?? TARGET_BATCH_ELEMENTS;
  const readOpts =
    options.maxChunkBytes === undefined ? undefined : { maxChunkBytes: options.maxChunkBytes };

  async function matrix(name: string): Promise<W> {
    const [rows, cols] = reader.tensor(name).shape as [number, number];
    const format = formatOf(name, cols);
    const sink = allocate(name, rows, cols, format, groupSize);
    if (isGgmlFormat(format)) {
      const rowBytes = weightRowBytes(format, cols);
      for await (const b of blockRowBatches(
        reader,
        name,
        rowBytes,
        readOpts,
        progress,
        cols,
        batchElements,
      ))
        sink.write(b.rowStart, b.words, undefined);
      return sink.finish();
    }
    for await (const { rowStart, values, rowCount } of rowBatches(
      reader,
      name,
      cols,
      readOpts,
      progress,
      batchElements,
    )) {
      const { data, scales } = packRows(values, rowCount, cols, format as WeightFormat, groupSize);
      sink.write(rowStart, data, scales);
    }
    return sink.finish();
  }

  // gate and up stream side by side and are interleaved row by row, one batch at a time.
  async function gateUp(gateName: string, upName: string): Promise<W> {
    const [rows, cols] = reader.tensor(gateName).shape as [number, number];
    let format = formatOf(gateName, cols);
    const upFormat = formatOf(upName, cols);
    if (format !== upFormat && (isGgmlFormat(format) || isGgmlFormat(upFormat))) format = 'f16';
    const sink = allocate(`${gateName}+up`, 2 * rows, cols, format, groupSize);
    if (isGgmlFormat(format)) {
      const rowBytes = weightRowBytes(format, cols);
      const batches = (name: string) =>
        blockRowBatches(reader, name, rowBytes, readOpts, progress, cols, batchElements)[
          Symbol.asyncIterator
        ]();
      const gate = batches(gateName);
      const up = batches(upName);
      for (;;) {
        const [g, u] = [await gate.next(), await up.next()];
        if (g.done || u.done) break;
        // Same row bytes, so the same batches: interleave row by row.
        const n = g.value.rowCount;
        const words = new Uint32Array(Math.ceil((2 * n * rowBytes) / 4));
        const out = new Uint8Array(words.buffer);
        const gb = new Uint8Array(g.value.words.buffer);
        const ub = new Uint8Array(u.value.words.buffer);
        for (let i = 0; i < n; i++) {
          out.set(gb.subarray(i * rowBytes, (i + 1) * rowBytes), 2 * i * rowBytes);
          out.set(ub.subarray(i * rowBytes, (i + 1) * rowBytes), (2 * i + 1) * rowBytes);
        }
        sink.write(2 * g.value.rowStart, words, undefined);
      }
      return sink.finish();
    }
    const gate = rowBatches(reader, gateName, cols, readOpts, progress, batchElements)[
      Symbol.asyncIterator
    ]();
    const up = rowBatches(reader, upName, cols, readOpts, progress, batchElements)[
      Symbol.asyncIterator
    ]();
    const pending: [Float32Array[], Float32Array[]] = [[], []];
    let next = 0;
    let doneG = false;
    let doneU = false;
    while (next < rows) {
      if (pending[0].length === 0 && !doneG) {
        const r = await gate.next();
        if (r.done) doneG = true;
        else
          for (let i = 0; i < r.value.rowCount; i++)
            pending[0].push(r.value.values.subarray(i * cols, (i + 1) * cols));
      }
      if (pending[1].length === 0 && !doneU) {
        const r = await up.next();
        if (r.done) doneU = true;
        else
          for (let i = 0; i < r.value.rowCount; i++)
            pending[1].push(r.value.values.subarray(i * cols, (i + 1) * cols));
      }
      const n = Math.min(pending[0].length, pending[1].length);
      if (n === 0) {
        if (doneG || doneU)
          throw new ModelError('TRUNCATED_FILE', `tensor ${gateName} or ${upName} ended early`);
        continue;
      }
      const inter = new Float32Array(2 * n * cols);
      for (let i = 0; i < n; i++) {
        inter.set(pending[0][i] as Float32Array, 2 * i * cols);
        inter.set(pending[1][i] as Float32Array, (2 * i + 1) * cols);
      }
      pending[0].splice(0, n);
      pending[1].splice(0, n);
      const { data, scales } = packRows(inter, 2 * n, cols, format as WeightFormat, groupSize);
      sink.write(2 * next, data, scales);
      next += n;
    }
    return sink.finish();
  }

  // Each expert is a matrix of its own: a GGUF file's 3-D expert tensors are read per expert.
  async function moeLayer(p: string, numExperts: number): Promise<MoeLayerWeights<W>> {
    const router = await matrix(`${p}mlp.gate.weight`);
    const routerBias = await optVector(`${p}mlp.gate.bias`);
    const experts: ExpertWeights<W>[] = [];
    for (let e = 0; e < numExperts; e++) {
      const x = `${p}mlp.experts.${e}.`;
      const gateBias = await optVector(`${x}gate_proj.bias`);
      const upBias = await optVector(`${x}up_proj.bias`);
      const downBias = await optVector(`${x}down_proj.bias`);
      experts.push({
        gateUp: await gateUp(`${x}gate_proj.weight`, `${x}up_proj.weight`),
        down: await matrix(`${x}down_proj.weight`),
        ...(gateBias && upBias ? { gateUpBias: interleave(gateBias, upBias) } : {}),
        ...(downBias ? { downBias } : {}),
      });
    }
    return { router, experts, ...(routerBias ? { routerBias } : {}) };
  }

  const vector = async (name: string): Promise<Float32Array> => {
    const v = await reader.readTensorF32(name);
    progress?.advance(name, reader.tensor(name).byteLength, true);
    return v;
  };
  const optVector = (name: string) =>
    reader.tensors.has(name) ? vector(name) : Promise.resolve(undefined);
  // Gemma's `1 + w` norms from an HF checkpoint (GGUF files hold the sum).
  const shift = normWeightShift(reader);
  const norm = async (name: string): Promise<Float32Array> => {
    const v = await vector(name);
    if (shift !== 0) for (let i = 0; i < v.length; i++) v[i] = (v[i] as number) + shift;
    return v;
  };
  const sandwich = c.sandwichNorms ?? false;

  try {
    const embed =
      embeds || (heads && c.tieWordEmbeddings)
        ? await matrix('model.embed_tokens.weight')
        : undefined;
    const layers: LayerWeights<W>[] = [];
    for (let l = first; l < first + count; l++) {
      const p = `model.layers.${l}.`;
      layers.push({
        inputNorm: await norm(`${p}input_layernorm.weight`),
        q: await matrix(`${p}self_attn.q_proj.weight`),
        k: await matrix(`${p}self_attn.k_proj.weight`),
        v: await matrix(`${p}self_attn.v_proj.weight`),
        qBias: await optVector(`${p}self_attn.q_proj.bias`),
        kBias: await optVector(`${p}self_attn.k_proj.bias`),
        vBias: await optVector(`${p}self_attn.v_proj.bias`),
        qNorm: c.qkNorm ? await norm(`${p}self_attn.q_norm.weight`) : undefined,
        kNorm: c.qkNorm ? await norm(`${p}self_attn.k_norm.weight`) : undefined,
        o: await matrix(`${p}self_attn.o_proj.weight`),
        oBias: await optVector(`${p}self_attn.o_proj.bias`),
        postNorm: await norm(
          `${p}${sandwich ? 'pre_feedforward_layernorm' : 'post_attention_layernorm'}.weight`,
        ),
        attnOutNorm: sandwich ? await norm(`${p}post_attention_layernorm.weight`) : undefined,
        mlpOutNorm: sandwich ? await norm(`${p}post_feedforward_layernorm.weight`) : undefined,
        gateUp: c.moe
          ? undefined
          : await gateUp(`${p}mlp.gate_proj.weight`, `${p}mlp.up_proj.weight`),
        down: c.moe ? undefined : await matrix(`${p}mlp.down_proj.weight`),
        ...(c.moe ? { moe: await moeLayer(p, c.moe.numExperts) } : {}),
        ...(c.attentionSinks ? { sinks: await vector(`${p}self_attn.sinks.weight`) } : {}),
      });
    }
    if (!heads) return { embed, layers, finalNorm: undefined, lmHead: undefined };
    const finalNorm = await norm('model.norm.weight');
    const lmHead = c.tieWordEmbeddings ? embed : await matrix('lm_head.weight');
    return { embed: embeds ? embed : undefined, layers, finalNorm, lmHead };
  } finally {
    progress?.stop();
  }
}

/**
 * Bytes the weights of a slice of layers (default: the whole model) take in the storage
 * {@link loadBlockWeights} picks for them.
 */
export function sliceWeightBytes(
  reader: CheckpointReader,
  o: LoadWeightsOptions,
  slice?: WeightSlice,
): number {
  const c = reader.config;
  let bytes = 0;
  for (const [name, t] of reader.tensors) {
    if (name === 'lm_head.weight' && c.tieWordEmbeddings) continue;
    if (!shardHoldsTensor(c, slice, name)) continue;
    const n = t.shape.reduce((a, b) => a * b, 1);
    if (t.shape.length !== 2) bytes += n * 4;
    else if (o.weightQuant === 'int8') bytes += n + (n / (o.groupSize ?? 32)) * 4;
    else if ((o.weightDtype ?? 'auto') === 'auto' && isBlockDtype(t.dtype))
      bytes += (t.shape[0] as number) * weightRowBytes(t.dtype, t.shape[1] as number);
    else if (o.weightDtype === 'f32' || (o.weightDtype !== 'f16' && t.dtype === 'F32'))
      bytes += n * 4;
    else bytes += n * 2;
  }
  return bytes;
}

/** Decoded rows of one tensor in bounded batches. */
async function* rowBatches(
  reader: CheckpointReader,
  name: string,
  cols: number,
  readOpts: { maxChunkBytes: number } | undefined,
  progress: LoadProgress | undefined,
  batchElements: number,
): AsyncGenerator<{ rowStart: number; rowCount: number; values: Float32Array }> {
  const info = reader.tensor(name);
  const totalRows = info.shape[0] as number;
  const batchRows = Math.max(1, Math.min(totalRows, Math.floor(batchElements / cols)));
  const buf = new Float32Array(batchRows * cols);
  let filled = 0;
  let rowStart = 0;
  let read = 0;
  for await (const chunk of reader.readChunks(name, readOpts)) {
    read += chunk.byteLength;
    progress?.advance(name, chunk.byteLength, read >= info.byteLength);
    const vals = decodeToF32(info.dtype, chunk);
    let off = 0;
    while (off < vals.length) {
      const take = Math.min(vals.length - off, buf.length - filled);
      buf.set(vals.subarray(off, off + take), filled);
      filled += take;
      off += take;
      if (filled === buf.length) {
        yield { rowStart, rowCount: batchRows, values: buf.slice() };
        rowStart += batchRows;
        filled = 0;
      }
    }
  }
  if (filled % cols !== 0 || rowStart + filled / cols !== totalRows) {
    throw new ModelError(
      'TRUNCATED_FILE',
      `tensor ${name}: got ${rowStart + filled / cols} of ${totalRows} rows`,
      {
        details: { tensor: name },
      },
    );
  }
  if (filled > 0) yield { rowStart, rowCount: filled / cols, values: buf.slice(0, filled) };
}

/**
 * Whole rows of a GGML block tensor, unchanged, in batches of a multiple of 4 rows (so every
 * batch starts at a word boundary whatever the row's byte length), each zero-padded to a
 * whole word.
 */
async function* blockRowBatches(
  reader: CheckpointReader,
  name: string,
  rowBytes: number,
  readOpts: { maxChunkBytes: number } | undefined,
  progress: LoadProgress | undefined,
  cols: number,
  batchElements: number,
): AsyncGenerator<{ rowStart: number; rowCount: number; words: Uint32Array }> {
  const info = reader.tensor(name);
  const totalRows = info.shape[0] as number;
  const batchRows = Math.min(totalRows, Math.max(4, Math.floor(batchElements / cols / 4) * 4));
  let words = new Uint32Array(Math.ceil((batchRows * rowBytes) / 4));
  let buf = new Uint8Array(words.buffer, 0, batchRows * rowBytes);
  let filled = 0;
  let rowStart = 0;
  let read = 0;
  for await (const chunk of reader.readChunks(name, readOpts)) {
    read += chunk.byteLength;
    progress?.advance(name, chunk.byteLength, read >= info.byteLength);
    let off = 0;
    while (off < chunk.byteLength) {
      const take = Math.min(chunk.byteLength - off, buf.byteLength - filled);
      buf.set(chunk.subarray(off, off + take), filled);
      filled += take;
      off += take;
      if (filled === buf.byteLength) {
        yield { rowStart, rowCount: batchRows, words };
        rowStart += batchRows;
        filled = 0;
        words = new Uint32Array(words.length);
        buf = new Uint8Array(words.buffer, 0, buf.byteLength);
      }
    }
  }
  if (filled % rowBytes !== 0 || rowStart + filled / rowBytes !== totalRows) {
    throw new ModelError(
      'TRUNCATED_FILE',
      `tensor ${name}: got ${rowStart + Math.floor(filled / rowBytes)} of ${totalRows} rows`,
      { details: { tensor: name } },
    );
  }
  if (filled > 0) {
    yield {
      rowStart,
      rowCount: filled / rowBytes,
      words: words.slice(0, Math.ceil(filled / 4)),
    };
  }
}

/** A {@link WeightAllocator} into host memory (the CPU backend's storage). */
export function hostAllocator(): WeightAllocator<StoredWeight, StoredFormat> {
  return (_name, rows, cols, format, groupSize) => {
    const data = new Uint32Array(weightWords(format, rows, cols));
    const rowBytes = weightRowBytes(format, cols);
    const bytes = new Uint8Array(data.buffer);
    const gpr = format === 'int8' ? cols / groupSize : 0;
    const scales = format === 'int8' ? new Float32Array(rows * gpr) : undefined;
    return {
      write(rowStart, d, sc) {
        const at = rowStart * rowBytes;
        // A GGML batch's padding may reach past the last row: keep only what fits.
        const n = Math.min(d.byteLength, rows * rowBytes - at);
        bytes.set(new Uint8Array(d.buffer, d.byteOffset, n), at);
        if (sc && scales) scales.set(sc, rowStart * gpr);
      },
      finish: () =>
        ({
          format,
          rows,
          cols,
          data,
          scales,
          groupSize: format === 'int8' ? groupSize : 0,
        }) as StoredWeight,
    };
  };
}

/** The {@link ModelConfig} fields the forward pass needs, checked for what kernels support. */
export function checkExecutable(c: ModelConfig): void {
  if (c.hiddenSize % 4 !== 0 || c.intermediateSize % 4 !== 0 || c.headDim % 8 !== 0) {
    throw new ModelError(
      'INVALID_CONFIG',
      'hidden size and intermediate size must be multiples of 4, head dim of 8',
      {
        details: {
          hiddenSize: c.hiddenSize,
          intermediateSize: c.intermediateSize,
          headDim: c.headDim,
        },
      },
    );
  }
}

/** `a` and `b` interleaved: `[a0, b0, a1, b1, ...]` (gate and up rows, as `gateUp` holds them). */
function interleave(a: Float32Array, b: Float32Array): Float32Array {
  const out = new Float32Array(2 * a.length);
  for (let i = 0; i < a.length; i++) {
    out[2 * i] = a[i] as number;
    out[2 * i + 1] = b[i] as number;
  }
  return out;
}
