import { createHash } from 'node:crypto';
import { KvasirError } from '@kvasir/errors';
import type { BlockHash, CachedPrefix, ExtraKeys } from '@kvasir/kv-allocator';
import { KvCacheManager } from '@kvasir/kv-allocator';
import { Sampler, SamplingState } from '@kvasir/model';
import type { KvBlockStore, TieredStore } from '@kvasir/offload';
import {
  type BatchPlan,
  fcfsPolicy,
  longestPrefixMatchPolicy,
  priorityPolicy,
  type QueuePolicy,
  type RequestOutput,
  Scheduler,
  SchedulerError,
} from '@kvasir/scheduler';
import {
  type ChatMessage,
  EngineError,
  type EngineHealth,
  type EngineStats,
  type FinishReason,
  type GenerationEvent,
  type GenerationRequest,
  type GenerationStream,
  type InferenceEngine,
  type ModelCard,
  type TokenLogprob,
} from '@kvasir/server';
import { AsyncQueue } from './async-queue.js';
import type { EngineConfig } from './config.js';
import { KvasirAppError } from './errors.js';
import type { IncrementalDecoder, ModelRunner } from './runner.js';

/** Options of {@link KvasirEngine}. */
export interface KvasirEngineOptions {
  readonly runner: ModelRunner;
  readonly config: EngineConfig;
  /** Eviction policy of the GPU block pool (from {@link loadEvictionPolicy}). */
  readonly evictionPolicy?: import('@kvasir/kv-allocator').EvictionPolicy<number>;
  /** Where swapped-out blocks go: the tiered store and its tiers (host, disk, Redis). */
  readonly offload?: { readonly store: TieredStore; readonly tiers: readonly KvBlockStore[] };
  /** Name clients use; default the runner's model id. */
  readonly servedModelName?: string;
  /** Where the engine reports failures it survived (a failed step); default stderr. */
  readonly log?: (line: string) => void;
}

interface Choice {
  readonly state: SamplingState;
  readonly decoder: IncrementalDecoder;
  generated: number;
  finished: boolean;
}

interface Live {
  readonly request: GenerationRequest;
  readonly queue: AsyncQueue<GenerationEvent>;
  readonly choices: Choice[];
  readonly stopTokens: Set<number>;
  /** Choices the server ended (stop strings). */
  readonly endedByServer: Set<number>;
  finished: boolean;
}

/** Counters of prefix offload (blocks written to and imported from the offload tiers). */
export interface PrefixOffloadStats {
  /** Full blocks written to the offload store after the step that filled them. */
  readonly storedBlocks: number;
  /** Blocks fetched from the offload store and imported into the GPU prefix cache. */
  readonly importedBlocks: number;
  /** Tokens of those blocks (what later prefix hits can reuse). */
  readonly importedTokens: number;
  /** Imports given up (no room, late or missing blocks, stale local prefix). */
  readonly skippedImports: number;
  /** Failed reads, writes and lookups (never thrown into the engine). */
  readonly errors: number;
  /**
   * Blocks a lookup found listed but could not read back (deleted, or corrupt and dropped by
   * the tier); each is written again the next time it is full.
   */
  readonly missingBlocks: number;
}

/** Blocks fetched for one request, waiting to be imported between engine steps. */
interface PendingImport {
  readonly tokens: readonly number[];
  /** Index of the first fetched block in the prompt's block chain. */
  readonly firstBlock: number;
  readonly keys: readonly BlockHash[];
  readonly values: readonly Uint8Array[];
  readonly done: () => void;
}

/** Deadline of a prefix lookup plus fetch: past it the request just recomputes. */
const PREFIX_FETCH_DEADLINE_MS = 2_000;
/** Hashes remembered as already written, so a hot prefix is not rewritten every request. */
const STORED_HASHES_LIMIT = 16_384;

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Codes after which the device can run nothing more: the only step failures that are fatal. */
const FATAL_CODES = new Set(['DEVICE_LOST', 'DESTROYED']);

/** True when `error` (or an error it was caused by) says the device is gone. */
export function isDeviceLost(error: unknown): boolean {
  for (let e = error, depth = 0; e !== undefined && depth < 8; depth++) {
    if (KvasirError.isInstance(e) && FATAL_CODES.has(e.code)) return true;
    e = e instanceof Error ? e.cause : undefined;
  }
  return false;
}

const describeError = (error: unknown): string =>
  error instanceof Error ? `${error.name}: ${error.message}` : String(error);

/** Deterministic per-choice seed: choice i of seed s always samples the same way. */
function choiceSeed(seed: number | undefined, index: number): number | undefined {
  if (seed === undefined) return undefined;
  return (Math.abs(seed) + index * 0x9e3779b1) % 2 ** 32;
}

