import { performance } from 'node:perf_hooks';
import { KvasirAppError } from '../errors.js';
import { type Summary, summarize } from './stats.js';

/** Options of {@link runLoad}. */
export interface LoadOptions {
  /** Server base URL, e.g. `http://127.0.0.1:8000`. */
  readonly url: string;
  readonly apiKey?: string;
  readonly model?: string;
  /** `closed`: `concurrency` clients, each sending its next request when the last ends. `rate`: Poisson arrivals at `ratePerSec`, at most `concurrency` in flight. */
  readonly mode: 'closed' | 'rate';
  readonly concurrency: number;
  readonly ratePerSec?: number;
  /** Stop sending new requests after this many seconds. */
  readonly durationSec: number;
  /** Stop after this many requests (whichever comes first). */
  readonly maxRequests?: number;
  readonly prompts: readonly string[];
  readonly maxTokens: number;
  /** Called after each finished request. */
  readonly onProgress?: (done: number, failed: number) => void;
  /** Seed for the arrival process. */
  readonly seed?: number;
}

/** One request as the client saw it. Times are milliseconds; `startMs` from the run's start. */
export interface RequestRecord {
  readonly startMs: number;
  readonly ttftMs: number;
  readonly e2eMs: number;
  readonly outputTokens: number;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly error?: string;
  /** Behind `kvasir router`: the replica that answered (`x-kvasir-replica`). */
  readonly replica?: string;
  /** Behind `kvasir router --explain-routes`: what the policy saw (`x-kvasir-route`). */
  readonly route?: string;
}

/** What {@link runLoad} measured. */
export interface LoadReport {
  readonly mode: 'closed' | 'rate';
  readonly concurrency: number;
  readonly requests: number;
  readonly completed: number;
  readonly failed_requests: number;
  readonly duration_s: number;
  /** Generated tokens per second of wall time over the whole run. */
  readonly throughput_tok_s: number;
  readonly request_throughput: number;
  readonly ttft_ms: Summary;
  /** Time per output token after the first (per request, then summarized). */
  readonly tpot_ms: Summary;
  readonly e2e_ms: Summary;
  readonly errors: Readonly<Record<string, number>>;
  readonly records: readonly RequestRecord[];
}

