import { performance } from 'node:perf_hooks';
import type { ModelRunner } from '@kvasir/engine';
import { loadKvCompression } from '@kvasir/engine';
import type { EngineConfig } from '../config.js';
import { resolveModelPath } from '../engine/bootstrap.js';
import { type LoadedModel, loadModelRunner } from '../engine/load-model-runner.js';
import { KvasirAppError } from '../errors.js';
import { PerplexityAccumulator } from '../eval/perplexity.js';
import { type StreamingEvalStats, streamingEval } from '../eval/streaming-eval.js';
import { nodePluginSource } from '../plugins/node-plugin-source.js';
import { readEvalText } from './eval.js';

/** Options of `kvasir eval` with `--kv-compression`. */
export interface StreamingEvalOptions {
  readonly file: string;
  readonly maxTokens?: number;
  /**
   * Tokens prefilled as a prompt before the token-by-token part (default one block). SnapKV
   * compresses at the end of this prompt, so give it a prompt to compress.
   */
  readonly promptTokens?: number;
  readonly json: boolean;
  readonly progress: boolean;
}

/** What `kvasir eval --kv-compression … --json` prints. */
export interface StreamingEvalReport {
  readonly mode: 'stream';
  readonly model: string;
  readonly backend: string;
  readonly kv_dtype: string;
  readonly block_size: number;
  /** The policy as given (`sinks:sinks=4,window=252`). */
  readonly kv_compression: string;
  readonly positions: 'cache' | 'original';
  readonly prompt_tokens: number;
  readonly tokens: number;
  readonly scored_tokens: number;
  readonly mean_nll: number;
  readonly perplexity: number;
  /**
   * The same text with the whole cache kept (same protocol, no compression), when the text
   * fits in the model's context; null beyond it, where nothing uncompressed can run.
   */
  readonly reference: {
    readonly source: 'full-cache';
    readonly perplexity: number;
    readonly mean_kl: number;
    readonly top1_agreement: number;
  } | null;
  readonly max_blocks_held: number;
  readonly max_kv_bytes_held: number;
  readonly tokens_dropped: number;
  readonly decode_tokens_per_second: number;
  readonly seconds: number;
}

/**
 * `kvasir eval --kv-compression <policy>`: the perplexity of a text read as ONE sequence through
 * the engine's scheduler and the compression policy (prompt, then one token per decode step as
 * StreamingLLM evaluates), so the text may be far longer than the model's context; with the KV
 * bytes the sequence held, the tokens dropped and the decode speed.
 * @throws KvasirAppError `INVALID_CONFIG` for an unreadable file, a bad policy, or a text the
 *   policy cannot stream; `MODEL_LOAD` when the model cannot load.
 */
