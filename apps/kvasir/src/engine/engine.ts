import type { BlockPoolEvent, EvictionPolicy, ExtraKeys } from '@kvasir/kv-allocator';
import { KvCacheManager } from '@kvasir/kv-allocator';
import { Sampler } from '@kvasir/model';
import {
  type KvConnector,
  type KvConnectorFactory,
  NO_PREFIX_OFFLOAD,
  type PrefixOffloadConnector,
  type PrefixOffloadStats,
  type SwapConnector,
} from '@kvasir/offload/connectors';
import {
  type BatchPlan,
  type RequestOutput,
  type Scheduler,
  SchedulerError,
} from '@kvasir/scheduler';
import {
  type ChatMessage,
  EngineError,
  type EngineHealth,
  type EngineStats,
  type GenerationRequest,
  type GenerationStream,
  type InferenceEngine,
  type ModelCard,
} from '@kvasir/server/spec';
import type { EngineConfig } from '../config.js';
import { blockIoOf, createEngineConnectors } from '../connectors/engine-connectors.js';
import type { OffloadTiers } from '../connectors/offload-tiers.js';
import { describeError, isDeviceLost } from '../errors.js';
import { type KvCompressionSetup, kvCompressionSetup } from '../plugins/kv-compression.js';
import { admit } from './admission.js';
import { LiveRequest } from './live-request.js';
import type { ModelRunner } from './model-runner.js';
import { OutputConstraints, prepareMasks } from './output-constraints.js';
import { promptLogitRows, recordPromptLogits } from './prompt-logits.js';
import { createScheduler, engineStats } from './scheduler-setup.js';

export type { PrefixOffloadStats } from '@kvasir/offload/connectors';

/** Options of {@link KvasirEngine}. */
export interface KvasirEngineOptions {
  readonly runner: ModelRunner;
  readonly config: EngineConfig;
  /** Eviction policy of the GPU block pool (from {@link loadEvictionPolicy}). */
  readonly evictionPolicy?: EvictionPolicy<number>;
  /** Where swapped-out blocks go: the tiered store and its tiers (host, disk, Redis). */
  readonly offload?: OffloadTiers;
  /** Name clients use; default the runner's model id. */
  readonly servedModelName?: string;
  /** Where the engine reports failures it survived (a failed step); default stderr. */
  readonly log?: (line: string) => void;
  /** Token-level KV compression: the default and a user's policy (from {@link loadKvCompression}). */
  readonly kvCompression?: KvCompressionSetup;
  /**
   * KV connectors of the user's (`@kvasir/offload/connectors`), made once the allocator exists
   * and called after the built-in swap and prefix-offload connectors, in this order.
   */
  readonly connectors?: readonly KvConnectorFactory[];
  /**
   * Where the block pool's events go (a {@link KvEventPublisher}): `onBlockEvent` is the
   * allocator's hook, `flush` is called after each step to publish that step's batch.
   */
  readonly kvEvents?: {
    readonly onBlockEvent: (event: BlockPoolEvent) => void;
    flush(): void;
  };
}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));
/** Longest sleep of the loop between retries of a step that had nothing to run. */
const MAX_RETRY_MS = 1000;

/**
 * The serving engine: owns the scheduler and the KV allocator, drives the model runner step by
 * step (schedule → swaps and block copies → forward → sampling → update → stream), and
 * implements the server's `InferenceEngine`.
 *
 * The loop yields to the event loop between steps (`setImmediate`), so HTTP traffic, aborts and
 * new requests are handled while a long generation runs.
 */
