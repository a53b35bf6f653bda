import {
  logprobs as rowLogprobs,
  type Sampler,
  SamplingState,
  type TokenBitmask,
  type TokenMatcher,
} from '@kvasir/model';
import type { RequestOutput } from '@kvasir/scheduler';
import {
  EngineError,
  type FinishReason,
  type GenerationEvent,
  type GenerationRequest,
  type PromptTokenLogprob,
} from '@kvasir/server/spec';
import { AsyncQueue } from './async-queue.js';
import { ChoiceOutput, type DecodedPiece, type RawLogprob } from './choice-output.js';
import type { IncrementalDecoder, TextCodec } from './model-runner.js';
import type { AdmittedConstraints } from './output-constraints.js';

interface Choice {
  readonly state: SamplingState;
  readonly decoder: IncrementalDecoder;
  /** Stop strings and the release of text and log-probabilities to the client. */
  readonly output: ChoiceOutput;
  /**
   * Where the choice stands in the request's output constraint. Preemption needs nothing of
   * it: recompute replays the KV of the tokens already sampled (all of them accepted here), and
   * swap keeps everything.
   */
  readonly matcher: TokenMatcher | undefined;
  generated: number;
  finished: boolean;
  /** Whether the request's forced prefix is still to be streamed (before its first token). */
  prefixPending: boolean;
}

const NOTHING_FORCED = { tokenIds: [], stopped: false } as const;

/** Deterministic per-choice seed: choice i of seed s always samples the same way. */
function choiceSeed(seed: number | undefined, index: number): number | undefined {
  if (seed === undefined) return undefined;
  return (Math.abs(seed) + index * 0x9e3779b1) % 2 ** 32;
}

/**
 * One admitted request as its client sees it: per-choice sampling state, incremental decoders
 * and output processors (stop strings), and the queue of events its stream yields. Every way a request can end goes through
 * {@link finish}, {@link end} or {@link fail}, each of which ends the stream exactly once.
 */
export class LiveRequest {
  readonly request: GenerationRequest;
  /** What the stream yields: the echoed prompt when asked, deltas of every choice, one usage event. */
  readonly queue = new AsyncQueue<GenerationEvent>();
  readonly #choices: Choice[];
  readonly #stopTokens: ReadonlySet<number>;
  readonly #codec: TextCodec;
  readonly #logitBias: ReadonlyMap<number, number> | undefined;
  /** Output tokens prefilled with the prompt (jump-forward before the first token). */
  readonly #forcedPrefix: readonly number[];
  #ended = false;
  /**
   * Echo with log-probabilities: entry i scores prompt token i (entry 0 stays, nothing predicts
   * it); filled from the prefill steps' logits, in any order, each position once.
   */
  readonly #promptLogprobs: (Omit<PromptTokenLogprob, 'textOffset'> | undefined)[] | undefined;
  #promptMissing = 0;
  #promptSent = false;

