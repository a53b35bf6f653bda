import type { BlockCopy, KvLayout } from '@kvasir/kv-allocator';
import {
  type KvFormatName,
  kvBlockBytes,
  kvCacheSpec,
  type Model,
  type ModelConfig,
  type ModelTokenizer,
  tokenVocabulary,
} from '@kvasir/model';
import type { BatchPlan } from '@kvasir/scheduler';
import {
  type ChatMessage,
  detectToolCallFormat,
  type ToolCallFormatName,
} from '@kvasir/server/spec';
import { templateMessage } from './chat-template-messages.js';
import { KvasirEngineError } from './errors.js';
import type { KvCompressionLimits, ModelFacts, ModelRunner, TextCodec } from './model-runner.js';
import { decoderShowing, toolCallControlTokens } from './tool-call-token.js';

function toolCallFormatOf(template: string | null): { toolCallFormat?: ToolCallFormatName } {
  const format = template === null ? undefined : detectToolCallFormat(template);
  return format === undefined ? {} : { toolCallFormat: format };
}

/**
 * What KV compression a model's sliding-window layers cannot run: their window counts cache
 * entries, so in original positions (entries with holes) it reaches further back than the
 * model's window; and WebGPU's kernels sum attention mass over the whole context on those layers.
 */
export function kvCompressionLimitsOf(
  model: Pick<Model, 'config' | 'devices'> & {
    readonly kvCache?: Pick<Model['kvCache'], 'groups'>;
  },
): KvCompressionLimits | undefined {
  const sliding = model.config.slidingWindowLayers ?? [];
  if (sliding.length === 0) return undefined;
  const what = `${model.config.architecture}'s sliding-window layers`;
  if (model.kvCache?.groups) {
    return {
      any: `KV compression is not supported while ${what} hold only their window (KV cache groups): start the server with --swa-full to keep whole-context KV and use it`,
    };
  }
  const onGpu = sliding.some((l) =>
    model.devices.some(
      (d) => d.backend === 'webgpu' && l >= d.firstLayer && l < d.firstLayer + d.numLayers,
    ),
  );
  return {
    originalPositions: `positions 'original' is not supported with ${what} (their window counts cache entries, which original positions leave holes in): use positions 'cache'`,
    ...(onGpu
      ? {
          attentionMass: `policies that read attention mass are not supported with ${what} on webgpu (the mass would count the whole context): use a policy without attention (sinks, window) or the wasm backend`,
        }
      : {}),
  };
}

/**
 * Tokenizing off the calling thread, for long texts: the app's is a Node worker thread over the
 * same tokenizer.
 */
export interface OffThreadEncoder {
  encode(text: string, addSpecialTokens: boolean): Promise<number[]>;
  close(): Promise<void>;
}

/** The engine's text side over a @kvasir/model tokenizer (and an off-thread encoder, if any). */
export function textCodecFor(tokenizer: ModelTokenizer, offThread?: OffThreadEncoder): TextCodec {
  const maxTextBytesPerToken = tokenizer.maxTextBytesPerToken;
  const format = toolCallFormatOf(tokenizer.chatTemplate);
  // Control tokens that open a tool call (Mistral's [TOOL_CALLS]) are shown as their text.
  const shown = toolCallControlTokens(tokenizer, format.toolCallFormat);
  return {
    encode: (text) => tokenizer.encode(text),
    encodeText: (text) => tokenizer.encode(text, { addSpecialTokens: false }),
    applyChatTemplate: (messages: readonly ChatMessage[], options) =>
      tokenizer.encodeChat(
        messages.map(templateMessage),
        options?.tools ? { tools: options.tools } : undefined,
      ),
    ...format,
    ...(maxTextBytesPerToken === undefined ? {} : { maxTextBytesPerToken }),
    ...(offThread
      ? {
          encodeOffThread: (text: string, addSpecialTokens: boolean) =>
            offThread.encode(text, addSpecialTokens),
          close: () => offThread.close(),
        }
      : {}),
    renderChat: (messages, options) =>
      tokenizer.applyChatTemplate(
        messages.map(templateMessage),
        options?.tools ? { tools: options.tools } : undefined,
      ),
    decoder: () => decoderShowing(tokenizer, shown),
    tokenText: (id) => tokenizer.decode([id]),
    vocabulary: (options) => tokenVocabulary(tokenizer, { ...options, textTokens: shown }),
  };
}

