import { readFile, writeFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import type { ModelRunner } from '@kvasir/engine';
import type { BatchPlan } from '@kvasir/scheduler';
import type { EngineConfig } from '../config.js';
import { resolveModelPath } from '../engine/bootstrap.js';
import { type LoadedModel, loadModelRunner } from '../engine/load-model-runner.js';
import { KvasirAppError } from '../errors.js';
import { EvalLogitsReader, EvalLogitsWriter } from '../eval/eval-logits-file.js';
import { type EvalWindow, PerplexityAccumulator, slidingWindows } from '../eval/perplexity.js';

/** Options of `kvasir eval`. */
export interface EvalOptions {
  /** The text file to evaluate (UTF-8). */
  readonly file: string;
  /** Window length in tokens; default min(512, the model's context). */
  readonly ctx?: number;
  /** Tokens between window starts; default half the window. */
  readonly stride?: number;
  /** Evaluate only the file's first this many tokens. */
  readonly maxTokens?: number;
  /**
   * KV dtype of the reference run (same model, backend and block size), or `none`. Default
   * `f32`, and `none` when the run itself is f32 (it would only compare the run with itself).
   */
  readonly referenceKvDtype?: EngineConfig['kvDtype'] | 'none';
  /** Compare with the logits an earlier run saved (`saveLogits`) instead of a reference run. */
  readonly reference?: string;
  /** Save the logits of every scored position here (JSON, with a `.f32` beside it). */
  readonly saveLogits?: string;
  /** Write the evaluated token ids here (JSON array), for an independent check. */
  readonly tokensOut?: string;
  readonly json: boolean;
  /** Progress on stderr, one line per window. */
  readonly progress: boolean;
}

/** What `kvasir eval --json` prints. */
export interface EvalReport {
  readonly model: string;
  readonly backend: string;
  readonly kv_dtype: string;
  readonly block_size: number;
  readonly ctx: number;
  readonly stride: number;
  readonly windows: number;
  /** Tokens of the text evaluated (after `--max-tokens`). */
  readonly tokens: number;
  /** Tokens scored: all but the first. */
  readonly scored_tokens: number;
  /** Mean negative log-likelihood, nats per scored token. */
  readonly mean_nll: number;
  readonly perplexity: number;
  readonly reference: {
    /** `run`: a second runner in this process; otherwise the saved JSON file it came from. */
    readonly source: string;
    readonly kv_dtype: string;
    readonly perplexity: number;
    /** Mean over scored positions of KL(reference ‖ evaluated), in nats. */
    readonly mean_kl: number;
    /** Fraction of scored positions where both runs put the same token first. */
    readonly top1_agreement: number;
  } | null;
  readonly seconds: number;
}

/**
 * The plan of one prefill chunk of a window: tokens `[from, to)` of the window's sequence
 * (positions relative to its start), blocks 0… in order, logits for `logitsAt` (positions).
 */
function chunkPlan(
  ids: readonly number[],
  w: EvalWindow,
  from: number,
  to: number,
  logitsAt: readonly number[],
  blockTable: Uint32Array,
): BatchPlan {
  const n = to - from;
  const positions = Int32Array.from({ length: n }, (_, i) => from - w.begin + i);
  const contextLen = to - w.begin;
  const logitsIndices = Int32Array.from(logitsAt, (p) => p - (from - w.begin));
  return {
    step: 1,
    numTokens: n,
    numPrefillTokens: n,
    numDecodeTokens: 0,
    tokenIds: Int32Array.from(ids.slice(from, to)),
    positions,
    // Block b of the sequence is physical block b: a position's slot is the position.
    slotMapping: positions,
    rows: [
      {
        seqId: 0,
        requestId: 'eval',
        index: 0,
        queryStart: 0,
        queryLen: n,
        contextLen,
        isPrefill: true,
        blockTable,
      },
    ],
    queryStartLoc: Int32Array.from([0, n]),
    contextLens: Int32Array.from([contextLen]),
    blockTables: blockTable,
    maxBlocksPerSeq: blockTable.length,
    logitsIndices,
    sampleSeqIds: new Int32Array(logitsIndices.length),
    sampleRows: new Int32Array(logitsIndices.length),
    sampleIndices: new Int32Array(logitsIndices.length),
    copies: [],
    keyShifts: [],
    swapOut: [],
    swapIn: [],
    tokenBudget: n,
  };
}

/**
 * Runs one window through the paged forward pass in prefill chunks of at most `chunk` tokens
 * (as the engine's chunked prefill would) and returns the logits of the positions that score
 * `[scoreFrom, end)`, row after row.
 */
async function windowLogits(
  runner: ModelRunner,
  ids: readonly number[],
  w: EvalWindow,
  chunk: number,
  blockTable: Uint32Array,
): Promise<Float32Array> {
  const vocab = runner.facts.vocabSize;
  const out = new Float32Array((w.end - w.scoreFrom) * vocab);
  let filled = 0;
  for (let from = w.begin; from < w.end; from += chunk) {
    const to = Math.min(from + chunk, w.end);
    // Position p's logits score token p + 1.
    const logitsAt: number[] = [];
    for (let p = Math.max(from, w.scoreFrom - 1); p < Math.min(to, w.end - 1); p++) {
      logitsAt.push(p - w.begin);
    }
    const plan = chunkPlan(ids, w, from, to, logitsAt, blockTable);
    // A chunk with nothing to score still writes its KV, which later chunks attend to.
    const logits = await runner.forward(plan);
    out.set(logits.subarray(0, logitsAt.length * vocab), filled);
    filled += logitsAt.length * vocab;
  }
  return out;
}

async function openRunner(
  path: string,
  config: EngineConfig,
  numBlocks: number,
): Promise<{ model: LoadedModel; runner: ModelRunner }> {
  // eval builds its own plans over one block table per row: whole-context KV on every layer.
  const model = await loadModelRunner(path, { ...config, swaFull: true });
  try {
    return { model, runner: await model.allocate(numBlocks) };
  } catch (error) {
    await model.dispose();
    throw error;
  }
}

/**
 * The text `--file` names, as UTF-8.
 * @throws KvasirAppError `INVALID_CONFIG` naming the flag when it cannot be read.
 */
export async function readEvalText(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (error) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `--file: cannot read ${file}: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
}

/**
 * `kvasir eval`: sliding-window perplexity of a model over a text file through the engine's
 * paged forward pass (its backend, KV dtype and block size), with the mean KL divergence and
 * top-1 agreement against a reference: a second run of the same model (f32 KV by default) or
 * the logits an earlier run saved with `saveLogits`.
 * @throws KvasirAppError `INVALID_CONFIG` for an unreadable file, a window longer than the
 *   model's context, or a text of fewer than 2 tokens; `MODEL_LOAD` when the model cannot load.
 */
export async function evalCommand(config: EngineConfig, options: EvalOptions): Promise<EvalReport> {
  const text = await readEvalText(options.file);
  const started = performance.now();
  const { path } = await resolveModelPath(config);
  const opened: { model: LoadedModel; runner: ModelRunner }[] = [];
  let saved: EvalLogitsReader | undefined;
  let save: EvalLogitsWriter | undefined;
  try {
    const loaded = await loadModelRunner(path, { ...config, swaFull: true });
    const maxModelLen = loaded.maxModelLen;
    const ctx = options.ctx ?? Math.min(512, maxModelLen);
    if (ctx > maxModelLen) {
      await loaded.dispose();
      throw new KvasirAppError(
        'INVALID_CONFIG',
        `--ctx: ${ctx} tokens exceed the model's context of ${maxModelLen}`,
      );
    }
    const stride = options.stride ?? Math.max(1, Math.floor(ctx / 2));
    const numBlocks = Math.ceil(ctx / config.blockSize);
    try {
      opened.push({ model: loaded, runner: await loaded.allocate(numBlocks) });
    } catch (error) {
      await loaded.dispose();
      throw error;
    }
    const runner = opened[0]!.runner;
    const referenceKvDtype =
      options.referenceKvDtype ?? (config.kvDtype === 'f32' ? 'none' : 'f32');
    if (options.reference === undefined && referenceKvDtype !== 'none') {
      opened.push(await openRunner(path, { ...config, kvDtype: referenceKvDtype }, numBlocks));
    }
    const reference = opened[1]?.runner;
    let ids = runner.codec.encode(text);
    if (options.maxTokens !== undefined) ids = ids.slice(0, options.maxTokens);
    const windows = slidingWindows(ids.length, ctx, stride);
    if (options.tokensOut) await writeFile(options.tokensOut, JSON.stringify(ids));
    const vocab = runner.facts.vocabSize;
    if (options.reference !== undefined) {
      saved = await EvalLogitsReader.open(options.reference, {
        ctx,
        stride,
        vocabSize: vocab,
        ids,
      });
    }
    if (options.saveLogits !== undefined) save = await EvalLogitsWriter.create(options.saveLogits);
    const blockTable = Uint32Array.from({ length: numBlocks }, (_, b) => b);
    const chunk = config.maxNumBatchedTokens;
    const acc = new PerplexityAccumulator(vocab);
    for (const [k, w] of windows.entries()) {
      const logits = await windowLogits(runner, ids, w, chunk, blockTable);
      const refLogits = reference
        ? await windowLogits(reference, ids, w, chunk, blockTable)
        : await saved?.next(w.end - w.scoreFrom);
      await save?.append(logits);
      for (let t = w.scoreFrom; t < w.end; t++) {
        const at = (t - w.scoreFrom) * vocab;
        acc.add(logits.subarray(at, at + vocab), ids[t]!, refLogits?.subarray(at, at + vocab));
      }
      if (options.progress) {
        const so = acc.result();
        process.stderr.write(
          `\r[kvasir] window ${k + 1}/${windows.length}, ${so.tokens} tokens, perplexity ${so.perplexity.toFixed(4)}`,
        );
      }
    }
    if (options.progress) process.stderr.write('\n');
    await save?.finish(
      {
        model: path,
        backend: runner.facts.backend,
        kv_dtype: config.kvDtype,
        block_size: config.blockSize,
        ctx,
        stride,
        vocab_size: vocab,
      },
      ids,
    );
    save = undefined;
    const result = acc.result();
    const report: EvalReport = {
      model: path,
      backend: runner.facts.backend,
      kv_dtype: config.kvDtype,
      block_size: config.blockSize,
      ctx,
      stride,
      windows: windows.length,
      tokens: ids.length,
      scored_tokens: result.tokens,
      mean_nll: result.meanNll,
      perplexity: result.perplexity,
      reference: result.reference
        ? {
            source: saved ? options.reference! : 'run',
            kv_dtype: saved ? saved.header.kv_dtype : referenceKvDtype,
            perplexity: result.reference.perplexity,
            mean_kl: result.reference.meanKl,
            top1_agreement: result.reference.top1Agreement,
          }
        : null,
      seconds: (performance.now() - started) / 1000,
    };
    process.stdout.write(options.json ? `${JSON.stringify(report, null, 2)}\n` : describe(report));
    return report;
  } finally {
    await save?.abandon();
    await saved?.close();
    for (const { runner } of opened) await runner.dispose();
  }
}

function describe(r: EvalReport): string {
  const lines = [
    `model        ${r.model}`,
    `backend      ${r.backend}; KV ${r.kv_dtype}, blocks of ${r.block_size}`,
    `windows      ${r.windows} of ${r.ctx} tokens, stride ${r.stride} (each scores the tokens the previous one did not)`,
    `perplexity   ${r.perplexity.toFixed(4)} over ${r.scored_tokens} tokens (mean NLL ${r.mean_nll.toFixed(5)} nats)`,
  ];
  if (r.reference) {
    lines.push(
      `reference    KV ${r.reference.kv_dtype}${r.reference.source === 'run' ? '' : ` (saved in ${r.reference.source})`}: perplexity ${r.reference.perplexity.toFixed(4)}, mean KL ${r.reference.mean_kl.toExponential(3)} nats, top-1 agreement ${(100 * r.reference.top1_agreement).toFixed(2)}%`,
    );
  }
  lines.push(`time         ${r.seconds.toFixed(1)} s`);
  return `${lines.join('\n')}\n`;
}