function swapKey(engineId: string, slot: number, generation: number): string {
  return createHash('sha256')
    .update(`swap:${engineId}:${slot}:${generation}`)
    .digest('hex')
    .slice(0, 32);
}

/**
 * The serving engine: owns the scheduler and the KV allocator, drives the model runner step by
 * step (schedule → swaps and block copies → forward → sampling → update → stream), and
 * implements the server's `InferenceEngine`.
 *
 * The loop yields to the event loop between steps (`setImmediate`), so HTTP traffic, aborts and
 * new requests are handled while a long generation runs.
 */
export class KvasirEngine implements InferenceEngine {
  readonly runner: ModelRunner;
  readonly config: EngineConfig;
  readonly kvCache: KvCacheManager;
  readonly scheduler: Scheduler;
  readonly modelCard: ModelCard;
  readonly #sampler = new Sampler();
  readonly #live = new Map<string, Live>();
  readonly #offload: KvasirEngineOptions['offload'];
  readonly #engineId = `${process.pid}-${Date.now()}`;
  #wake: (() => void) | undefined;
  #loop: Promise<void> | undefined;
  #stopping = false;
  #failure: unknown;
  /** Host slot → key of the block swapped into it (a fresh key per swap-out, so a late
   * promotion or demotion of an old copy can never be read back for a reused slot). */
  readonly #swapKeys = new Map<number, string>();
  #swapGeneration = 0;
  #swapHits = 0;
  #swapMisses = 0;
  /** Whether full blocks are written to, and prompts' prefixes imported from, the offload store. */
  readonly #offloadPrefix: boolean;
  readonly #extraKeys: ExtraKeys;
  /** Recently written block hashes, oldest first (bounded). */
  readonly #storedHashes = new Set<BlockHash>();
  /** Writes in flight (awaited by {@link stop} before the store closes). */
  readonly #pendingWrites = new Set<Promise<void>>();
  #imports: PendingImport[] = [];
  #importSeq = 0;
  #prefixStored = 0;
  #prefixImportedBlocks = 0;
  #prefixSkipped = 0;
  #prefixErrors = 0;
  #prefixMissing = 0;
  #failedSteps = 0;
  #failedRequests = 0;
  readonly #log: (line: string) => void;
  /** Steps run so far (for tests and benchmarks). */
  steps = 0;