/**
 * The KV layout the allocator and memory plan count with, from @kvasir/model's cache layout:
 * the row words per element and the scale words per slab spread over its tokens, so that
 * `kvBytesPerBlock` equals the model's bytes per block exactly (block sizes are powers of two).
 * @throws KvasirEngineError `INVALID_CONFIG` for a format the model's shape cannot store.
 */
export function kvLayoutFor(
  c: ModelConfig,
  kvFormat: KvFormatName,
  blockSize: number,
  groups?: { readonly layersPerGroup: number },
): KvLayout {
  let spec: ReturnType<typeof kvCacheSpec>;
  try {
    spec = kvCacheSpec(c, { kvFormat, blockSize, numBlocks: 1 });
  } catch (error) {
    throw new KvasirEngineError('INVALID_CONFIG', `--kv-dtype: ${(error as Error).message}`, {
      cause: error,
    });
  }
  return {
    // With KV groups a block is one page of `layersPerGroup` layers.
    numLayers: groups ? groups.layersPerGroup : c.numLayers,
    numKvHeads: c.numKvHeads,
    headDim: c.headDim,
    blockSize,
    bytesPerElement: (spec.rowWords * 4) / c.headDim,
    scaleBytesPerTokenHead: ((spec.slabWords - blockSize * spec.rowWords) * 4) / blockSize,
  };
}

/**
 * The runner the engine drives over a loaded @kvasir/model `Model` (its paged cache allocated):
 * `facts` less the block size and count, which the model tells. `release` runs after the model
 * is destroyed (the app releases its GPU devices there).
 * @throws KvasirEngineError `MODEL_LOAD` when the model's block bytes disagree with its cache.
 */
export function runnerForModel(
  model: Model,
  facts: Omit<ModelFacts, 'blockBytes' | 'numBlocks'>,
  codec: TextCodec,
  release: () => void = () => {},
): ModelRunner {
  const blockBytes = model.kvBlockBytes;
  const blockSize = facts.kvLayout.blockSize;
  if (blockBytes !== kvBlockBytes(model.kvCache) || blockBytes * blockSize === 0) {
    throw new KvasirEngineError('MODEL_LOAD', 'inconsistent KV block size');
  }
  const limits = kvCompressionLimitsOf(model);
  const runner: ModelRunner = {
    facts: {
      ...facts,
      blockBytes,
      numBlocks: model.kvCache.numBlocks,
      ...(limits ? { kvCompressionLimits: limits } : {}),
      ...(model.kvCache.groups ? { kvGroups: model.kvCache.groups.windows } : {}),
    },
    codec,
    // Copy-on-write runs in copyBlocks (also for a plan with no tokens), not again here.
    forward: (plan: BatchPlan) => model.forward({ ...plan, copies: [] }),
    forwardLeavesThread: model.devices.some((d) => d.backend === 'webgpu'),
    copyBlocks: (copies: readonly BlockCopy[]) => model.copyBlocks(copies),
    async readBlocks(blocks) {
      const all = await model.readBlocks(blocks);
      // One copy per block: a store may keep a block long after the others are gone.
      return blocks.map((_, i) => all.slice(i * blockBytes, (i + 1) * blockBytes));
    },
    async writeBlocks(blocks, data) {
      const all = new Uint8Array(blocks.length * blockBytes);
      blocks.forEach((b, i) => {
        const bytes = data[i];
        if (bytes?.byteLength !== blockBytes) {
          throw new KvasirEngineError(
            'SWAP_LOST',
            `block ${b}: ${bytes?.byteLength ?? 0} bytes, expected ${blockBytes}`,
          );
        }
        all.set(bytes, i * blockBytes);
      });
      await model.writeBlocks(blocks, all);
    },
    async dispose() {
      await runner.codec.close?.();
      await model.destroy();
      release();
    },
  };
  return runner;
}
