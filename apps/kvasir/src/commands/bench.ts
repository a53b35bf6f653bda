import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { createServer } from '@kvasir/server';
import cliProgress from 'cli-progress';
import { checkLoadOptions, type LoadOptions, type LoadReport, runLoad } from '../bench/load.js';
import { syntheticPrompts } from '../bench/prompts.js';
import { renderLoadChart } from '../bench/svg.js';
import type { EngineConfig } from '../config.js';
import { type BuiltEngine, buildEngine } from '../engine/bootstrap.js';
import { KvasirAppError } from '../errors.js';

/** Options of `kvasir bench`. */
export interface BenchOptions {
  /** Server to load; in-process engine when absent. */
  readonly url?: string;
  readonly apiKey?: string;
  readonly model?: string;
  readonly concurrency: number;
  /** Requests per second (Poisson); closed loop when absent. */
  readonly rate?: number;
  readonly durationSec: number;
  readonly maxRequests?: number;
  readonly maxTokens: number;
  readonly promptWords: number;
  readonly sharedPrefixWords: number;
  readonly promptsFile?: string;
  readonly seed: number;
  readonly json: boolean;
  readonly outDir?: string;
  readonly progress: boolean;
}

async function loadPrompts(options: BenchOptions): Promise<string[]> {
  if (!options.promptsFile) {
    return syntheticPrompts(256, options.promptWords, options.seed, options.sharedPrefixWords);
  }
  const file = options.promptsFile;
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `cannot read --prompts-file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
      { cause: error },
    );
  }
  const prompts: string[] = [];
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line.length === 0) continue;
    if (!line.startsWith('{')) {
      prompts.push(line);
      continue;
    }
    let parsed: { prompt?: unknown };
    try {
      parsed = JSON.parse(line) as { prompt?: unknown };
    } catch (error) {
      throw new KvasirAppError(
        'INVALID_CONFIG',
        `--prompts-file ${file} line ${i + 1} is not valid JSON: ${(error as Error).message}`,
        { cause: error },
      );
    }
    if (typeof parsed.prompt === 'string' && parsed.prompt.length > 0) prompts.push(parsed.prompt);
  }
  return prompts;
}

/** A running server for a bench run: the given URL, or an in-process engine on a free port. */
export async function benchTarget(
  config: EngineConfig | undefined,
  url: string | undefined,
): Promise<{ url: string; built?: BuiltEngine; close(): Promise<void> }> {
  if (url) return { url, close: async () => {} };
  if (!config) {
    throw new KvasirAppError('INVALID_CONFIG', 'bench: an engine config is needed in-process');
  }
  const built = await buildEngine(config);
  const server = createServer({ engine: built.engine, port: 0, maxN: 16 });
  const local = await server.listen();
  return {
    url: local,
    built,
    async close() {
      await server.close(5_000);
      await built.close();
    },
  };
}

/**
 * Runs one load phase with a progress bar (on stderr unless `stream` is given). The bar fills
 * with finished requests under `maxRequests`, otherwise with elapsed seconds of the duration.
 */
export async function loadWithProgress(
  label: string,
  options: Parameters<typeof runLoad>[0],
  progress: boolean,
  stream: NodeJS.WritableStream = process.stderr,
): Promise<LoadReport> {
  checkLoadOptions(options);
  const byRequests = options.maxRequests !== undefined;
  // Payload names must not be cli-progress's own (value, total, percentage, duration, eta...).
  const format = byRequests
    ? `${label} [{bar}] {value}/{total} requests, {failed} failed, {secs}s (at most {limit}s)`
    : `${label} [{bar}] {secs}s/{limit}s, {done} done, {failed} failed`;
  const bar = progress
    ? new cliProgress.SingleBar(
        { format, stream, hideCursor: false },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  const started = Date.now();
  const seconds = () => Math.round((Date.now() - started) / 1000);
  let done = 0;
  let failed = 0;
  bar?.start(
    byRequests ? (options.maxRequests ?? 1) : Math.max(1, Math.ceil(options.durationSec)),
    0,
    {
      done,
      failed,
      secs: 0,
      limit: options.durationSec,
    },
  );
  const refresh = () => {
    if (!bar) return;
    const payload = { done, failed, secs: seconds() };
    if (byRequests) bar.update(done, payload);
    else bar.update(Math.min(bar.getTotal(), seconds()), payload);
  };
  const timer = setInterval(refresh, 500);
  try {
    return await runLoad({
      ...options,
      onProgress: (d, f) => {
        done = d;
        failed = f;
        refresh();
      },
    });
  } finally {
    clearInterval(timer);
    refresh();
    bar?.stop();
  }
}

/** `kvasir bench`: load generator; prints a summary or one JSON object, writes JSON and SVG. */
export async function benchCommand(
  config: EngineConfig | undefined,
  options: BenchOptions,
): Promise<void> {
  const load: Omit<LoadOptions, 'url'> = {
    ...(options.apiKey ? { apiKey: options.apiKey } : {}),
    ...(options.model ? { model: options.model } : {}),
    mode: options.rate ? 'rate' : 'closed',
    concurrency: options.concurrency,
    ...(options.rate ? { ratePerSec: options.rate } : {}),
    durationSec: options.durationSec,
    ...(options.maxRequests ? { maxRequests: options.maxRequests } : {}),
    prompts: await loadPrompts(options),
    maxTokens: options.maxTokens,
    seed: options.seed,
  };
  // Before an engine is built for nothing.
  checkLoadOptions({ ...load, url: options.url ?? '' });
  const target = await benchTarget(config, options.url);
  let report: LoadReport;
  try {
    report = await loadWithProgress(
      options.rate ? `rate ${options.rate}/s` : `concurrency ${options.concurrency}`,
      { ...load, url: target.url },
      options.progress,
    );
  } finally {
    await target.close();
  }
  const { records, ...summary } = report;
  const result = { target: options.url ?? 'in-process', ...summary };
  if (options.outDir) {
    const dir = resolve(options.outDir);
    await mkdir(dir, { recursive: true });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    await writeFile(
      join(dir, `bench-${stamp}.json`),
      `${JSON.stringify({ ...result, records }, null, 2)}\n`,
    );
    await writeFile(
      join(dir, `bench-${stamp}.svg`),
      renderLoadChart(records, `kvasir bench ${stamp}`),
    );
    if (!options.json) process.stderr.write(`[kvasir] wrote ${dir}/bench-${stamp}.{json,svg}\n`);
  }
  if (options.json) {
    process.stdout.write(`${JSON.stringify(result)}\n`);
    return;
  }
  const f = (v: number) => (Number.isFinite(v) ? v.toFixed(1) : '-');
  process.stdout.write(
    [
      `requests        ${report.requests} (${report.completed} ok, ${report.failed_requests} failed) in ${f(report.duration_s)} s`,
      `throughput      ${f(report.throughput_tok_s)} generated tok/s, ${report.request_throughput.toFixed(2)} req/s`,
      `TTFT ms         p50 ${f(report.ttft_ms.p50)}  p90 ${f(report.ttft_ms.p90)}  p99 ${f(report.ttft_ms.p99)}`,
      `TPOT ms         p50 ${f(report.tpot_ms.p50)}  p90 ${f(report.tpot_ms.p90)}  p99 ${f(report.tpot_ms.p99)}`,
      `end-to-end ms   p50 ${f(report.e2e_ms.p50)}  p90 ${f(report.e2e_ms.p90)}  p99 ${f(report.e2e_ms.p99)}`,
      `errors          ${Object.keys(report.errors).length === 0 ? 'none' : JSON.stringify(report.errors)}`,
      '',
    ].join('\n'),
  );
}