export class KvasirEngine implements InferenceEngine {
  readonly specificationVersion = 'v1';
  readonly runner: ModelRunner;
  readonly config: EngineConfig;
  readonly kvCache: KvCacheManager;
  readonly scheduler: Scheduler;
  readonly modelCard: ModelCard;
  readonly #sampler = new Sampler();
  readonly #constraints: OutputConstraints;
  readonly #live = new Map<string, LiveRequest>();
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
  readonly #kvCompression: KvCompressionSetup;
  #failedSteps = 0;
  #failedRequests = 0;
  /** Failures of users' plug-ins, by `kind:name` (`eviction:mru`). */
  readonly #pluginFailures = new Map<string, number>();
  readonly #log: (line: string) => void;
  readonly #kvEvents: KvasirEngineOptions['kvEvents'];
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
      onEvictionPolicyFailure: (error) =>
        this.#pluginFailed(`eviction:${String(error.details?.policy)}`, error.message),
      ...(options.kvEvents ? { onBlockEvent: options.kvEvents.onBlockEvent } : {}),
    });
    this.#kvEvents = options.kvEvents;
    this.scheduler = createScheduler(config, this.kvCache, facts, this.#offload);
    this.#constraints = new OutputConstraints(runner);
    this.#kvCompression = options.kvCompression ?? kvCompressionSetup(facts.kvLayout.blockSize);
    this.modelCard = {
      id: options.servedModelName ?? config.servedModelName ?? facts.modelId,
      created: Math.floor(Date.now() / 1000),
      ownedBy: 'kvasir',
      maxModelLen: this.scheduler.maxModelLen,
      vocabSize: facts.vocabSize,
      ...(this.#kvCompression.defaultSpec?.positions === 'cache' ? { unboundedContext: true } : {}),
    };
    this.#extraKeys = { modelId: this.modelCard.id };
    const connectors = createEngineConnectors(
      config,
      this.#offload,
      {
        kvCache: this.kvCache,
        device: blockIoOf(runner),
        extraKeys: this.#extraKeys,
        wake: () => {
          this.#ensureLoop();
          this.#wake?.();
        },
      },
      options.connectors,
    );
    this.#swap = connectors.swap;
    this.#prefixOffload = connectors.prefixOffload;
    this.#connectors = connectors.all;
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
    return engineStats(this.kvCache, this.scheduler, this.#offload, {
      steps: this.#failedSteps,
      requests: this.#failedRequests,
    });
  }

  /**
   * Failures of users' plug-ins since start, by `kind:name` (`eviction:mru`,
   * `kv-compression:first-and-last`): hooks that threw, returned what their contract forbids, or
   * overran their time budget. An eviction policy's first failure replaces it by LRU; a KV
   * compression policy's fails the requests it was deciding for.
   */
  pluginFailures(): Readonly<Record<string, number>> {
    return Object.fromEntries(this.#pluginFailures);
  }

  /** Counts a plug-in failure; the first of each plug-in is logged (the rest only counted). */
  #pluginFailed(plugin: string, message: string, count = 1): void {
    const seen = this.#pluginFailures.get(plugin) ?? 0;
    this.#pluginFailures.set(plugin, seen + count);
    if (seen === 0) {
      this.#log(`plug-in ${plugin} failed: ${message} (further failures are counted in /metrics)`);
    }
  }

  /** Whether full blocks go to the offload tiers and prompts' prefixes are imported from them. */
  get prefixOffloadEnabled(): boolean {
    return this.#prefixOffload !== undefined;
  }

  /** Prefix offload counters (all zero when prefix offload is off). */
  prefixOffloadStats(): PrefixOffloadStats {
    return this.#prefixOffload?.stats() ?? NO_PREFIX_OFFLOAD;
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
    const kvCompression = this.#kvCompression.forRequest(request.kvCompression);
    if (kvCompression && request.echo && request.logprobs !== undefined) {
      // Prompt log-probabilities are placed by position, which a compressed cache renumbers;
      // `kvasir eval --kv-compression` scores a compressed context instead.
      throw new EngineError(
        'INVALID_REQUEST',
        'kv_compression: not supported with echo and logprobs (use kvasir eval --kv-compression to score a compressed context)',
        { details: { param: 'kv_compression' } },
      );
    }
    const stopTokens = admit(
      request,
      this.runner.facts,
      { waiting: this.scheduler.metrics().numWaiting, maxWaiting: this.config.maxWaiting },
      kvCompression !== undefined && kvCompression.policy.attention !== 'prefill-end',
      kvCompression
        ? {
            maxPromptTokens: this.config.kvCompressionMaxPromptTokens,
            maxTokens: this.config.kvCompressionMaxTokens,
            // Past the context only a policy streaming the prompt in cache positions.
            maxModelLen:
              kvCompression.positions === 'cache' &&
              kvCompression.policy.attention !== 'prefill-end'
                ? Number.POSITIVE_INFINITY
                : this.scheduler.maxModelLen,
          }
        : undefined,
    );
    if (this.#connectors.some((c) => c.onAdmit)) {
      const admitted = { requestId: request.id, promptTokens: request.promptTokens };
      for (const c of this.#connectors) await c.onAdmit?.(admitted);
      if (this.#stopping || this.#failure !== undefined) {
        throw new EngineError('DRAINING', 'engine is shutting down');
      }
      if (signal.aborted) throw new EngineError('INVALID_REQUEST', 'request was aborted');
    }
    // Compiled before any decoding: a constraint that cannot compile is the client's 400.
    const constraints = await this.#constraints.admit(request);
    const release = () => {
      for (const m of constraints.matchers) m.dispose();
    };
    if (this.#stopping || this.#failure !== undefined || signal.aborted) {
      release();
      throw signal.aborted
        ? new EngineError('INVALID_REQUEST', 'request was aborted')
        : new EngineError('DRAINING', 'engine is shutting down');
    }
    try {
      this.scheduler.add({
        id: request.id,
        promptTokenIds: request.promptTokens,
        // Scoring only (echo, max_tokens 0): one token is generated and never shown.
        maxTokens: Math.max(1, request.maxTokens),
        n: request.n,
        stopTokenIds: [...stopTokens],
        ignoreEos: request.ignoreEos,
        extraKeys: this.#extraKeys,
        // Cached prefix tokens would have no logits: prompt log-probabilities need them all.
        ...(request.echo && request.logprobs !== undefined ? { skipPrefixCache: true } : {}),
        ...(kvCompression ? { kvCompression } : {}),
      });
    } catch (error) {
      release();
      if (SchedulerError.isInstance(error) && error.code === 'INVALID_POLICY') {
        // The server's compression plug-in failed (its maxBlocks), not the client's request.
        this.#pluginFailed(`kv-compression:${String(error.details?.policy)}`, error.message);
        throw new EngineError('INTERNAL', `kv_compression: ${error.message}`, { cause: error });
      }
      if (SchedulerError.isInstance(error)) {
        // The scheduler names its own field (`details.field`); the client sent `kv_compression`.
        const field = error.details?.field;
        if (
          field === 'promptTokenIds' &&
          request.promptTokens.length > this.scheduler.maxModelLen
        ) {
          // A policy that keeps every prompt token until prefill ends (SnapKV) cannot run a
          // prompt past the context, whatever positions it uses.
          throw new EngineError(
            'PROMPT_TOO_LONG',
            `prompt: ${request.promptTokens.length} tokens, over the model's context of ${this.scheduler.maxModelLen}; this kv_compression policy needs the whole prompt in the cache`,
            { cause: error, details: { param: 'prompt' } },
          );
        }
        throw typeof field === 'string' && field.startsWith('kvCompression')
          ? new EngineError(
              'INVALID_REQUEST',
              `kv_compression${field.slice('kvCompression'.length)}: ${error.message.slice(field.length + 2)}`,
              { cause: error, details: { param: 'kv_compression' } },
            )
          : new EngineError('INVALID_REQUEST', error.message, { cause: error });
      }
      throw error;
    }
    const live = new LiveRequest(request, this.runner.codec, stopTokens, constraints);
    this.#live.set(request.id, live);
    const onAbort = () => {
      // A listener that throws would take the whole process down: end this request whatever
      // happens, and log what went wrong.
      try {
        this.#end(live, this.scheduler.abort(request.id));
      } catch (error) {
        this.#log(`aborting request ${request.id} failed (${describeError(error)})`);
        this.#live.delete(request.id);
        live.fail(new EngineError('INTERNAL', 'aborting the request failed', { cause: error }));
      }
      // Its blocks may be what a waiting request needs.
      this.#wake?.();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    this.#ensureLoop();
    this.#wake?.();
    return live.queue;
  }

  /** Stops the loop after in-flight steps; pending requests end with `abort`. */
  async stop(): Promise<void> {
    this.#stopping = true;
    for (const live of [...this.#live.values()]) {
      this.#end(live, this.scheduler.abort(live.request.id));
    }
    this.#wake?.();
    await this.#loop;
    await Promise.all([...this.#connectors.map((c) => c.close()), this.#constraints.close()]);
  }

  #ensureLoop(): void {
    if (this.#loop) return;
    this.#loop = this.#run().catch((error: unknown) => {
      this.#failure = error;
      for (const c of this.#connectors) void c.close();
      for (const live of this.#live.values()) live.fail(error);
      this.#live.clear();
    });
  }

  async #run(): Promise<void> {
    const pending = () => this.#connectors.some((c) => c.hasPendingWork);
    let retryMs = 1;
    while (!this.#stopping) {
      // Connector work that changes the allocator runs here, never while a plan is in flight.
      for (const c of this.#connectors) if (c.hasPendingWork) await c.betweenSteps?.();
      if (!this.scheduler.hasUnfinished() && !pending()) {
        await this.#sleep();
        continue;
      }
      const worked = await this.step();
      // One KV event batch per step (encoding and sending happen off the step's path).
      this.#kvEvents?.flush();
      // Let HTTP handlers, aborts and new requests in between steps.
      if (worked) {
        retryMs = 1;
        await yieldToEventLoop();
        continue;
      }
      // Nothing could run: everything waits on blocks held elsewhere. A new request, an abort
      // or a connector wakes the loop; the retry, backing off to once a second, covers what
      // changes without telling it, at no cost to an engine that waits for long.
      await this.#sleep(retryMs);
      retryMs = Math.min(2 * retryMs, MAX_RETRY_MS);
    }
  }

  /** Sleeps until {@link #wake} is called, or `ms` milliseconds have passed when given. */
  #sleep(ms?: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = ms === undefined ? undefined : setTimeout(() => this.#wake?.(), ms);
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = undefined;
        resolve();
      };
    });
  }

  /**
   * Runs one engine step; false when the plan was empty. Exposed for embedding; the loop calls
   * it.
   */
  async step(): Promise<boolean> {
    let plan: BatchPlan;
    try {
      plan = this.scheduler.schedule();
    } catch (error) {
      // Plug-ins cannot make planning throw (the pool falls back, compression limits are read
      // at admission), so this is a bug; the engine keeps serving, without what it held.
      if (isDeviceLost(error)) throw error;
      this.#failSchedule(error);
      return true;
    }
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
    for (const id of ids) this.#failRequest(id, false, 'the engine failed on this request', error);
  }

  /**
   * Ends every live request after planning a step threw: which requests the half-built plan
   * had touched is unknown, so none of their blocks is trusted or kept for prefix reuse.
   */
  #failSchedule(error: unknown): void {
    this.#failedSteps++;
    const ids = [...this.#live.keys()];
    this.#log(
      `planning step ${this.steps + 1} failed (${describeError(error)}); ending ${ids.length} request(s): ${ids.join(', ')}`,
    );
    for (const id of ids) {
      try {
        this.#failRequest(id, false, 'the engine could not plan a step for it', error);
      } catch (abortError) {
        this.#log(`ending request ${id} failed (${describeError(abortError)})`);
        this.#live
          .get(id)
          ?.fail(new EngineError('INTERNAL', 'the engine failed', { cause: error }));
        this.#live.delete(id);
      }
    }
  }

  /**
   * Ends one request with an `INTERNAL` error: the scheduler frees its blocks (kept for prefix
   * reuse only when their content is sound), its stream throws.
   */
  #failRequest(id: string, keepCached: boolean, message: string, cause?: unknown): void {
    this.scheduler.abort(id, { keepCached });
    const live = this.#live.get(id);
    if (!live || live.ended) return;
    this.#failedRequests++;
    this.#live.delete(id);
    live.fail(new EngineError('INTERNAL', message, { cause }));
  }

  /** Ends a request's stream: with the scheduler's output when it has one, else as aborted. */
  #end(live: LiveRequest, output: RequestOutput | undefined): void {
    if (output) live.finish(output);
    else live.end('abort');
    this.#live.delete(live.request.id);
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
    /** Requests a stop string ended a choice of in this step. */
    const stopped = new Set<LiveRequest>();
    const numSamples = plan.logitsIndices.length;
    if (plan.numTokens > 0) {
      const prompt = promptLogitRows(plan, this.#live);
      const pendingMasks = prepareMasks(plan, this.#live);
      const logits = await this.runner.forward(
        prompt ? { ...plan, logitsIndices: prompt.logitsIndices } : plan,
      );
      const masks = pendingMasks && (await pendingMasks);
      for (const c of this.#connectors) c.afterForward?.(plan);
      const vocab = this.runner.facts.vocabSize;
      if (prompt) recordPromptLogits(prompt, logits, numSamples, vocab);
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
          const mask = masks?.[i];
          if (mask instanceof Error) throw mask;
          const result = live.sample(this.#sampler, index, row, mask);
          tokenIds[i] = result.token;
          logprobs[i] = result.logprob ?? 0;
          if (live.emitToken(index, result.token, result.logprob ?? 0, result.topLogprobs)) {
            stopped.add(live);
          }
        } catch (error) {
          // The forward pass wrote this request's KV; only its sampling failed.
          tokenIds[i] = 0;
          this.#log(`sampling request ${requestId} failed (${describeError(error)})`);
          this.#failRequest(requestId, true, 'sampling failed for this request', error);
        }
      }
    } else {
      seqIds = new Int32Array(0);
    }
    let outputs: RequestOutput[];
    try {
      outputs = this.scheduler.update({ seqIds, tokenIds, logprobs });
    } catch (error) {
      // A compression policy failed for some sequences: the step is applied to every request,
      // and only those whose policy failed end.
      const ids =
        error instanceof Error &&
        SchedulerError.isInstance(error) &&
        error.code === 'INVALID_POLICY'
          ? error.details?.requestIds
          : undefined;
      if (!Array.isArray(ids)) throw error;
      this.#pluginFailed(
        `kv-compression:${String((error as SchedulerError).details?.policy)}`,
        (error as Error).message,
        ids.length,
      );
      for (const id of ids) {
        this.#failRequest(String(id), false, 'its KV compression policy failed', error);
      }
      outputs = this.scheduler.update();
    }
    for (const output of outputs) {
      const live = this.#live.get(output.requestId);
      if (live) this.#end(live, output);
    }
    // The scheduler frees blocks per request: once stop strings have ended every choice, end it.
    for (const live of stopped) {
      if (live.ended || !live.allChoicesFinished) continue;
      const output = this.scheduler.abort(live.request.id);
      if (output) this.#end(live, output);
    }
    // Requests whose swapped-out KV could not be read back end with an error (never wrong
    // text); their blocks were hashed at swap-in but never written, so none stays cached.
    for (const id of lost) this.#failRequest(id, false, 'its swapped-out KV cache was lost');
    return (
      plan.numTokens > 0 || plan.swapIn.length > 0 || plan.swapOut.length > 0 || outputs.length > 0
    );
  }
}
