import type { BlockPoolEvent, EvictionPolicy, ExtraKeys } from '@kvasir/kv-allocator';
import { KvCacheManager } from '@kvasir/kv-allocator';
import { Sampler, type XGrammarInstance } from '@kvasir/model';
import {
  type KvConnectorFactory,
  NO_PREFIX_OFFLOAD,
  type PrefixOffloadStats,
} from '@kvasir/offload/connectors';
import type { BatchPlan, RequestOutput, Scheduler } from '@kvasir/scheduler';
import {
  type ChatMessage,
  type ChatTemplateOptions,
  type EngineCapabilities,
  EngineError,
  type EngineHealth,
  type EngineStats,
  type GenerationRequest,
  type GenerationStream,
  type InferenceEngine,
  type ModelCard,
} from '@kvasir/server/spec';
import { admitRequest, schedulerRefusal, schedulerRequest } from './admission.js';
import { blockIoOf, createEngineConnectors, type EngineConnectors } from './engine-connectors.js';
import type { EngineSettings } from './engine-settings.js';
import { describeError, isDeviceLost } from './errors.js';
import { type KvSnapshot, kvSnapshot } from './kv-snapshot.js';
import { LiveRequest } from './live-request.js';
import { LiveRequests } from './live-requests.js';
import type { ModelRunner } from './model-runner.js';
import type { OffloadTiers } from './offload-tiers.js';
import { ENGINE_CAPABILITIES, OutputConstraints } from './output-constraints.js';
import { compressionPolicyFailure, PluginFailures } from './plugin-failures.js';
import { engineKvCompression, type KvCompressionSetup } from './plugins/kv-compression.js';
import { forwardAndSample } from './sample-step.js';
import { createScheduler, engineStats } from './scheduler-setup.js';
import { StepLoop } from './step-loop.js';

export type { PrefixOffloadStats } from '@kvasir/offload/connectors';

/** Options of {@link KvasirEngine}. */
export interface KvasirEngineOptions {
  readonly runner: ModelRunner;
  readonly config: EngineSettings;
  /**
   * Where the structured-output compiler's XGrammar instances come from, each call a fresh one
   * (`() => evaluateXGrammar(text)` in a worker). Default: `@mlc-ai/web-xgrammar` from Node's
   * `node_modules`, loaded on the first constrained request.
   */
  readonly loadXGrammar?: () => XGrammarInstance;
  /** Eviction policy of the GPU block pool (from {@link loadEvictionPolicy}). */
  readonly evictionPolicy?: EvictionPolicy<number>;
  /** Where swapped-out blocks go: the tiered store and its tiers (host, disk, Redis). */
  readonly offload?: OffloadTiers;
  /** Name clients use; default the runner's model id. */
  readonly servedModelName?: string;
  /** Where the engine reports failures it survived (a failed step); default `console.error` (stderr in Node). */
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

/** Texts longer than this (UTF-16 units, about 10 ms of tokenizing) go to the tokenizer thread. */
const OFF_THREAD_CHARS = 16 * 1024;

/**
 * The serving engine: owns the scheduler and the KV allocator, drives the model runner step by
 * step (schedule → swaps and block copies → forward → sampling → update → stream), and
 * implements the server's `InferenceEngine`. When steps run is the {@link StepLoop}'s; how a
 * request is checked before it is queued is `admission.ts`'s; how a step samples is
 * `sample-step.ts`'s; how requests end is {@link LiveRequests}'.
 */
export class KvasirEngine implements InferenceEngine {
  readonly specificationVersion = 'v1';
  readonly capabilities: EngineCapabilities = ENGINE_CAPABILITIES;
  readonly runner: ModelRunner;
  readonly config: EngineSettings;
  readonly kvCache: KvCacheManager;
  readonly scheduler: Scheduler;
  readonly modelCard: ModelCard;
  readonly #sampler = new Sampler();
  readonly #constraints: OutputConstraints;
  readonly #live: LiveRequests;
  readonly #offload: KvasirEngineOptions['offload'];
  readonly #connectors: EngineConnectors;
  readonly #loop: StepLoop;
  #stopping = false;
  #failure: unknown;
  readonly #extraKeys: ExtraKeys;
  readonly #kvCompression: KvCompressionSetup;
  readonly #pluginFailures: PluginFailures;
  readonly #log: (line: string) => void;
  /** Steps run so far (for tests and benchmarks). */
  steps = 0;

