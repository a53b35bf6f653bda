import { EngineError } from '../errors.js';

/** Default of {@link ResponseSizeInput.maxBytes}: 16 MiB of JSON. */
export const DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

// Typical JSON sizes, not worst cases: the estimate is meant to catch requests whose answer
// would be tens of megabytes (a batch of long prompts echoed with their alternatives), which a
// non-streamed response holds in memory several times over while it is built.
/** Text a generated token adds to a choice, JSON-escaped. */
const TEXT_BYTES_PER_TOKEN = 8;
/** One token's log-probability entry without alternatives (token, value, offset or bytes). */
const LOGPROB_BYTES_PER_TOKEN = 40;
/** Each alternative of a token (`"tok": -1.2345678`, or its chat object). */
const BYTES_PER_ALTERNATIVE = 32;
/** A choice's fixed fields (index, finish reason, chat message). */
const BYTES_PER_CHOICE = 128;

/** One prompt of a request, as far as its answer's size goes. */
export interface PromptSize {
  readonly tokens: number;
  /** `max_tokens` of each of its choices, after defaults. */
  readonly maxTokens: number;
  /** UTF-8 bytes of the prompt's text, when sent as text (else estimated from its tokens). */
  readonly textBytes?: number;
}

/** What {@link checkResponseSize} needs to know of a request. */
export interface ResponseSizeInput {
  readonly prompts: readonly PromptSize[];
  readonly n: number;
  readonly echo: boolean;
  /** Alternatives per token; undefined when no log-probabilities are asked for. */
  readonly logprobs: number | undefined;
  /** The largest answer allowed, in bytes. */
  readonly maxBytes: number;
}

/** The estimated JSON size, in bytes, of a non-streamed answer (see {@link checkResponseSize}). */
export function estimateResponseBytes(
  input: Omit<ResponseSizeInput, 'maxBytes'>,
  without: { readonly echo?: boolean; readonly logprobs?: boolean } = {},
): number {
  const echo = input.echo && !without.echo;
  const perLogprob =
    input.logprobs === undefined || without.logprobs
      ? 0
      : LOGPROB_BYTES_PER_TOKEN + input.logprobs * BYTES_PER_ALTERNATIVE;
  let total = 0;
  for (const p of input.prompts) {
    let choice = BYTES_PER_CHOICE + p.maxTokens * (TEXT_BYTES_PER_TOKEN + perLogprob);
    if (echo) {
      choice += (p.textBytes ?? p.tokens * TEXT_BYTES_PER_TOKEN) + p.tokens * perLogprob;
    }
    total += input.n * choice;
  }
  return total;
}

const MIB = 1024 * 1024;
const mib = (bytes: number) => `${(bytes / MIB).toFixed(1)} MiB`;

/**
 * Refuses a request whose non-streamed answer would be larger than `maxBytes`, before anything
 * is generated: its size is estimated from the prompts, `n`, `max_tokens`, `echo` and
 * `logprobs`. The error names the field to change: `logprobs` or `echo` when the answer fits
 * without it, else `max_tokens`.
 * @throws EngineError `INVALID_REQUEST` with `details.param` and the estimate in the message.
 */
export function checkResponseSize(input: ResponseSizeInput): void {
  const estimate = estimateResponseBytes(input);
  if (estimate <= input.maxBytes) return;
  const fits = (without: { echo?: boolean; logprobs?: boolean }) =>
    estimateResponseBytes(input, without) <= input.maxBytes;
  const param =
    input.logprobs !== undefined && fits({ logprobs: true })
      ? 'logprobs'
      : input.echo && fits({ echo: true })
        ? 'echo'
        : 'max_tokens';
  const prompts = input.prompts.length;
  const maxTokens = Math.max(...input.prompts.map((p) => p.maxTokens));
  throw new EngineError(
    'INVALID_REQUEST',
    `${param}: the response would be about ${mib(estimate)} (${prompts} prompt${prompts === 1 ? '' : 's'} × n ${input.n}${input.echo ? ', echo' : ''}${input.logprobs === undefined ? '' : `, logprobs ${input.logprobs}`}, max_tokens ${maxTokens}); the server answers at most ${mib(input.maxBytes)} at once: ask for less, split the batch, or stream`,
    { details: { param } },
  );
}