export async function streamingEvalCommand(
  config: EngineConfig,
  options: StreamingEvalOptions,
): Promise<StreamingEvalReport> {
  const text = await readEvalText(options.file);
  const setup = await loadKvCompression(config.kvCompression, config.blockSize, {
    budgetMs: config.pluginBudgetMs,
    source: nodePluginSource(),
  });
  const spec = setup.defaultSpec!;
  const started = performance.now();
  const { path } = await resolveModelPath(config);
  const runners: ModelRunner[] = [];
  try {
    const bs = config.blockSize;
    const chunk = config.maxNumBatchedTokens;
    // The policy's bound (SnapKV first holds its whole prompt), the largest prompt chunk on
    // top of it, and room for copy-on-write.
    const openRunner = async (blocksHeld: (model: LoadedModel) => number) => {
      const model = await loadModelRunner(path, { ...config, swaFull: true });
      try {
        const runner = await model.allocate(blocksHeld(model) + Math.ceil(chunk / bs) + 2);
        runners.push(runner);
        return { model, runner };
      } catch (error) {
        await model.dispose();
        throw error;
      }
    };
    const { model, runner } = await openRunner((m) =>
      Math.max(
        spec.policy.maxBlocks(bs),
        spec.policy.attention === 'prefill-end' ? Math.ceil(m.maxModelLen / bs) : 0,
      ),
    );
    let ids = runner.codec.encode(text);
    if (options.maxTokens !== undefined) ids = ids.slice(0, options.maxTokens);
    if (ids.length < 2) {
      throw new KvasirAppError(
        'INVALID_CONFIG',
        `the text has ${ids.length} tokens; perplexity needs at least 2`,
      );
    }
    const promptTokens = Math.max(1, Math.min(options.promptTokens ?? bs, ids.length - 1));
    const vocab = runner.facts.vocabSize;
    let reference: Float32Array | undefined;
    if (ids.length <= model.maxModelLen) {
      // The full-cache run of the same protocol: one sequence, nothing dropped.
      const full = await openRunner(() => Math.ceil(ids.length / bs));
      const out = new Float32Array((ids.length - 1) * vocab);
      await streamingEval(full.runner, config, ids, undefined, { promptTokens, chunk }, (p, row) =>
        out.set(row, p * vocab),
      );
      reference = out;
    }
    const acc = new PerplexityAccumulator(vocab);
    const stats: StreamingEvalStats = await streamingEval(
      runner,
      config,
      ids,
      spec,
      { promptTokens, chunk },
      (p, row) => {
        acc.add(row, ids[p + 1]!, reference?.subarray(p * vocab, (p + 1) * vocab));
        if (options.progress && p % 256 === 0) {
          process.stderr.write(
            `\r[kvasir] ${p + 1}/${ids.length - 1} tokens, perplexity ${acc.result().perplexity.toFixed(4)}`,
          );
        }
      },
    );
    if (options.progress) process.stderr.write('\n');
    const result = acc.result();
    const report: StreamingEvalReport = {
      mode: 'stream',
      model: path,
      backend: runner.facts.backend,
      kv_dtype: config.kvDtype,
      block_size: bs,
      kv_compression: config.kvCompression!,
      positions: spec.positions,
      prompt_tokens: stats.promptTokens,
      tokens: ids.length,
      scored_tokens: result.tokens,
      mean_nll: result.meanNll,
      perplexity: result.perplexity,
      reference: result.reference
        ? {
            source: 'full-cache',
            perplexity: result.reference.perplexity,
            mean_kl: result.reference.meanKl,
            top1_agreement: result.reference.top1Agreement,
          }
        : null,
      max_blocks_held: stats.maxBlocksHeld,
      max_kv_bytes_held: stats.maxKvBytesHeld,
      tokens_dropped: stats.tokensDropped,
      decode_tokens_per_second: stats.decodeTokensPerSecond,
      seconds: (performance.now() - started) / 1000,
    };
    process.stdout.write(options.json ? `${JSON.stringify(report, null, 2)}\n` : describe(report));
    return report;
  } finally {
    for (const r of runners) await r.dispose();
  }
}

function describe(r: StreamingEvalReport): string {
  const lines = [
    `model        ${r.model}`,
    `backend      ${r.backend}; KV ${r.kv_dtype}, blocks of ${r.block_size}`,
    `compression  ${r.kv_compression} (positions: ${r.positions}); one sequence of ${r.tokens} tokens, ${r.prompt_tokens} as the prompt, then one per decode step`,
    `perplexity   ${r.perplexity.toFixed(4)} over ${r.scored_tokens} tokens (mean NLL ${r.mean_nll.toFixed(5)} nats)`,
    `cache        at most ${r.max_blocks_held} blocks (${r.max_kv_bytes_held} bytes) held; ${r.tokens_dropped} tokens dropped`,
  ];
  if (r.reference) {
    lines.push(
      `full cache   perplexity ${r.reference.perplexity.toFixed(4)}, mean KL ${r.reference.mean_kl.toExponential(3)} nats, top-1 agreement ${(100 * r.reference.top1_agreement).toFixed(2)}%`,
    );
  }
  lines.push(
    `speed        ${r.decode_tokens_per_second.toFixed(1)} decode tokens/s; ${r.seconds.toFixed(1)} s in all`,
  );
  return `${lines.join('\n')}\n`;
}
