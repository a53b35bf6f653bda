import { KvasirError } from '@kvasir/errors';
import type { EvictionPolicy, ExtraKeys } from '@kvasir/kv-allocator';
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
import type { KvConnector } from './kv-connector.js';
import { PrefixOffloadConnector, type PrefixOffloadStats } from './prefix-offload-connector.js';
import type { IncrementalDecoder, ModelRunner } from './runner.js';
import { SwapConnector } from './swap-connector.js';

export type { PrefixOffloadStats } from './prefix-offload-connector.js';

/** Options of {@link KvasirEngine}. */
export interface KvasirEngineOptions {
  readonly runner: ModelRunner;
  readonly config: EngineConfig;
  /** Eviction policy of the GPU block pool (from {@link loadEvictionPolicy}). */
  readonly evictionPolicy?: EvictionPolicy<number>;
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
  readonly #swap: SwapConnector | undefined;
  readonly #prefixOffload: PrefixOffloadConnector | undefined;
  /** Called at fixed points of each request and step, in this order. */
  readonly #connectors: readonly KvConnector[];
  #wake: (() => void) | undefined;
  #loop: Promise<void> | undefined;
  #stopping = false;
  #failure: unknown;
  readonly #extraKeys: ExtraKeys;
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
    const offload = this.#offload;
    this.#swap =
      offload && config.preemptionMode === 'swap'
        ? new SwapConnector(runner, offload.store)
        : undefined;
    this.#prefixOffload =
      offload &&
      config.enablePrefixCaching &&
      (config.offloadPrefix ?? !(config.preemptionMode === 'swap' && hostOnly))
        ? new PrefixOffloadConnector({
            runner,
            kvCache: this.kvCache,
            store: offload.store,
            extraKeys: this.#extraKeys,
            wake: () => {
              this.#ensureLoop();
              this.#wake?.();
            },
          })
        : undefined;
    this.#connectors = [this.#swap, this.#prefixOffload].filter(
      (c): c is NonNullable<typeof c> => c !== undefined,
    );
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
    return this.#prefixOffload !== undefined;
  }

  /** Prefix offload counters (all zero when prefix offload is off). */
  prefixOffloadStats(): PrefixOffloadStats {
    return (
      this.#prefixOffload?.stats() ?? {
        storedBlocks: 0,
        importedBlocks: 0,
        importedTokens: 0,
        skippedImports: 0,
        errors: 0,
        missingBlocks: 0,
      }
    );
  }

  /** Swap-ins served by the offload store, and ones it could not serve. */
  swapStats(): { hits: number; misses: number } {
    return this.#swap?.stats() ?? { hits: 0, misses: 0 };
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
    if (this.#connectors.some((c) => c.onAdmit)) {
      for (const c of this.#connectors) await c.onAdmit?.(request.promptTokens);
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
    await Promise.all(this.#connectors.map((c) => c.close()));
  }

  #ensureLoop(): void {
    if (this.#loop) return;
    this.#loop = this.#run().catch((error: unknown) => {
      this.#failure = error;
      for (const c of this.#connectors) void c.close();
      for (const live of this.#live.values()) live.queue.fail(error);
      this.#live.clear();
    });
  }

  async #run(): Promise<void> {
    const pending = () => this.#connectors.some((c) => c.hasPendingWork);
    while (!this.#stopping) {
      // Connector work that changes the allocator runs here, never while a plan is in flight.
      for (const c of this.#connectors) if (c.hasPendingWork) await c.betweenSteps?.();
      if (!this.scheduler.hasUnfinished() && !pending()) {
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
    const lost = new Set<string>();
    for (const c of this.#connectors) {
      for (const id of (await c.beforeForward?.(plan)) ?? []) lost.add(id);
    }
    if (plan.copies.length > 0) await this.runner.copyBlocks(plan.copies);
    let seqIds: Int32Array = plan.sampleSeqIds;
    let tokenIds = new Int32Array(0);
    let logprobs = new Float64Array(0);
    const numSamples = plan.logitsIndices.length;
    if (plan.numTokens > 0) {
      const logits = await this.runner.forward(plan);
      for (const c of this.#connectors) c.afterForward?.(plan);
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
    for (const requestId of lost) {
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
}