  constructor(options: KvasirEngineOptions) {
    const { runner, config } = options;
    this.runner = runner;
    this.config = config;
    this.#offload = options.offload;
    this.#log = options.log ?? ((line) => console.error(`kvasir: ${line}`));
    this.#pluginFailures = new PluginFailures(this.#log);
    const facts = runner.facts;
    this.kvCache = new KvCacheManager({
      numBlocks: facts.numBlocks,
      blockSize: facts.kvLayout.blockSize,
      enablePrefixCaching: config.enablePrefixCaching,
      ...(facts.kvGroups ? { groups: facts.kvGroups.map((window) => ({ window })) } : {}),
      ...(options.evictionPolicy ? { evictionPolicy: options.evictionPolicy } : {}),
      onEvictionPolicyFailure: (error) =>
        this.#pluginFailures.record(`eviction:${String(error.details?.policy)}`, error.message),
      ...(options.kvEvents ? { onBlockEvent: options.kvEvents.onBlockEvent } : {}),
    });
    this.scheduler = createScheduler(config, this.kvCache, facts, this.#offload);
    this.#live = new LiveRequests(this.scheduler, this.#log);
    const scheduler = config.jumpForward ? this.scheduler : undefined;
    this.#constraints = new OutputConstraints(runner, scheduler, options.loadXGrammar);
    this.#kvCompression = engineKvCompression(options.kvCompression, facts);
    this.modelCard = {
      id: options.servedModelName ?? config.servedModelName ?? facts.modelId,
      created: Math.floor(Date.now() / 1000),
      ownedBy: 'kvasir',
      maxModelLen: this.scheduler.maxModelLen,
      vocabSize: facts.vocabSize,
      ...(runner.codec.maxTextBytesPerToken === undefined
        ? {}
        : { maxTextBytesPerToken: runner.codec.maxTextBytesPerToken }),
      ...(this.#kvCompression.defaultSpec?.positions === 'cache' ? { unboundedContext: true } : {}),
      ...(runner.codec.toolCallFormat ? { toolCallFormat: runner.codec.toolCallFormat } : {}),
    };
    this.#extraKeys = { modelId: this.modelCard.id };
    this.#loop = new StepLoop(
      {
        hasPendingWork: () => this.#connectors.hasPendingWork,
        betweenSteps: () => this.#connectors.betweenSteps(),
        hasRequests: () => this.scheduler.hasUnfinished(),
        step: () => this.step(),
        // One KV event batch per step (encoding and sending happen off the step's path).
        afterStep: () => options.kvEvents?.flush(),
      },
      (error) => {
        this.#failure = error;
        void this.#connectors.close();
        for (const live of this.#live.values()) live.fail(error);
        this.#live.clear();
      },
    );
    this.#connectors = createEngineConnectors(
      config,
      this.#offload,
      {
        kvCache: this.kvCache,
        device: blockIoOf(runner),
        extraKeys: this.#extraKeys,
        wake: () => {
          this.#loop.start();
          this.#loop.wake();
        },
      },
      options.connectors ?? [],
      (name, message) => this.#pluginFailures.record(`kv-connector:${name}`, message),
    );
  }

  listModels(): readonly ModelCard[] {
    return [this.modelCard];
  }

  async tokenize(_model: string, text: string): Promise<readonly number[]> {
    const codec = this.runner.codec;
    try {
      // A long text takes seconds to tokenize: off the event loop, so HTTP keeps being served.
      return codec.encodeOffThread && text.length > OFF_THREAD_CHARS
        ? await codec.encodeOffThread(text, true)
        : codec.encode(text);
    } catch (error) {
      throw new EngineError('INVALID_REQUEST', `prompt: ${(error as Error).message}`, {
        cause: error,
        details: { param: 'prompt' },
      });
    }
  }

  async applyChatTemplate(
    _model: string,
    messages: readonly ChatMessage[],
    options?: ChatTemplateOptions,
  ): Promise<readonly number[]> {
    const codec = this.runner.codec;
    try {
      const chars = messages.reduce((sum, m) => sum + m.content.length, 0);
      if (codec.encodeOffThread && codec.renderChat && chars > OFF_THREAD_CHARS) {
        return await codec.encodeOffThread(codec.renderChat(messages, options), false);
      }
      return codec.applyChatTemplate(messages, options);
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

  /**
   * The paged KV cache now: each block's reference count and prefix-cache flag, and each live
   * request's block table (see {@link KvSnapshot}). Built on each call, O(blocks); nothing is
   * kept or computed for it between calls.
   */
  kvSnapshot(): KvSnapshot {
    return kvSnapshot(this.kvCache, this.scheduler);
  }

  stats(): EngineStats {
    return {
      ...engineStats(this.kvCache, this.scheduler, this.#offload, {
        steps: this.#live.failedSteps,
        requests: this.#live.failedRequests,
      }),
      stalledStreams: this.#live.stalledStreams,
    };
  }

  /** Failures of users' plug-ins since start, by `kind:name` (see {@link PluginFailures}). */
  pluginFailures(): Readonly<Record<string, number>> {
    return this.#pluginFailures.counts();
  }

  /** Whether full blocks go to the offload tiers and prompts' prefixes are imported from them. */
  get prefixOffloadEnabled(): boolean {
    return this.#connectors.prefixOffload !== undefined;
  }

  /** Prefix offload counters (all zero when prefix offload is off). */
  prefixOffloadStats(): PrefixOffloadStats {
    return this.#connectors.prefixOffload?.stats() ?? NO_PREFIX_OFFLOAD;
  }

  /** Names of the KV connectors, in the order they are called (built-ins first). */
  get connectorNames(): readonly string[] {
    return this.#connectors.all.map((c) => c.name);
  }

  /** Swap-ins served by the offload store, and ones it could not serve. */
  swapStats(): { hits: number; misses: number } {
    return this.#connectors.swap?.stats() ?? { hits: 0, misses: 0 };
  }

  async generate(request: GenerationRequest, signal: AbortSignal): Promise<GenerationStream> {
    if (this.#stopping || this.#failure !== undefined) {
      throw new EngineError('DRAINING', 'engine is shutting down');
    }
    if (signal.aborted) throw new EngineError('INVALID_REQUEST', 'request was aborted');
    const kvCompression = this.#kvCompression.forRequest(request.kvCompression);
    const stopTokens = admitRequest(request, kvCompression, {
      facts: this.runner.facts,
      waiting: this.scheduler.metrics().numWaiting,
      maxWaiting: this.config.maxWaiting,
      maxModelLen: this.scheduler.maxModelLen,
      kvCompressionMaxPromptTokens: this.config.kvCompressionMaxPromptTokens,
      kvCompressionMaxTokens: this.config.kvCompressionMaxTokens,
    });
    if (this.#connectors.admits) {
      await this.#connectors.onAdmit({ requestId: request.id, promptTokens: request.promptTokens });
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
    let forced: number[];
    try {
      forced = this.#constraints.forcedPrefix(request, constraints, stopTokens);
      // The forced tokens are prefilled with the prompt (the live request streams them).
      const scheduled =
        forced.length === 0
          ? request
          : {
              ...request,
              promptTokens: [...request.promptTokens, ...forced],
              maxTokens: request.maxTokens - forced.length,
            };
      this.scheduler.add(schedulerRequest(scheduled, stopTokens, this.#extraKeys, kvCompression));
    } catch (error) {
      release();
      throw schedulerRefusal(error, request, this.scheduler.maxModelLen, (plugin, message) =>
        this.#pluginFailures.record(plugin, message),
      );
    }
    const live = new LiveRequest(request, this.runner.codec, stopTokens, constraints, forced);
    this.#live.set(request.id, live);
    const onAbort = () => {
      this.#live.abort(live);
      // Its blocks may be what a waiting request needs.
      this.#loop.wake();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    this.#loop.start();
    this.#loop.wake();
    return live.queue;
  }

  /** Stops the loop after in-flight steps; pending requests end with `abort`. */
  async stop(): Promise<void> {
    this.#stopping = true;
    for (const live of [...this.#live.values()]) {
      this.#live.end(live, this.scheduler.abort(live.request.id));
    }
    await this.#loop.stop();
    await Promise.all([this.#connectors.close(), this.#constraints.close()]);
  }

  /**
   * Tells the loop how many connections the host has accepted so far (`kvasir serve`: its HTTP
   * server's), so that it lets them in between steps (see {@link StepLoop.watchAcceptedConnections}).
   */
  watchAcceptedConnections(accepted: () => number): void {
    this.#loop.watchAcceptedConnections(accepted);
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
      this.#live.failSchedule(this.steps + 1, error);
      return true;
    }
    this.steps++;
    try {
      return await this.#runPlan(plan);
    } catch (error) {
      // Only a lost device ends the engine; any other failure ends the requests of this step.
      if (isDeviceLost(error)) throw error;
      this.#live.failStep(plan, error);
      return true;
    }
  }

  async #runPlan(plan: BatchPlan): Promise<boolean> {
    const lost = await this.#connectors.beforeForward(plan);
    if (plan.copies.length > 0) await this.runner.copyBlocks(plan.copies);
    const sampled = await forwardAndSample(plan, {
      runner: this.runner,
      sampler: this.#sampler,
      live: this.#live,
      afterForward: () => this.#connectors.afterForward(plan),
      sampleFailed: (requestId, error) => {
        // The forward pass wrote this request's KV; only its sampling failed.
        this.#log(`sampling request ${requestId} failed (${describeError(error)})`);
        this.#live.fail(requestId, true, 'sampling failed for this request', error);
      },
      jumpForward: this.#constraints.jumpForward,
    });
    let outputs: RequestOutput[];
    try {
      outputs = this.scheduler.update(sampled);
    } catch (error) {
      // A compression policy failed for some sequences: the step is applied to every request,
      // and only those whose policy failed end.
      const failed = compressionPolicyFailure(error);
      if (!failed) throw error;
      const { plugin, requestIds } = failed;
      this.#pluginFailures.record(plugin, (error as Error).message, requestIds.length);
      for (const id of requestIds) {
        this.#live.fail(id, false, 'its KV compression policy failed', error);
      }
      outputs = this.scheduler.update();
    }
    for (const output of outputs) {
      const live = this.#live.get(output.requestId);
      if (live) this.#live.end(live, output);
    }
    // The scheduler frees blocks per request: once stop strings have ended every choice, end it.
    for (const live of sampled.stopped) {
      if (live.ended || !live.allChoicesFinished) continue;
      const output = this.scheduler.abort(live.request.id);
      if (output) this.#live.end(live, output);
    }
    // Requests whose swapped-out KV could not be read back end with an error (never wrong
    // text); their blocks were hashed at swap-in but never written, so none stays cached.
    for (const id of lost) this.#live.fail(id, false, 'its swapped-out KV cache was lost');
    this.#live.dropStalled(this.config.maxUnreadEvents);
    return (
      plan.numTokens > 0 || plan.swapIn.length > 0 || plan.swapOut.length > 0 || outputs.length > 0
    );
  }
}