async function oneRequest(
  options: LoadOptions,
  prompt: string,
  runStart: number,
): Promise<RequestRecord> {
  const start = performance.now();
  const startMs = start - runStart;
  try {
    const res = await fetch(`${options.url}/v1/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}),
      },
      body: JSON.stringify({
        ...(options.model ? { model: options.model } : {}),
        prompt,
        max_tokens: options.maxTokens,
        ignore_eos: true,
        temperature: 0,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    if (!res.ok || !res.body) {
      const text = await res.text();
      let code = `http_${res.status}`;
      try {
        code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? code;
      } catch {
        // keep the status as the code
      }
      return {
        startMs,
        ttftMs: 0,
        e2eMs: performance.now() - start,
        outputTokens: 0,
        promptTokens: 0,
        cachedTokens: 0,
        error: code,
      };
    }
    let ttft: number | undefined;
    let outputTokens = 0;
    let promptTokens = 0;
    let cachedTokens = 0;
    let error: string | undefined;
    let buffer = '';
    const decoder = new TextDecoder();
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true });
      let cut = buffer.indexOf('\n\n');
      while (cut >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        cut = buffer.indexOf('\n\n');
        if (!event.startsWith('data: ')) continue;
        const data = event.slice(6);
        if (data === '[DONE]') continue;
        const parsed = JSON.parse(data) as {
          choices?: unknown[];
          usage?: {
            completion_tokens: number;
            prompt_tokens: number;
            prompt_tokens_details?: { cached_tokens?: number };
          } | null;
          error?: { code?: string };
        };
        if (parsed.error) error = parsed.error.code ?? 'stream_error';
        if (parsed.choices && parsed.choices.length > 0) ttft ??= performance.now() - start;
        if (parsed.usage) {
          outputTokens = parsed.usage.completion_tokens;
          promptTokens = parsed.usage.prompt_tokens;
          cachedTokens = parsed.usage.prompt_tokens_details?.cached_tokens ?? 0;
        }
      }
    }
    const e2e = performance.now() - start;
    const replica = res.headers.get('x-kvasir-replica');
    const route = res.headers.get('x-kvasir-route');
    return {
      startMs,
      ttftMs: ttft ?? e2e,
      e2eMs: e2e,
      outputTokens,
      promptTokens,
      cachedTokens,
      ...(error ? { error } : {}),
      ...(replica === null ? {} : { replica }),
      ...(route === null ? {} : { route }),
    };
  } catch (e) {
    return {
      startMs,
      ttftMs: 0,
      e2eMs: performance.now() - start,
      outputTokens: 0,
      promptTokens: 0,
      cachedTokens: 0,
      error: (e as Error).name === 'TypeError' ? 'connection_error' : (e as Error).message,
    };
  }
}

/**
 * Refuses a load that would send nothing or never end (no clients, no time, no prompts).
 * @throws KvasirAppError `INVALID_CONFIG` naming the option.
 */
export function checkLoadOptions(options: LoadOptions): void {
  const bad = (what: string) => {
    throw new KvasirAppError('INVALID_CONFIG', `bench: ${what}`, { details: { options } });
  };
  if (!Number.isInteger(options.concurrency) || options.concurrency < 1) {
    bad(`concurrency must be an integer ≥ 1, got ${options.concurrency}`);
  }
  if (!(options.durationSec > 0)) bad(`duration must be > 0 s, got ${options.durationSec}`);
  if (options.mode === 'rate' && !((options.ratePerSec ?? 1) > 0)) {
    bad(`rate must be > 0 requests/s, got ${options.ratePerSec}`);
  }
  if (
    options.maxRequests !== undefined &&
    (!Number.isInteger(options.maxRequests) || options.maxRequests < 1)
  ) {
    bad(`max requests must be an integer ≥ 1, got ${options.maxRequests}`);
  }
  if (options.prompts.length === 0) bad('no prompts to send');
}

/**
 * Drives an OpenAI-compatible server with streaming completions and measures what clients see:
 * time to first token, time per output token, end-to-end latency, throughput and errors.
 * @throws KvasirAppError `INVALID_CONFIG` for options that would send nothing or never end.
 */
export async function runLoad(options: LoadOptions): Promise<LoadReport> {
  checkLoadOptions(options);
  const records: RequestRecord[] = [];
  const runStart = performance.now();
  const deadline = runStart + options.durationSec * 1000;
  const maxRequests = options.maxRequests ?? Number.POSITIVE_INFINITY;
  let issued = 0;
  let failed = 0;
  const nextPrompt = () => options.prompts[issued++ % options.prompts.length]!;
  const record = (r: RequestRecord) => {
    records.push(r);
    if (r.error !== undefined) failed++;
    options.onProgress?.(records.length, failed);
  };
  const canIssue = () => issued < maxRequests && performance.now() < deadline;

  if (options.mode === 'closed') {
    const client = async () => {
      while (canIssue()) record(await oneRequest(options, nextPrompt(), runStart));
    };
    await Promise.all(Array.from({ length: options.concurrency }, client));
  } else {
    const rate = options.ratePerSec ?? 1;
    let seed = (options.seed ?? 1) >>> 0;
    const rand = () => {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      return (seed + 1) / 4294967297;
    };
    const inflight = new Set<Promise<void>>();
    let next = performance.now();
    while (canIssue()) {
      next += (-Math.log(rand()) / rate) * 1000;
      const wait = next - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      if (!canIssue()) break;
      while (inflight.size >= options.concurrency) await Promise.race(inflight);
      const p: Promise<void> = oneRequest(options, nextPrompt(), runStart).then((r) => {
        record(r);
        inflight.delete(p);
      });
      inflight.add(p);
    }
    await Promise.all(inflight);
  }

  const duration = (performance.now() - runStart) / 1000;
  const ok = records.filter((r) => r.error === undefined);
  const tokens = ok.reduce((s, r) => s + r.outputTokens, 0);
  const errors: Record<string, number> = {};
  for (const r of records) if (r.error !== undefined) errors[r.error] = (errors[r.error] ?? 0) + 1;
  return {
    mode: options.mode,
    concurrency: options.concurrency,
    requests: records.length,
    completed: ok.length,
    failed_requests: records.length - ok.length,
    duration_s: duration,
    throughput_tok_s: tokens / duration,
    request_throughput: ok.length / duration,
    ttft_ms: summarize(ok.map((r) => r.ttftMs)),
    tpot_ms: summarize(
      ok.filter((r) => r.outputTokens > 1).map((r) => (r.e2eMs - r.ttftMs) / (r.outputTokens - 1)),
    ),
    e2e_ms: summarize(ok.map((r) => r.e2eMs)),
    errors,
    records,
  };
}
