import type { EngineHealth, EngineStats } from '../src/engine-stats.js';
import { EngineError } from '../src/errors.js';
import type {
  GenerationEvent,
  GenerationStream,
  PromptTokenLogprob,
  TokenLogprob,
} from '../src/generation-events.js';
import type {
  ChatMessage,
  GenerationRequest,
  InferenceEngine,
  ModelCard,
} from '../src/inference-engine.js';

/** Characters per generated token: stop strings in the script straddle token boundaries. */
export const PIECE = 3;
export const MODEL_ID = 'scripted-model';
export const MAX_MODEL_LEN = 256;
export const CACHED_TOKENS = 4;

/** The text choice `index` generates, a pure function of the choice and the seed. */
export function scriptText(index: number, seed: number | undefined): string {
  const head = `choice ${index} seed ${seed ?? 'none'}: `;
  return `${head}The quick brown fox. STOP here. More words follow the stop; ${'lorem ipsum '.repeat(40)}`;
}

/** The token pieces of choice `index`. */
export function scriptPieces(index: number, seed: number | undefined): string[] {
  const text = scriptText(index, seed);
  const pieces: string[] = [];
  for (let i = 0; i < text.length; i += PIECE) pieces.push(text.slice(i, i + PIECE));
  return pieces;
}

/**
 * Where a choice's text stops for `stops` (the first place one completes, the longest there):
 * the text kept and the end of the stop string, or undefined when none occurs.
 */
export function stopCut(text: string, stops: readonly string[]) {
  let best: { start: number; end: number } | undefined;
  for (const stop of stops) {
    const start = text.indexOf(stop);
    if (stop === '' || start < 0) continue;
    const end = start + stop.length;
    if (!best || end < best.end || (end === best.end && start < best.start)) best = { start, end };
  }
  return best;
}

/** The log-probability the scripted engine gives prompt token `i` (i ≥ 1) when echoing. */
export const promptLogprob = (i: number) => -i / 8;

/** The chat template the scripted engine applies. */
export function renderChat(messages: readonly ChatMessage[]): string {
  return `${messages.map((m) => `<${m.role}>${m.content}\n`).join('')}<assistant>`;
}

const deferred = <T>() => {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
};

/**
 * A deterministic engine for server tests: prompts tokenize one token per character, and every
 * choice generates a fixed script in 3-character pieces, yielding to the event loop between
 * tokens so that aborts and other requests interleave as with a real engine.
 */
export class ScriptedEngine implements InferenceEngine {
  readonly specificationVersion = 'v1';
  health_: EngineHealth = { status: 'ok' };
  queueFull = false;
  /** When set, generation waits for it before producing tokens. */
  gate: Promise<void> | undefined;
  readonly requests: GenerationRequest[] = [];
  readonly aborted = new Set<string>();
  #admitted = deferred<string>();
  #abortSeen = deferred<string>();
  stats_: EngineStats = {
    kvCacheUsage: 0.375,
    blocks: { total: 64, used: 24, cached: 8, free: 32 },
    prefixCache: { queries: 1000, hits: 250 },
    requests: { running: 3, waiting: 2, preempted: 1 },
    preemptions: { recompute: 5, swap: 7 },
    offloadHits: { host: 11, redis: 13 },
  };

  /** Resolves with the id of the next admitted request. */
  nextAdmitted(): Promise<string> {
    return this.#admitted.promise;
  }

  /** Resolves with the id of the next request whose abort signal fired. */
  nextAbort(): Promise<string> {
    return this.#abortSeen.promise;
  }

  listModels(): readonly ModelCard[] {
    return [
      {
        id: MODEL_ID,
        created: 1_700_000_000,
        ownedBy: 'kvasir-tests',
        maxModelLen: MAX_MODEL_LEN,
        // Token ids are code points (see tokenize).
        vocabSize: 0x110000,
      },
    ];
  }

  tokenize(_model: string, text: string): readonly number[] {
    return Array.from(text, (c) => c.codePointAt(0)!);
  }

  applyChatTemplate(_model: string, messages: readonly ChatMessage[]): readonly number[] {
    return this.tokenize(MODEL_ID, renderChat(messages));
  }

  stats(): EngineStats {
    return this.stats_;
  }