  constructor(
    request: GenerationRequest,
    codec: TextCodec,
    stopTokens: ReadonlySet<number>,
    constraints?: AdmittedConstraints,
    forcedPrefix: readonly number[] = [],
  ) {
    this.request = request;
    this.#codec = codec;
    this.#forcedPrefix = forcedPrefix;
    this.#stopTokens = stopTokens;
    this.#logitBias = constraints?.logitBias;
    this.#choices = Array.from({ length: request.n }, (_, i) => ({
      state: new SamplingState(choiceSeed(request.sampling.seed, i), request.promptTokens),
      decoder: codec.decoder(),
      output: new ChoiceOutput(request.stopStrings ?? []),
      matcher: constraints?.matchers[i],
      generated: 0,
      finished: false,
      prefixPending: forcedPrefix.length > 0,
    }));
    if (request.echo && request.logprobs !== undefined) {
      const tokens = request.promptTokens;
      this.#promptLogprobs = Array.from({ length: tokens.length }, () => undefined);
      this.#promptLogprobs[0] = {
        tokenId: tokens[0]!,
        token: codec.tokenText(tokens[0]!),
        logprob: null,
        top: null,
      };
      this.#promptMissing = tokens.length - 1;
    }
  }

  /**
   * Whether the forward pass must return the logits at `position` of the prompt (they score
   * prompt token `position + 1`): true for an echo with log-probabilities, until recorded.
   */
  needsPromptLogits(position: number): boolean {
    const lp = this.#promptLogprobs;
    return lp !== undefined && position + 1 < lp.length && lp[position + 1] === undefined;
  }

  /** Records the logits row at prompt `position`: the log-probability of the next prompt token. */
  recordPromptLogits(position: number, row: Float32Array): void {
    const lp = this.#promptLogprobs;
    if (!lp || !this.needsPromptLogits(position)) return;
    const tokenId = this.request.promptTokens[position + 1]!;
    const { logprob, top } = rowLogprobs(row, tokenId, this.request.logprobs ?? 0);
    const codec = this.#codec;
    lp[position + 1] = {
      tokenId,
      token: codec.tokenText(tokenId),
      logprob,
      top: top.map((t) => ({
        tokenId: t.token,
        token: codec.tokenText(t.token),
        logprob: t.logprob,
      })),
    };
    this.#promptMissing--;
  }

  /**
   * Sends the echoed prompt once, before the first delta.
   * @throws Error when a prompt position was never computed (the engine skipped its logits).
   */
  #sendPrompt(): void {
    if (!this.request.echo || this.#promptSent) return;
    const lp = this.#promptLogprobs;
    if (lp && this.#promptMissing > 0) {
      throw new Error(`${this.#promptMissing} prompt positions have no logits`);
    }
    const decoder = this.#codec.decoder();
    let text = '';
    // A token starts where the text stood before it: one that adds nothing (BOS) or holds back
    // part of a character sits where the next text starts.
    const offsets = lp ? new Array<number>(lp.length) : undefined;
    this.request.promptTokens.forEach((id, i) => {
      if (offsets) offsets[i] = text.length;
      text += decoder.push(id);
    });
    text += decoder.flush();
    this.#promptSent = true;
    this.queue.push({
      kind: 'prompt',
      text,
      ...(lp && offsets
        ? {
            logprobs: lp.map(
              (entry, i): PromptTokenLogprob => ({ ...entry!, textOffset: offsets[i]! }),
            ),
          }
        : {}),
    });
  }

  /** True once the stream has ended (finished, aborted or failed). */
  get ended(): boolean {
    return this.#ended;
  }

  /** True when every choice has ended (each on its own, or all at once). */
  get allChoicesFinished(): boolean {
    return this.#choices.every((c) => c.finished);
  }

  /**
   * Sends what choice `index` shows of a decoded piece (stop strings applied): true when a stop
   * string ended the choice. Log-probabilities are listed when `piece` has them or the
   * output releases held-back ones.
   */
  #emit(index: number, tokenIds: readonly number[], piece: DecodedPiece): boolean {
    const choice = this.#choices[index]!;
    const shown = choice.output.push(piece);
    if (shown.stoppedByString) choice.finished = true;
    const listLogprobs = piece.logprobs !== undefined || shown.logprobs.length > 0;
    this.queue.push({
      kind: 'delta',
      index,
      tokenIds,
      text: shown.text,
      ...(listLogprobs ? { logprobs: shown.logprobs } : {}),
      ...(shown.finishReason ? { finishReason: shown.finishReason } : {}),
    });
    return shown.stoppedByString;
  }

  /** Whether choice `index` samples within a mask: constrained and still open. */
  isConstrained(index: number): boolean {
    const choice = this.#choices[index];
    return choice?.matcher !== undefined && !choice.finished && !this.#ended;
  }

  /**
   * The tokens choice `index`'s constraint allows next; undefined for an unconstrained or
   * finished choice.
   */
  nextTokenMask(index: number): Promise<TokenBitmask> | undefined {
    if (!this.isConstrained(index)) return undefined;
    return this.#choices[index]!.matcher!.nextTokenBitmask();
  }

  /** Samples choice `index`'s next token from its logits row, within `mask` when constrained. */
  sample(sampler: Sampler, index: number, row: Float32Array, mask?: TokenBitmask) {
    const s = this.request.sampling;
    return sampler.sample(
      row,
      {
        temperature: s.temperature,
        topP: s.topP,
        topK: s.topK,
        minP: s.minP,
        presencePenalty: s.presencePenalty,
        frequencyPenalty: s.frequencyPenalty,
        repetitionPenalty: s.repetitionPenalty,
        logprobs: this.request.logprobs !== undefined,
        topLogprobs: this.request.logprobs ?? 0,
        ...(this.#logitBias ? { logitBias: this.#logitBias } : {}),
      },
      this.#choices[index]!.state,
      mask,
    );
  }

  /**
   * Streams a sampled token of choice `index`, ending the choice on a stop token, a stop string
   * or its limit. Returns true when a stop string ended it: the scheduler does not know stop
   * strings, so the engine ends the request once every choice has ended.
   */
  emitToken(
    index: number,
    token: number,
    logprob: number,
    top: readonly { token: number; logprob: number }[],
  ): boolean {
    const choice = this.#choices[index]!;
    if (choice.finished) return false;
    this.#sendPrompt();
    if (this.request.maxTokens === 0) {
      // Scoring only: the scheduler generates one token (it needs at least one), never shown.
      choice.finished = true;
      return this.#emit(index, [], { text: '', finishReason: 'length' });
    }
    if (choice.prefixPending) {
      choice.prefixPending = false;
      // A stop string in the prefix ends the choice before this token.
      if (this.#streamForced(index, this.#forcedPrefix)) return true;
    }
    if (choice.matcher && !choice.matcher.accept(token)) {
      // The mask allowed it, so the matcher must: anything else is a bug, and the request fails.
      throw new Error(`the output constraint refused token ${token} its own mask allowed`);
    }
    choice.generated++;
    let finishReason: FinishReason | undefined;
    if (this.#stopTokens.has(token)) finishReason = 'stop';
    else if (choice.generated >= this.request.maxTokens) finishReason = 'length';
    // A stop token ends the choice but is not part of its text.
    let text = finishReason === 'stop' ? '' : choice.decoder.push(token);
    if (finishReason !== undefined) {
      text += choice.decoder.flush();
      choice.finished = true;
    }
    const codec = this.#codec;
    const logprobs: RawLogprob[] | undefined =
      this.request.logprobs === undefined
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
    return this.#emit(index, [token], {
      text,
      ...(logprobs ? { logprobs } : {}),
      ...(finishReason ? { finishReason } : {}),
    });
  }

  /**
   * Jump-forward decoding, after choice `index`'s sampled token was emitted: the tokens its
   * constraint forces next (`force` finds and accepts them, at most the room given), recorded
   * as generated and streamed as one delta. Only for a constrained choice still open whose
   * request does not ask for log-probabilities (a forced token has none). `maxModelLen` bounds
   * the choice as the scheduler does, so both stop at the same token. Returns the tokens
   * (empty: none) and whether a stop string ended the choice.
   */
  forceTokens(
    index: number,
    maxModelLen: number,
    force: (matcher: TokenMatcher, room: number, stopTokens: ReadonlySet<number>) => number[],
  ): { readonly tokenIds: readonly number[]; readonly stopped: boolean } {
    const choice = this.#choices[index];
    const request = this.request;
    if (!choice?.matcher || choice.finished || this.#ended || request.logprobs !== undefined) {
      return NOTHING_FORCED;
    }
    const room = Math.min(
      request.maxTokens - choice.generated,
      maxModelLen - request.promptTokens.length - choice.generated,
    );
    const tokenIds = force(choice.matcher, room, this.#stopTokens);
    if (tokenIds.length === 0) return NOTHING_FORCED;
    return { tokenIds, stopped: this.#streamForced(index, tokenIds) };
  }

  /**
   * Streams tokens of choice `index` that its matcher already accepted (forced: no sample, no
   * log-probabilities) as one delta, ending the choice at its limit; true when a stop string
   * ended it.
   */
  #streamForced(index: number, tokenIds: readonly number[]): boolean {
    const choice = this.#choices[index]!;
    choice.generated += tokenIds.length;
    let text = '';
    for (const id of tokenIds) {
      choice.state.record(id);
      text += choice.decoder.push(id);
    }
    const finishReason: FinishReason | undefined =
      choice.generated >= this.request.maxTokens ? 'length' : undefined;
    if (finishReason) {
      text += choice.decoder.flush();
      choice.finished = true;
    }
    return this.#emit(index, tokenIds, {
      text,
      ...(finishReason ? { finishReason } : {}),
    });
  }

  /** Ends the stream with the scheduler's output: last deltas, then the usage event. */
  finish(output: RequestOutput): void {
    if (this.#ended) return;
    if (output.finishReason === 'rejected') {
      this.fail(
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
      const choice = this.#choices[seq.index];
      if (!choice || choice.finished) continue;
      choice.finished = true;
      const reason: FinishReason =
        seq.finishReason === 'stop' ? 'stop' : seq.finishReason === 'length' ? 'length' : 'abort';
      this.#emit(seq.index, [], { text: choice.decoder.flush(), finishReason: reason });
    }
    // The scheduler prefilled the forced prefix with the prompt: it is output, not prompt.
    const promptTokens = output.numPromptTokens - this.#forcedPrefix.length;
    this.queue.push({
      kind: 'usage',
      promptTokens,
      cachedPromptTokens: Math.min(output.numCachedPromptTokens, promptTokens),
      completionTokens: this.#choices.reduce((sum, c) => sum + c.generated, 0),
    });
    this.end('abort');
  }

  /** Ends every choice still open with `reason` and closes the stream. */
  end(reason: FinishReason): void {
    this.#disposeMatchers();
    if (!this.#ended) {
      this.#choices.forEach((choice, i) => {
        if (choice.finished) return;
        choice.finished = true;
        this.#emit(i, [], { text: '', finishReason: reason });
      });
    }
    this.#ended = true;
    this.queue.end();
  }

  /** Ends the stream with an error its iterator throws. */
  fail(error: unknown): void {
    this.#disposeMatchers();
    if (this.#ended) return;
    this.#ended = true;
    this.queue.fail(error);
  }

  /**
   * Ends the stream with `error` at once, dropping the events its consumer has not read (a
   * client that stopped reading: see {@link unread}).
   */
  drop(error: unknown): void {
    this.#disposeMatchers();
    if (this.#ended) return;
    this.#ended = true;
    this.queue.discard(error);
  }

  /** Events sent and not yet read by the stream's consumer. */
  get unread(): number {
    return this.queue.size;
  }

  #disposeMatchers(): void {
    for (const choice of this.#choices) choice.matcher?.dispose();
  }
}