  constructor(options: KvasirEngineOptions) {
    const { runner, config } = options;
    this.runner = runner;
    this.config = config;
    this.#offload = options.offload;
    this.#log = options.log ?? ((line) => process.stderr.write(`kvasir: ${line}\n`));
    const facts = runner.facts;
    this.kvCache = new KvCacheManager({
      numBlocks: facts.numBlocks,
      blockSize: facts.kvLayout.blockSize,
      enablePrefixCaching: config.enablePrefixCaching,
      ...(options.evictionPolicy ? { evictionPolicy: options.evictionPolicy } : {}),
    });
    const maxModelLen = Math.min(config.maxModelLen ?? facts.maxModelLen, facts.maxModelLen);
    // With only a host tier, swap slots are what its budget holds; tiers below it (write-through)
    // keep blocks the host tier evicts, so more slots than the host budget are safe.
    const hostOnly = (this.#offload?.tiers.length ?? 0) === 1;
    const hostSwapBlocks =
      config.preemptionMode === 'swap' && this.#offload
        ? (config.offload.swapBlocks ??
          (hostOnly
            ? Math.floor(config.offload.hostBytes / facts.blockBytes)
            : 4 * facts.numBlocks))
        : 0;
    let queuePolicy: QueuePolicy;
    switch (config.queuePolicy) {
      case 'priority':
        queuePolicy = priorityPolicy();
        break;
      case 'lpm':
        queuePolicy = longestPrefixMatchPolicy();
        break;
      default:
        queuePolicy = fcfsPolicy();
    }
    this.scheduler = new Scheduler({
      kvCache: this.kvCache,
      maxModelLen,
      maxNumSeqs: config.maxNumSeqs,
      maxNumBatchedTokens: config.enableChunkedPrefill
        ? config.maxNumBatchedTokens
        : Math.max(config.maxNumBatchedTokens, maxModelLen),
      enableChunkedPrefill: config.enableChunkedPrefill,
      enablePrefixCaching: config.enablePrefixCaching,
      preemptionMode: config.preemptionMode,
      hostSwapBlocks,
      queuePolicy,
      clock: () => performance.now() / 1000,
    });
    this.modelCard = {
      id: options.servedModelName ?? config.servedModelName ?? facts.modelId,
      created: Math.floor(Date.now() / 1000),
      ownedBy: 'kvasir',
      maxModelLen,
      vocabSize: facts.vocabSize,
    };
    this.#extraKeys = { modelId: this.modelCard.id };
    // Off by default where prefix blocks would compete with swapped-out blocks for a single
    // budgeted tier: there, a prefix write could evict a block with no other copy.
    this.#offloadPrefix =
      this.#offload !== undefined &&
      config.enablePrefixCaching &&
      (config.offloadPrefix ?? !(config.preemptionMode === 'swap' && hostOnly));
  }

  listModels(): readonly ModelCard[] {
    return [this.modelCard];
  }

  tokenize(_model: string, text: string): readonly number[] {
    try {
      return this.runner.codec.encode(text);
    } catch (error) {
      throw new EngineError('INVALID_REQUEST', `prompt: ${(error as Error).message}`, {
        cause: error,
        details: { param: 'prompt' },
      });
    }
  }

  applyChatTemplate(_model: string, messages: readonly ChatMessage[]): readonly number[] {
    try {
      return this.runner.codec.applyChatTemplate(messages);
    } catch (error) {
      throw new EngineError('INVALID_REQUEST', `messages: ${(error as Error).message}`, {
        cause: error,
        details: { param: 'messages' },
      });
    }
  }

  health(): EngineHealth {
    if (this.#failure !== undefined) {
      return { status: 'draining', detail: `engine failed: ${String(this.#failure)}` };
    }
    if (this.#stopping) return { status: 'draining' };
    return { status: 'ok' };
  }

  stats(): EngineStats {
    const kv = this.kvCache.stats();
    const m = this.scheduler.metrics();
    const offloadHits: Record<string, number> = {};
    if (this.#offload) {
      const byTier = this.#offload.store.stats().hitsByTier;
      this.#offload.tiers.forEach((tier, i) => {
        offloadHits[tier.tier] = byTier[i] ?? 0;
      });
    }
    return {
      kvCacheUsage: kv.usage,
      blocks: {
        total: kv.numBlocks,
        used: kv.usedBlocks,
        cached: kv.cachedBlocks,
        free: kv.freeBlocks,
      },
      prefixCache: { queries: m.prefixQueryTokens, hits: m.prefixHitTokens },
      requests: {
        running: m.numRunning,
        waiting: m.numWaiting,
        preempted: m.numSwapped + m.numPreemptedWaiting,
      },
      preemptions: { recompute: m.preemptionsRecompute, swap: m.preemptionsSwap },
      offloadHits,
      evictions: kv.evictions,
      failures: { steps: this.#failedSteps, requests: this.#failedRequests },
      offloadTiers: (this.#offload?.tiers ?? []).map((tier) => {
        const t = tier.stats();
        const status = (t as { status?: unknown }).status;
        return {
          tier: t.tier,
          ...(typeof status === 'string' ? { connected: status === 'ready' } : {}),
          misses: t.misses,
          corrupt: t.corrupt,
          foreign: t.foreign,
          errors: t.errors,
          evictions: t.evictions,
        };
      }),
    };
  }

  /** Whether full blocks go to the offload tiers and prompts' prefixes are imported from them. */
  get prefixOffloadEnabled(): boolean {
    return this.#offloadPrefix;
  }

  /** Prefix offload counters (all zero when prefix offload is off). */
  prefixOffloadStats(): PrefixOffloadStats {
    return {
      storedBlocks: this.#prefixStored,
      importedBlocks: this.#prefixImportedBlocks,
      importedTokens: this.#prefixImportedBlocks * this.runner.facts.kvLayout.blockSize,
      skippedImports: this.#prefixSkipped,
      errors: this.#prefixErrors,
      missingBlocks: this.#prefixMissing,
    };
  }

