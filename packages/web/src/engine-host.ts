// The worker side: loads the model, runs one KvasirEngine, and answers the page's messages.
import {
  engineSettings,
  KvasirEngine,
  kvLayoutFor,
  planMemory,
  runnerForModel,
  textCodecFor,
} from '@kvasir/engine';
import {
  evaluateXGrammar,
  loadModel,
  ModelTokenizer,
  openGgufBytes,
  probeBackends,
} from '@kvasir/model';
import type { GenerationRequest } from '@kvasir/server/spec';
import { chooseWebBackend, type PageCapabilities } from './backend-choice.js';
import { errorData, WebEngineError } from './errors.js';
import { type ModelSourceEnv, modelBytes } from './model-source.js';
import { opfsOption } from './opfs-option.js';
import type { OpfsStore } from './opfs-store.js';
import { openOpfsTier, weightDigestOf } from './opfs-tier.js';
import type { FromWorker, GenerateMessage, InitMessage, ToWorker } from './protocol.js';

/** The worker's globals this host uses. */
export interface WorkerScope extends ModelSourceEnv {
  onmessage: ((event: { data: ToWorker }) => void) | null;
  postMessage(message: FromWorker): void;
  readonly crossOriginIsolated?: boolean;
  readonly navigator?: {
    readonly hardwareConcurrency?: number;
    readonly gpu?: {
      requestAdapter(): Promise<{
        readonly info?: {
          readonly isFallbackAdapter?: boolean;
          readonly vendor?: string;
          readonly architecture?: string;
          readonly description?: string;
        };
      } | null>;
    };
    readonly storage?: ModelSourceEnv['storage'] & {
      getDirectory?: () => Promise<FileSystemDirectoryHandle>;
    };
  };
}

async function pageCapabilities(scope: WorkerScope): Promise<PageCapabilities> {
  let webgpu: PageCapabilities['webgpu'] = null;
  try {
    const adapter = await scope.navigator?.gpu?.requestAdapter();
    if (adapter) {
      const info = adapter.info ?? {};
      const description =
        [info.vendor, info.architecture, info.description].filter(Boolean).join(' ') ||
        'WebGPU adapter';
      // SwiftShader, Chromium's software adapter, reports itself as a fallback adapter.
      const isSoftware = info.isFallbackAdapter === true || /swiftshader/i.test(description);
      webgpu = { isSoftware, description };
    }
  } catch {
    webgpu = null;
  }
  const probe = await probeBackends({ webgpu: null });
  return {
    webgpu,
    crossOriginIsolated: scope.crossOriginIsolated === true,
    wasmSimd: probe.wasm.simd128,
    wasmSharedMemory: probe.wasm.threads,
    cores: scope.navigator?.hardwareConcurrency ?? 1,
  };
}

/**
 * XGrammar's bundle as text: a chunk of its own (1.1 MB), imported on the first request with
 * structured output, so pages that never constrain output never fetch it. `xgrammarText` is set
 * once the import resolves; the engine's `loadXGrammar` reads it synchronously.
 */
let xgrammarImport: Promise<void> | undefined;
let xgrammarText: string | undefined;

function loadXGrammarText(): Promise<void> {
  xgrammarImport ??= import('virtual:xgrammar-bundle').then(
    (m) => {
      xgrammarText = m.default;
    },
    (error: unknown) => {
      xgrammarImport = undefined;
      throw new WebEngineError(
        'BACKEND',
        `structured output needs XGrammar, whose bundle did not load: ${(error as Error).message}`,
        { cause: error },
      );
    },
  );
  return xgrammarImport;
}

/**
 * Serves one engine over `scope`'s messages: `init` loads the model (reporting progress) and
 * answers `ready` with the backend and why; then `generate` streams a request's events, `abort`
 * ends it (its blocks come back), `stats` reads the engine's statistics and step count.
 */