  health(): EngineHealth {
    return this.health_;
  }

  async generate(request: GenerationRequest, signal: AbortSignal): Promise<GenerationStream> {
    if (this.queueFull) {
      throw new EngineError('QUEUE_FULL', 'waiting queue is full', {
        details: { retryAfterSeconds: 3 },
      });
    }
    this.requests.push(request);
    const admitted = this.#admitted;
    this.#admitted = deferred();
    admitted.resolve(request.id);
    signal.addEventListener(
      'abort',
      () => {
        this.aborted.add(request.id);
        const seen = this.#abortSeen;
        this.#abortSeen = deferred();
        seen.resolve(request.id);
      },
      { once: true },
    );
    const finished = new Set<number>();
    const stops = request.stopStrings ?? [];
    const gate = this.gate;
    const seed = request.sampling.seed;
    async function* run(): AsyncGenerator<GenerationEvent> {
      if (gate) await gate;
      if (request.echo) {
        const chars = request.promptTokens.map((id) => String.fromCodePoint(id));
        const offsets: number[] = [];
        chars.reduce((at, c) => {
          offsets.push(at);
          return at + c.length;
        }, 0);
        const logprobs: PromptTokenLogprob[] | undefined =
          request.logprobs === undefined
            ? undefined
            : chars.map((token, i) => ({
                tokenId: request.promptTokens[i]!,
                token,
                logprob: i === 0 ? null : promptLogprob(i),
                top:
                  i === 0
                    ? null
                    : Array.from({ length: request.logprobs! }, (_, j) => ({
                        tokenId: j,
                        token: j === 0 ? token : `alt${j}`,
                        logprob: promptLogprob(i) - j,
                      })),
                textOffset: offsets[i]!,
              }));
        yield { kind: 'prompt', text: chars.join(''), ...(logprobs ? { logprobs } : {}) };
      }
      if (request.maxTokens === 0) {
        for (let i = 0; i < request.n; i++) {
          yield { kind: 'delta', index: i, tokenIds: [], text: '', finishReason: 'length' };
        }
      }
      const pieces = Array.from({ length: request.n }, (_, i) => scriptPieces(i, seed));
      // The whole script is known: a stop string's text (and what follows) is never sent.
      const cuts = Array.from({ length: request.n }, (_, i) => stopCut(scriptText(i, seed), stops));
      const produced = new Array<number>(request.n).fill(0);
      let total = 0;
      for (let step = 0; step < request.maxTokens; step++) {
        await new Promise((r) => setImmediate(r));
        if (signal.aborted) return;
        for (let i = 0; i < request.n; i++) {
          if (finished.has(i)) continue;
          const piece = pieces[i]![step] ?? '';
          const tokenId = 1000 + step;
          const start = step * PIECE;
          const cut = cuts[i];
          const stopped = cut !== undefined && start + piece.length >= cut.end;
          const visible =
            cut === undefined ? piece : piece.slice(0, Math.max(0, cut.start - start));
          const last = stopped || step === request.maxTokens - 1 || step === pieces[i]!.length - 1;
          let logprobs: TokenLogprob[] | undefined;
          if (request.logprobs !== undefined) {
            const top = Array.from({ length: request.logprobs }, (_, j) => ({
              tokenId: j,
              token: `alt${j}`,
              logprob: -1 - j,
            }));
            const shown = cut === undefined || start < cut.start;
            logprobs = shown
              ? [{ tokenId, token: piece, logprob: -0.5, top, textOffset: start }]
              : [];
          }
          produced[i]! += 1;
          total += 1;
          yield {
            kind: 'delta',
            index: i,
            tokenIds: [tokenId],
            text: visible,
            ...(logprobs ? { logprobs } : {}),
            ...(last
              ? { finishReason: !stopped && step === request.maxTokens - 1 ? 'length' : 'stop' }
              : {}),
          };
          if (last) finished.add(i);
        }
        if (finished.size === request.n) break;
      }
      yield {
        kind: 'usage',
        promptTokens: request.promptTokens.length,
        cachedPromptTokens: Math.min(CACHED_TOKENS, request.promptTokens.length - 1),
        completionTokens: total,
      };
    }
    return run();
  }
}