  /** Swap-ins served by the offload store, and ones it could not serve. */
  swapStats(): { hits: number; misses: number } {
    return { hits: this.#swapHits, misses: this.#swapMisses };
  }

  async generate(request: GenerationRequest, signal: AbortSignal): Promise<GenerationStream> {
    if (this.#stopping || this.#failure !== undefined) {
      throw new EngineError('DRAINING', 'engine is shutting down');
    }
    if (signal.aborted) throw new EngineError('INVALID_REQUEST', 'request was aborted');
    const metrics = this.scheduler.metrics();
    if (metrics.numWaiting >= this.config.maxWaiting) {
      throw new EngineError(
        'QUEUE_FULL',
        `the waiting queue is full (${metrics.numWaiting} requests); retry later`,
        { details: { retryAfterSeconds: 1 } },
      );
    }
    const facts = this.runner.facts;
    const outside = request.promptTokens.findIndex(
      (id) => !Number.isInteger(id) || id < 0 || id >= facts.vocabSize,
    );
    if (outside >= 0) {
      throw new EngineError(
        'INVALID_REQUEST',
        `prompt: token ${outside} has id ${request.promptTokens[outside]}, outside the vocabulary [0, ${facts.vocabSize})`,
        { details: { param: 'prompt' } },
      );
    }
    const promptBlocks = Math.ceil(request.promptTokens.length / facts.kvLayout.blockSize);
    if (promptBlocks > facts.numBlocks) {
      throw new EngineError(
        'PROMPT_TOO_LONG',
        `prompt: needs ${promptBlocks} KV blocks but the cache holds ${facts.numBlocks}`,
        { details: { param: 'prompt' } },
      );
    }
    const stopTokens = new Set<number>(request.stopTokenIds);
    if (!request.ignoreEos) for (const eos of facts.eosTokenIds) stopTokens.add(eos);
    if (this.#offloadPrefix) {
      await this.#importPrefix(request.promptTokens);
      if (this.#stopping || this.#failure !== undefined) {
        throw new EngineError('DRAINING', 'engine is shutting down');
      }
      if (signal.aborted) throw new EngineError('INVALID_REQUEST', 'request was aborted');
    }
    try {
      this.scheduler.add({
        id: request.id,
        promptTokenIds: request.promptTokens,
        maxTokens: request.maxTokens,
        n: request.n,
        stopTokenIds: [...stopTokens],
        ignoreEos: request.ignoreEos,
        extraKeys: this.#extraKeys,
      });
    } catch (error) {
      if (SchedulerError.isInstance(error)) {
        throw new EngineError('INVALID_REQUEST', error.message, { cause: error });
      }
      throw error;
    }
    const live: Live = {
      request,
      queue: new AsyncQueue(),
      choices: Array.from({ length: request.n }, (_, i) => ({
        state: new SamplingState(choiceSeed(request.sampling.seed, i), request.promptTokens),
        decoder: this.runner.codec.decoder(),
        generated: 0,
        finished: false,
      })),
      stopTokens,
      endedByServer: new Set(),
      finished: false,
    };
    this.#live.set(request.id, live);
    const onAbort = () => {
      const output = this.scheduler.abort(request.id);
      if (output) this.#finish(live, output);
      else this.#endLive(live, 'abort');
    };
    signal.addEventListener('abort', onAbort, { once: true });
    this.#ensureLoop();
    this.#wake?.();
    const engine = this;
    return {
      [Symbol.asyncIterator]: () => live.queue,
      finishChoice(index: number) {
        const choice = live.choices[index];
        if (!choice || choice.finished) return;
        choice.finished = true;
        live.endedByServer.add(index);
        // The scheduler frees blocks per request: once every choice has ended, end it now.
        if (live.choices.every((c) => c.finished)) {
          const output = engine.scheduler.abort(request.id);
          if (output) engine.#finish(live, output);
        }
      },
    };
  }

  /** Stops the loop after in-flight steps; pending requests end with `abort`. */
  async stop(): Promise<void> {
    this.#stopping = true;
    for (const live of [...this.#live.values()]) {
      const output = this.scheduler.abort(live.request.id);
      if (output) this.#finish(live, output);
      else this.#endLive(live, 'abort');
    }
    this.#wake?.();
    await this.#loop;
    this.#dropImports();
    // Blocks being written must reach the store before the caller closes it.
    await Promise.all([...this.#pendingWrites]);
  }

  #ensureLoop(): void {
    if (this.#loop) return;
    this.#loop = this.#run().catch((error: unknown) => {
      this.#failure = error;
      this.#dropImports();
      for (const live of this.#live.values()) live.queue.fail(error);
      this.#live.clear();
    });
  }

  async #run(): Promise<void> {
    while (!this.#stopping) {
      // Imports run here, between steps: never while a plan is scheduled or running.
      if (this.#imports.length > 0) await this.#runImports();
      if (!this.scheduler.hasUnfinished() && this.#imports.length === 0) {
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
        });
        this.#wake = undefined;
        continue;
      }
      const worked = await this.step();
      // Let HTTP handlers, aborts and new requests in between steps. A step with nothing to run
      // (everything waits on blocks held elsewhere) must not spin the CPU.
      if (worked) await yieldToEventLoop();
      else await new Promise<void>((resolve) => setTimeout(resolve, 1));
    }
    this.#dropImports();
  }

  /**
   * Runs one engine step; false when the plan was empty. Exposed for embedding; the loop calls
   * it.
   */
  async step(): Promise<boolean> {
    const plan = this.scheduler.schedule();
    this.steps++;
    try {
      return await this.#runPlan(plan);
    } catch (error) {
      // Only a lost device ends the engine; any other failure ends the requests of this step.
      if (isDeviceLost(error)) throw error;
      this.#failStep(plan, error);
      return true;
    }
  }

  /**
   * Ends every request of a step that threw: their blocks are freed without entering the prefix
   * cache (the step may have left them half written), their streams fail with a clean error,
   * and every other request goes on.
   */
  #failStep(plan: BatchPlan, error: unknown): void {
    const ids = new Set<string>();
    for (const row of plan.rows) ids.add(row.requestId);
    for (const t of plan.swapOut) ids.add(t.requestId);
    for (const t of plan.swapIn) ids.add(t.requestId);
    this.#failedSteps++;
    this.#log(
      `step ${plan.step} failed (${describeError(error)}); ending its ${ids.size} request(s): ${[...ids].join(', ')}`,
    );
    for (const id of ids) {
      this.#failRequest(
        id,
        { keepCached: false },
        new EngineError('INTERNAL', 'the engine failed while running this request', {
          cause: error,
        }),
      );
    }
  }

  /** Ends one request with an error: the scheduler frees its blocks, its stream throws. */
  #failRequest(requestId: string, options: { keepCached: boolean }, error: EngineError): void {
    this.scheduler.abort(requestId, options);
    const live = this.#live.get(requestId);
    if (!live || live.finished) return;
    this.#failedRequests++;
    live.finished = true;
    this.#live.delete(requestId);
    live.queue.fail(error);
  }

  async #runPlan(plan: BatchPlan): Promise<boolean> {
    if (plan.swapOut.length > 0) await this.#swapOut(plan);
    const lost = plan.swapIn.length > 0 ? await this.#swapIn(plan) : undefined;
    if (plan.copies.length > 0) await this.runner.copyBlocks(plan.copies);
    let seqIds: Int32Array = plan.sampleSeqIds;
    let tokenIds = new Int32Array(0);
    let logprobs = new Float64Array(0);
    const numSamples = plan.logitsIndices.length;
    if (plan.numTokens > 0) {
      const logits = await this.runner.forward(plan);
      if (this.#offloadPrefix) this.#storeFullBlocks(plan);
      const vocab = this.runner.facts.vocabSize;
      tokenIds = new Int32Array(numSamples);
      logprobs = new Float64Array(numSamples);
      for (let i = 0; i < numSamples; i++) {
        const requestId = plan.rows[plan.sampleRows[i]!]!.requestId;
        const live = this.#live.get(requestId);
        const row = logits.subarray(i * vocab, (i + 1) * vocab);
        if (!live) {
          // Aborted while the step ran: the scheduler ignores its sample.
          tokenIds[i] = 0;
          continue;
        }
        const index = plan.sampleIndices[i]!;
        try {
          const result = this.#sample(live, index, row);
          tokenIds[i] = result.token;
          logprobs[i] = result.logprob ?? 0;
          this.#emitToken(live, index, result.token, result.logprob ?? 0, result.topLogprobs);
        } catch (error) {
          // The forward pass wrote this request's KV; only its sampling failed.
          tokenIds[i] = 0;
          this.#log(`sampling request ${requestId} failed (${describeError(error)})`);
          this.#failRequest(
            requestId,
            { keepCached: true },
            new EngineError('INTERNAL', 'sampling failed for this request', { cause: error }),
          );
        }
      }
    } else {
      seqIds = new Int32Array(0);
    }
    const outputs = this.scheduler.update({ seqIds, tokenIds, logprobs });
    for (const output of outputs) {
      const live = this.#live.get(output.requestId);
      if (live) this.#finish(live, output);
    }
    // Requests whose swapped-out KV could not be read back end with an error (never wrong
    // text); their blocks were hashed at swap-in but never written, so none stays cached.
    for (const requestId of lost ?? []) {
      this.#failRequest(
        requestId,
        { keepCached: false },
        new EngineError('INTERNAL', 'the KV cache of this request was lost from the offload tier'),
      );
    }
    return (
      plan.numTokens > 0 || plan.swapIn.length > 0 || plan.swapOut.length > 0 || outputs.length > 0
    );
  }

  #sample(live: Live, index: number, row: Float32Array) {
    const s = live.request.sampling;
    return this.#sampler.sample(
      row,
      {
        temperature: s.temperature,
        topP: s.topP,
        topK: s.topK,
        minP: s.minP,
        presencePenalty: s.presencePenalty,
        frequencyPenalty: s.frequencyPenalty,
        repetitionPenalty: s.repetitionPenalty,
        logprobs: live.request.logprobs !== undefined,
        topLogprobs: live.request.logprobs ?? 0,
      },
      live.choices[index]!.state,
    );
  }

  #emitToken(
    live: Live,
    index: number,
    token: number,
    logprob: number,
    top: readonly { token: number; logprob: number }[],
  ): void {
    const choice = live.choices[index]!;
    if (choice.finished) return;
    choice.generated++;
    let finishReason: FinishReason | undefined;
    if (live.stopTokens.has(token)) finishReason = 'stop';
    else if (choice.generated >= live.request.maxTokens) finishReason = 'length';
    // A stop token ends the choice but is not part of its text.
    let text = finishReason === 'stop' ? '' : choice.decoder.push(token);
    if (finishReason !== undefined) {
      text += choice.decoder.flush();
      choice.finished = true;
    }
    const codec = this.runner.codec;
    const logprobs: TokenLogprob[] | undefined =
      live.request.logprobs === undefined
        ? undefined
        : [
            {
              tokenId: token,
              token: codec.tokenText(token),
              logprob,
              top: top.map((t) => ({
                tokenId: t.token,
                token: codec.tokenText(t.token),
                logprob: t.logprob,
              })),
            },
          ];
    live.queue.push({
      kind: 'delta',
      index,
      tokenIds: [token],
      text,
      ...(logprobs ? { logprobs } : {}),
      ...(finishReason ? { finishReason } : {}),
    });
  }

  #finish(live: Live, output: RequestOutput): void {
    if (live.finished) return;
    if (output.finishReason === 'rejected') {
      live.finished = true;
      this.#live.delete(live.request.id);
      live.queue.fail(
        new EngineError(
          'PROMPT_TOO_LONG',
          output.reason ?? 'the request can never fit the KV cache',
          {
            details: { param: 'prompt' },
          },
        ),
      );
      return;
    }
    for (const seq of output.outputs) {
      const choice = live.choices[seq.index];
      if (!choice || choice.finished) continue;
      choice.finished = true;
      const reason: FinishReason =
        seq.finishReason === 'stop' ? 'stop' : seq.finishReason === 'length' ? 'length' : 'abort';
      live.queue.push({
        kind: 'delta',
        index: seq.index,
        tokenIds: [],
        text: choice.decoder.flush(),
        finishReason: reason,
      });
    }
    live.queue.push({
      kind: 'usage',
      promptTokens: output.numPromptTokens,
      cachedPromptTokens: output.numCachedPromptTokens,
      completionTokens: live.choices.reduce((sum, c) => sum + c.generated, 0),
    });
    this.#endLive(live, 'abort');
  }

  #endLive(live: Live, reason: FinishReason): void {
    if (!live.finished) {
      for (let i = 0; i < live.choices.length; i++) {
        const choice = live.choices[i]!;
        if (choice.finished) continue;
        choice.finished = true;
        live.queue.push({ kind: 'delta', index: i, tokenIds: [], text: '', finishReason: reason });
      }
    }
    live.finished = true;
    this.#live.delete(live.request.id);
    live.queue.end();
  }

  async #swapOut(plan: BatchPlan): Promise<void> {
    const store = this.#offload?.store;
    if (!store) throw new KvasirAppError('SWAP_LOST', 'swap preemption needs an offload store');
    const data = await this.runner.readBlocks(plan.swapOut.map((t) => t.gpuBlock));
    const entries = plan.swapOut.map((t, i) => {
      const key = swapKey(this.#engineId, t.hostSlot, ++this.#swapGeneration);
      this.#swapKeys.set(t.hostSlot, key);
      return { key, value: data[i]! };
    });
    const stored = await store.putMany(entries);
    if (stored !== entries.length) {
      throw new KvasirAppError(
        'SWAP_LOST',
        `the offload store kept ${stored} of ${entries.length} swapped-out blocks`,
      );
    }
  }

  /** Copies swapped blocks back; returns the requests whose blocks the store no longer had. */
  async #swapIn(plan: BatchPlan): Promise<Set<string> | undefined> {
    const store = this.#offload?.store;
    if (!store) throw new KvasirAppError('SWAP_LOST', 'swap preemption needs an offload store');
    // A slot may appear more than once (blocks shared by forked sequences); an unknown slot is a
    // lost block like any other miss.
    const keys = plan.swapIn.map((t) => this.#swapKeys.get(t.hostSlot));
    // A swapped-out block has no other copy: wait for it rather than let a deadline drop it.
    const known = [...new Set(keys.filter((k): k is string => k !== undefined))];
    const fetched = await store.fetch(known, { deadlineMs: 60_000 });
    const byKey = new Map(known.map((k, i) => [k, fetched.values[i]]));
    const values = keys.map((k) => (k === undefined ? undefined : byKey.get(k)));
    const blocks: number[] = [];
    const data: Uint8Array[] = [];
    const lostBlocks = new Set<number>();
    values.forEach((value, i) => {
      const gpuBlock = plan.swapIn[i]!.gpuBlock;
      if (value === undefined) lostBlocks.add(gpuBlock);
      else {
        blocks.push(gpuBlock);
        data.push(value);
      }
    });
    this.#swapHits += data.length;
    this.#swapMisses += lostBlocks.size;
    await this.runner.writeBlocks(blocks, data);
    // The slot will be reused; drop the copy so it does not take the tier's budget.
    for (const t of plan.swapIn) this.#swapKeys.delete(t.hostSlot);
    await store.delete(known);
    if (lostBlocks.size === 0) return undefined;
    const lost = new Set<string>();
    for (const row of plan.rows) {
      if (row.blockTable.some((b) => lostBlocks.has(b))) lost.add(row.requestId);
    }
    return lost;
  }

  /**
   * Writes the blocks that became full in this step to the offload store under their prefix
   * hash. Not awaited: the read is queued on the model after this step's forward (so it sees
   * exactly that content) and before any later write into the block.
   */
  #storeFullBlocks(plan: BatchPlan): void {
    const store = this.#offload?.store;
    if (!store) return;
    const bs = this.runner.facts.kvLayout.blockSize;
    const pool = this.kvCache.pool;
    const blocks: number[] = [];
    const keys: BlockHash[] = [];
    for (const row of plan.rows) {
      const first = row.contextLen - row.queryLen;
      // Block j is newly full when its last slot, (j + 1)·bs − 1, was computed this step.
      for (let j = Math.floor(first / bs); (j + 1) * bs <= row.contextLen; j++) {
        if ((j + 1) * bs - 1 < first) continue;
        const block = row.blockTable[j];
        if (block === undefined) continue;
        const hash = pool.hashOf(block);
        if (hash === undefined || this.#storedHashes.has(hash)) continue;
        this.#rememberStored(hash);
        blocks.push(block);
        keys.push(hash);
      }
    }
    if (blocks.length === 0) return;
    const write = this.runner
      .readBlocks(blocks)
      .then((data) => store.putMany(keys.map((key, i) => ({ key, value: data[i]! }))))
      .then((stored) => {
        this.#prefixStored += stored;
        if (stored < keys.length) {
          this.#prefixErrors++;
          for (const k of keys) this.#storedHashes.delete(k);
        }
      })
      .catch(() => {
        this.#prefixErrors++;
        for (const k of keys) this.#storedHashes.delete(k);
      });
    this.#pendingWrites.add(write);
    void write.finally(() => this.#pendingWrites.delete(write));
  }

  #forgetStored(hash: BlockHash): void {
    this.#storedHashes.delete(hash);
  }

  #rememberStored(hash: BlockHash): void {
    this.#storedHashes.add(hash);
    if (this.#storedHashes.size > STORED_HASHES_LIMIT) {
      const oldest = this.#storedHashes.values().next().value;
      if (oldest !== undefined) this.#storedHashes.delete(oldest);
    }
  }

  /**
   * Looks the prompt's blocks beyond the local GPU hit up in the offload store, fetches the ones
   * present within a deadline and waits until the engine loop has imported them (or given up).
   * Never throws: any failure means the request recomputes.
   */
  async #importPrefix(tokens: readonly number[]): Promise<void> {
    const store = this.#offload?.store;
    if (!store) return;
    try {
      const bs = this.runner.facts.kvLayout.blockSize;
      // At least the last prompt token is computed: its logits are needed.
      const maxBlocks = Math.floor((tokens.length - 1) / bs);
      if (maxBlocks <= 0) return;
      const hashes = this.kvCache.blockHashes(tokens, this.#extraKeys).slice(0, maxBlocks);
      const local = this.kvCache.findCachedPrefix(tokens, this.#extraKeys, { record: false });
      const firstBlock = local.blocks.length;
      const rest = hashes.slice(firstBlock);
      if (rest.length === 0) return;
      const started = performance.now();
      const m = await store.countPrefix(rest, { deadlineMs: PREFIX_FETCH_DEADLINE_MS });
      // A block this process wrote that the tiers no longer have (deleted, or found corrupt and
      // dropped) is written again the next time it is full.
      if (m < rest.length) this.#forgetStored(rest[m]!);
      if (m <= 0) return;
      const left = PREFIX_FETCH_DEADLINE_MS - (performance.now() - started);
      if (left <= 0) {
        this.#prefixSkipped++;
        return;
      }
      const keys = rest.slice(0, m);
      const fetched = await store.fetch(keys, { deadlineMs: left });
      // Only a leading run of well-sized blocks can extend the prefix.
      const values: Uint8Array[] = [];
      for (const v of fetched.values) {
        if (v === undefined || v.byteLength !== this.runner.facts.blockBytes) break;
        values.push(v);
      }
      // Past the deadline a miss may only be late, not lost.
      fetched.values.forEach((v, i) => {
        if (fetched.expired > 0) return;
        if (v === undefined || v.byteLength !== this.runner.facts.blockBytes) {
          this.#prefixMissing++;
          this.#forgetStored(keys[i]!);
        }
      });
      if (values.length === 0) {
        this.#prefixSkipped++;
        return;
      }
      if (this.#stopping || this.#failure !== undefined) return;
      await new Promise<void>((resolve) => {
        this.#imports.push({
          tokens,
          firstBlock,
          keys: keys.slice(0, values.length),
          values,
          done: resolve,
        });
        this.#ensureLoop();
        this.#wake?.();
      });
    } catch {
      this.#prefixErrors++;
    }
  }

  #dropImports(): void {
    const pending = this.#imports;
    this.#imports = [];
    for (const job of pending) job.done();
  }

  async #runImports(): Promise<void> {
    const pending = this.#imports;
    this.#imports = [];
    for (const job of pending) {
      try {
        await this.#importOne(job);
      } catch {
        // A failed import only means recompute; #importOne has already freed what it took.
        this.#prefixErrors++;
      } finally {
        job.done();
      }
    }
  }

  /**
   * Puts fetched blocks into the GPU prefix cache: a temporary sequence allocates them after the
   * local prefix (the allocator hashes them from the tokens), the bytes are written, and freeing
   * the sequence leaves them cached for the request's own prefix lookup.
   */
  async #importOne(job: PendingImport): Promise<void> {
    const kv = this.kvCache;
    const bs = this.runner.facts.kvLayout.blockSize;
    // The local prefix may have grown or shrunk since the lookup.
    let prefix: CachedPrefix = kv.findCachedPrefix(job.tokens, this.#extraKeys, { record: false });
    const have = prefix.blocks.length;
    const end = job.firstBlock + job.keys.length;
    if (have < job.firstBlock || have >= end) {
      if (have < job.firstBlock) this.#prefixSkipped++;
      return;
    }
    let keys = job.keys.slice(have - job.firstBlock);
    let values = job.values.slice(have - job.firstBlock);
    // One block per hash: stop before a block some other block already holds.
    const dup = keys.findIndex((k) => kv.pool.lookup(k) !== undefined);
    if (dup >= 0) {
      keys = keys.slice(0, dup);
      values = values.slice(0, dup);
    }
    if (keys.length === 0) return;
    if (!kv.isPrefixValid(prefix)) prefix = { numTokens: 0, blocks: [], hashes: [] };
    if (prefix.blocks.length !== have) {
      this.#prefixSkipped++;
      return;
    }
    const seq = `offload-import:${++this.#importSeq}`;
    const newTokens = job.tokens.slice(have * bs, (have + keys.length) * bs);
    const result = kv.allocateSlots(seq, newTokens, { prefix, extraKeys: this.#extraKeys });
    if (!result.ok) {
      this.#prefixSkipped++;
      return;
    }
    const table = kv.blockTable(seq);
    const newBlocks = table.slice(have, have + keys.length);
    const matches =
      newBlocks.length === keys.length && newBlocks.every((b, i) => kv.pool.hashOf(b) === keys[i]);
    let written = false;
    try {
      if (matches) {
        await this.runner.writeBlocks(newBlocks, values);
        written = true;
      }
    } catch {
      this.#prefixErrors++;
    } finally {
      kv.free(seq);
      if (!written) {
        this.#prefixSkipped++;
        // The new blocks carry their hashes but not their content: no request may ever hit
        // them. Dropping the whole cached prefix set is rare (device failure) and always safe.
        if (newBlocks.some((b) => kv.pool.hashOf(b) !== undefined)) kv.resetPrefixCache();
      }
    }
    if (written) this.#prefixImportedBlocks += keys.length;
  }
}
