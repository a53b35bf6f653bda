import { copyFile, mkdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expectedTensors, type ModelConfig, toHfConfig, validateModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import type { CheckpointReader } from './checkpoint-reader.js';
import { isBlockDtype, type TensorDtype } from './dtype.js';
import { openCheckpoint } from './open-checkpoint.js';
import { type TensorToWrite, writeSafetensors } from './safetensors.js';

/** What {@link convertToGqa} produced. */
export interface GqaConversion {
  /** Config of the new checkpoint (only `numKvHeads` differs). */
  readonly config: ModelConfig;
  /** KV-cache bytes per token of the new model ÷ the source's (= new KV heads ÷ old). */
  readonly kvBytesRatio: number;
}

/**
 * Mean-pools groups of `group` consecutive heads of a K or V projection (weight `[heads × headDim, in]`
 * or bias `[heads × headDim]`), as Ainslie et al. (2023) build a GQA checkpoint from an MHA one.
 * New head j is the mean of old heads `j × group … j × group + group − 1`, which keeps the
 * query-head → KV-head mapping (query head h reads KV head ⌊h ÷ (numHeads ÷ numKvHeads)⌋).
 */
export function meanPoolHeads(
  values: Float32Array,
  heads: number,
  headDim: number,
  group: number,
): Float32Array {
  const rowLen = values.length / (heads * headDim);
  const newHeads = heads / group;
  const out = new Float32Array(newHeads * headDim * rowLen);
  const acc = new Float64Array(rowLen);
  for (let j = 0; j < newHeads; j++) {
    for (let d = 0; d < headDim; d++) {
      acc.fill(0);
      for (let t = 0; t < group; t++) {
        const src = ((j * group + t) * headDim + d) * rowLen;
        for (let c = 0; c < rowLen; c++) acc[c] = acc[c]! + values[src + c]!;
      }
      const dst = (j * headDim + d) * rowLen;
      for (let c = 0; c < rowLen; c++) out[dst + c] = acc[c]! / group;
    }
  }
  return out;
}

const SIDE_FILES = [
  'tokenizer.json',
  'tokenizer_config.json',
  'generation_config.json',
  'special_tokens_map.json',
  'chat_template.jinja',
];

/**
 * Converts a checkpoint (an HF directory or a GGUF file) to grouped-query attention with
 * `numKvHeads` KV heads by mean-pooling groups of key and value heads (Ainslie et al. 2023,
 * "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints"), and
 * writes a new HF directory: `config.json`, `model.safetensors` (each tensor in its source dtype;
 * Q8_0 becomes F32) and the source's tokenizer files. `numKvHeads === 1` gives MQA; the
 * source's own KV head count gives an identical copy. The KV cache per token shrinks by
 * `numKvHeads ÷ source KV heads`. The pooled model needs uptraining to recover quality: the
 * paper uses ~5% of the pre-training compute.
 *
 * @throws {@link ModelError} `INVALID_ARGUMENT` unless `numKvHeads` is a positive divisor of the
 *   source's KV head count; reader and `IO` errors.
 */
export async function convertToGqa(
  src: string | CheckpointReader,
  dstDir: string,
  numKvHeads: number,
): Promise<GqaConversion> {
  const reader = typeof src === 'string' ? await openCheckpoint(src) : src;
  try {
    const c = reader.config;
    if (!Number.isInteger(numKvHeads) || numKvHeads < 1 || c.numKvHeads % numKvHeads !== 0) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        `convertToGqa: numKvHeads must be a positive divisor of the source's ${c.numKvHeads} KV heads, got ${numKvHeads}`,
      );
    }
    const group = c.numKvHeads / numKvHeads;
    const config: ModelConfig = { ...c, numKvHeads };
    validateModelConfig(config);
    if (config.ropeScaling?.type === 'freq-factors') {
      throw new ModelError(
        'INVALID_ARGUMENT',
        'convertToGqa: explicit RoPE frequency factors (from GGUF rope_freqs) cannot be written to config.json',
      );
    }
    try {
      await mkdir(dstDir, { recursive: true });
    } catch (e) {
      throw new ModelError('IO', `cannot create ${dstDir}: ${(e as Error).message}`, { cause: e });
    }
    const hf = toHfConfig(config);
    await writeFile(join(dstDir, 'config.json'), `${JSON.stringify(hf, null, 2)}\n`);
    const tensors: TensorToWrite[] = expectedTensors(config).map((t) => {
      const info = reader.tensor(t.name);
      const dtype: TensorDtype = isBlockDtype(info.dtype) ? 'F32' : info.dtype;
      const pooled = /\.self_attn\.[kv]_proj\./.test(t.name);
      return {
        name: t.name,
        dtype,
        shape: t.shape,
        data: async () => {
          if (!pooled || group === 1) {
            return dtype === info.dtype
              ? reader.readTensorBytes(t.name)
              : reader.readTensorF32(t.name);
          }
          return meanPoolHeads(await reader.readTensorF32(t.name), c.numKvHeads, c.headDim, group);
        },
      };
    });
    await writeSafetensors(join(dstDir, 'model.safetensors'), tensors, {
      format: 'pt',
      converted_by: `kvasir convertToGqa ${c.numKvHeads}->${numKvHeads}`,
    });
    if (reader.format === 'safetensors') {
      for (const f of SIDE_FILES) {
        const from = join(reader.path, f);
        const exists = await stat(from).then(
          () => true,
          () => false,
        );
        if (exists) await copyFile(from, join(dstDir, f));
      }
    }
    return { config, kvBytesRatio: numKvHeads / c.numKvHeads };
  } finally {
    if (typeof src === 'string') await reader.close();
  }
}