export function serveEngine(scope: WorkerScope): void {
  let engine: KvasirEngine | undefined;
  let opfs: OpfsStore | undefined;
  const running = new Map<string, AbortController>();
  const post = (m: FromWorker) => scope.postMessage(m);

  async function init(m: InitMessage): Promise<void> {
    const opfsAsked = opfsOption(m.opfs);
    const page = await pageCapabilities(scope);
    const backend = chooseWebBackend(m.backend, page, m.threads);
    if (typeof backend === 'string') throw new WebEngineError('BACKEND', backend);
    const env: ModelSourceEnv = {
      fetch: scope.fetch.bind(scope),
      ...(scope.caches ? { caches: scope.caches } : {}),
      ...(scope.navigator?.storage ? { storage: scope.navigator.storage } : {}),
    };
    const source = await modelBytes(
      m.model,
      m.cache,
      (loaded, total) =>
        post({
          type: 'progress',
          phase: 'download',
          loaded,
          ...(total === undefined ? {} : { total }),
        }),
      env,
    );
    let reader: Awaited<ReturnType<typeof openGgufBytes>>;
    let tokenizer: ModelTokenizer;
    try {
      reader = await openGgufBytes(source.bytes, { name: source.name });
      tokenizer = ModelTokenizer.fromGguf(reader.metadata, reader.config.eosTokenIds);
    } catch (error) {
      throw new WebEngineError(
        'MODEL_LOAD',
        `cannot read the model ${source.name}: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    }
    const c = reader.config;
    const kvLayout = kvLayoutFor(c, 'f32', m.blockSize);
    // The whole budget is the KV cache's: a page sizes it, as it sizes nothing else here.
    const { numBlocks } = planMemory({
      deviceBytes: m.kvCacheBytes,
      fraction: 1,
      weightBytes: 0,
      activationBytes: 0,
      layout: kvLayout,
      maxBindingBytes: Number.MAX_SAFE_INTEGER,
    });
    const maxModelLen = Math.min(
      m.settings.maxModelLen ?? c.maxPositionEmbeddings,
      c.maxPositionEmbeddings,
      c.slidingWindow ?? Number.POSITIVE_INFINITY,
      numBlocks * m.blockSize,
    );
    // The load reports through a plain LoadProgress: the model's bar needs a terminal.
    let loaded = 0;
    let total = 0;
    const progress = {
      start(bytes: number) {
        total = bytes;
      },
      advance(_tensor: string, bytes: number) {
        loaded += bytes;
        post({ type: 'progress', phase: 'load', loaded, total });
      },
      stop() {},
    };
    const model = await loadModel(reader, {
      backend: backend.backend,
      ...(backend.backend === 'wasm' ? { threads: backend.threads } : {}),
      numBlocks,
      blockSize: m.blockSize,
      kvFormat: 'f32',
      progress,
    }).catch((error: unknown) => {
      throw new WebEngineError(
        'MODEL_LOAD',
        `cannot load the model ${source.name}: ${(error as Error).message}`,
        { cause: error },
      );
    });
    const modelId = source.name.replace(/\.gguf$/i, '');
    // KV blocks kept past this page are filed under a digest of the weights' bytes.
    const weightDigest =
      opfsAsked === false ? `bytes:${source.bytes.byteLength}` : weightDigestOf(source.bytes);
    const tier = await openOpfsTier(
      opfsAsked,
      {
        modelId,
        weightDigest,
        blockSize: kvLayout.blockSize,
        numLayers: kvLayout.numLayers,
        numKvHeads: kvLayout.numKvHeads,
        headDim: kvLayout.headDim,
      },
      scope.navigator?.storage,
    );
    opfs = tier.store;
    const runner = runnerForModel(
      model,
      {
        modelId,
        vocabSize: c.vocabSize,
        maxModelLen,
        eosTokenIds: c.eosTokenIds,
        kvLayout,
        weightBytes: reader.totalBytes,
        weightDigest,
        backend: `${backend.backend}${backend.backend === 'wasm' ? ` (${backend.threads} threads)` : ''}`,
      },
      textCodecFor(tokenizer),
    );
    engine = new KvasirEngine({
      runner,
      config: engineSettings({ ...m.settings, maxModelLen }),
      // Called when the first constrained request compiles; generate() has loaded the text.
      loadXGrammar: () => evaluateXGrammar(xgrammarText ?? ''),
      log: (line) => console.warn(`kvasir: ${line}`),
      ...(tier.offload ? { offload: tier.offload } : {}),
    });
    post({
      type: 'ready',
      backend,
      kvTier: tier.report,
      model: {
        id: engine.modelCard.id,
        maxModelLen: engine.modelCard.maxModelLen,
        vocabSize: c.vocabSize,
        numBlocks,
        blockSize: m.blockSize,
        bytes: source.bytes.byteLength,
        fromCache: source.fromCache,
        ...(engine.modelCard.toolCallFormat
          ? { toolCallFormat: engine.modelCard.toolCallFormat }
          : {}),
      },
    });
  }

  async function generate(m: GenerateMessage): Promise<void> {
    if (!engine) throw new WebEngineError('ENGINE_STOPPED', 'the engine is not loaded');
    if (m.params.constraint) await loadXGrammarText();
    const controller = new AbortController();
    running.set(m.id, controller);
    try {
      const model = engine.modelCard.id;
      const promptTokens =
        m.input.kind === 'chat'
          ? await engine.applyChatTemplate(
              model,
              m.input.messages,
              m.input.tools ? { tools: m.input.tools } : undefined,
            )
          : typeof m.input.prompt === 'string'
            ? await engine.tokenize(model, m.input.prompt)
            : m.input.prompt;
      const p = m.params;
      const request: GenerationRequest = {
        id: m.id,
        model,
        promptTokens,
        n: p.n,
        maxTokens: p.maxTokens,
        sampling: {
          temperature: p.temperature,
          topP: p.topP,
          topK: p.topK,
          minP: p.minP,
          presencePenalty: p.presencePenalty,
          frequencyPenalty: p.frequencyPenalty,
          repetitionPenalty: p.repetitionPenalty,
          ...(p.seed === undefined ? {} : { seed: p.seed }),
          ...(p.logitBias ? { logitBias: p.logitBias } : {}),
        },
        stopTokenIds: [],
        stopStrings: p.stop,
        ignoreEos: p.ignoreEos,
        ...(p.kvCompression
          ? { kvCompression: p.kvCompression as GenerationRequest['kvCompression'] }
          : {}),
        ...(p.constraint ? { constraint: p.constraint } : {}),
      };
      const stream = await engine.generate(request, controller.signal);
      post({ type: 'started', id: m.id, created: Math.floor(Date.now() / 1000) });
      for await (const event of stream) post({ type: 'event', id: m.id, event });
      post({ type: 'end', id: m.id });
    } finally {
      running.delete(m.id);
    }
  }

  scope.onmessage = ({ data: m }) => {
    switch (m.type) {
      case 'init':
        init(m).catch((error: unknown) => post({ type: 'init-error', error: errorData(error) }));
        return;
      case 'generate':
        generate(m).catch((error: unknown) =>
          post({ type: 'error', id: m.id, error: errorData(error) }),
        );
        return;
      case 'abort':
        running.get(m.id)?.abort();
        return;
      case 'stats':
      case 'kv-snapshot':
        if (!engine) {
          post({
            type: 'error',
            id: m.id,
            error: errorData(new WebEngineError('ENGINE_STOPPED', 'the engine is not loaded')),
          });
        } else {
          const stats = {
            ...engine.stats(),
            steps: engine.steps,
            ...(opfs ? { opfs: { store: opfs.stats(), prefix: engine.prefixOffloadStats() } } : {}),
          };
          post(
            m.type === 'stats'
              ? { type: 'stats', id: m.id, stats }
              : { type: 'kv-snapshot', id: m.id, snapshot: { ...engine.kvSnapshot(), stats } },
          );
        }
        return;
      case 'dispose': {
        const e = engine;
        const store = opfs;
        engine = undefined;
        opfs = undefined;
        for (const c of running.values()) c.abort();
        // Stopping waits for the blocks being written to the OPFS tier.
        (e ? e.stop().then(() => e.runner.dispose()) : Promise.resolve())
          .then(() => store?.close())
          .then(
            () => post({ type: 'disposed', id: m.id }),
            (error: unknown) => post({ type: 'error', id: m.id, error: errorData(error) }),
          );
        return;
      }
    }
  };
}
