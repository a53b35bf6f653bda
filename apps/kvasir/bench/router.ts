// kvasir router against its baselines, on one machine, in one run:
// - cluster prefix hit rate ÷ one replica's with the same total cache (3 replicas of B blocks
//   behind the kv-aware router vs one replica of 3B blocks), goal ≥ 0.9;
// - kv-aware ÷ round-robin mean TTFT on a shared-prefix workload (many users over a few long
//   system prompts), goal ≤ 0.5;
// - the router's added latency per request (p50, p99): the same short request sent straight to a
//   replica and through the router, alternating.
// Every round draws fresh system prompts, so no configuration profits from another's cache, and
// the configurations alternate (A B C, B C A, ...). Replicas: `kvasir serve --model random` on
// the cpu backend (its prefill is slow enough that a cached prefix shows).
//
//   pnpm --filter kvasir exec tsx bench/router.ts [--rounds 2] [--blocks 64] [--requests 24]
//     [--prompts 6] [--system-words 60] [--concurrency 4] [--latency-pairs 60]
//     [--overlap-weight W] [-- <serve flags>]
//
// Prints one JSON object, with /proc/loadavg before and after.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { type LoadReport, runLoad } from '../src/bench/load.js';
import { percentile } from '../src/bench/stats.js';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';

const all = process.argv.slice(2);
const cut = all.indexOf('--');
const argv = cut >= 0 ? all.slice(0, cut) : all;
/** Extra `kvasir serve` flags for every replica (after `--`), e.g. `--offload-host-bytes 0`. */
const serveExtra = cut >= 0 ? all.slice(cut + 1) : [];
const arg = (name: string, fallback: number) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const rounds = arg('--rounds', 2);
const blocks = arg('--blocks', 64);
const requests = arg('--requests', 24);
const numPrompts = arg('--prompts', 6);
const systemWords = arg('--system-words', 60);
const concurrency = arg('--concurrency', 4);
const latencyPairs = arg('--latency-pairs', 60);
/** The kv-aware router's `--overlap-weight` (absent: the router's default). */
const overlapWeight = argv.includes('--overlap-weight') ? arg('--overlap-weight', 1) : undefined;

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'dist', 'cli.js');
if (!existsSync(cli)) execFileSync('pnpm', ['exec', 'tsup'], { cwd: root, stdio: 'ignore' });
const cacheDir = mkdtempSync(join(tmpdir(), 'kvasir-router-bench-'));
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

const children: ChildProcess[] = [];
process.on('exit', () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
});

/** Spawns `kvasir <args>` and resolves the first match of `ready` in its output. */
function start(args: readonly string[], ready: RegExp): Promise<RegExpExecArray> {
  const child = spawn(process.execPath, [cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  const log = createWriteStream(join(cacheDir, `${args[0]}-${child.pid}.log`));
  return new Promise((resolve, reject) => {
    const on = (d: Buffer) => {
      log.write(d);
      out += d.toString();
      const m = ready.exec(out);
      if (m) resolve(m);
    };
    child.stdout!.on('data', on);
    child.stderr!.on('data', on);
    child.on('exit', (code) => reject(new Error(`kvasir ${args[0]} exited ${code}:\n${out}`)));
  });
}

async function serve(numBlocks: number): Promise<{ url: string; spec: string }> {
  const m = await start(
    [
      'serve',
      '--port',
      '0',
      '--cache-dir',
      cacheDir,
      '--model',
      'random',
      '--backend',
      'cpu',
      '--block-size',
      '16',
      '--num-gpu-blocks',
      String(numBlocks),
      '--max-num-seqs',
      '4',
      '--kv-events',
      'tcp://127.0.0.1:*',
      '--kv-events-replay',
      'tcp://127.0.0.1:*',
      ...serveExtra,
    ],
    /listening on (http:\/\/\S+)[\s\S]*KV events +(tcp:\/\/\S+) .*replay (tcp:\/\/\S+)/,
  );
  return { url: m[1]!, spec: `${m[1]},events=${m[2]},replay=${m[3]}` };
}

async function router(routing: string, specs: readonly string[]): Promise<string> {
  const m = await start(
    [
      'router',
      '--port',
      '0',
      '--cache-dir',
      cacheDir,
      '--model',
      'random',
      '--routing',
      routing,
      ...(routing === 'kv-aware' && overlapWeight !== undefined
        ? ['--overlap-weight', String(overlapWeight)]
        : []),
      ...specs.flatMap((s) => ['--replica', s]),
    ],
    /router is listening on (http:\/\/\S+)/,
  );
  return m[1]!;
}

let seed = 1;
const rand = (n: number) => {
  seed = (seed * 1103515245 + 12345) % 2 ** 31;
  return seed % n;
};
const WORDS =
  'alpha beta gamma delta river stone cloud ember north violet quiet amber falcon harbor lantern meadow orbit prism saddle thistle'.split(
    ' ',
  );

/** A shared-prefix workload: `requests` users over `numPrompts` fresh system prompts. */
function workload(tag: string): string[] {
  const systems = Array.from(
    { length: numPrompts },
    (_, p) =>
      `System ${tag}-${p}: ${Array.from({ length: systemWords }, () => WORDS[rand(WORDS.length)]).join(' ')}.`,
  );
  return Array.from(
    { length: requests },
    (_, i) => `${systems[rand(numPrompts)]}\nUser ${i}: ${WORDS[rand(20)]} ${WORDS[rand(20)]}?`,
  );
}

interface RunFigures {
  readonly hitRate: number;
  readonly meanTtftMs: number;
  readonly failed: number;
  readonly errors: Readonly<Record<string, number>>;
}

async function run(url: string, tag: string): Promise<RunFigures> {
  const report: LoadReport = await runLoad({
    url,
    model: RANDOM_MODEL_NAME,
    mode: 'closed',
    concurrency,
    durationSec: 600,
    maxRequests: requests,
    prompts: workload(tag),
    maxTokens: 8,
  });
  const ok = report.records.filter((r) => r.error === undefined);
  const prompt = ok.reduce((s, r) => s + r.promptTokens, 0);
  const cached = ok.reduce((s, r) => s + r.cachedTokens, 0);
  return {
    hitRate: prompt === 0 ? 0 : cached / prompt,
    meanTtftMs: ok.reduce((s, r) => s + r.ttftMs, 0) / Math.max(1, ok.length),
    failed: report.failed_requests,
    errors: report.errors,
  };
}

async function timed(url: string, prompt: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: RANDOM_MODEL_NAME, prompt, max_tokens: 1, temperature: 0 }),
  });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`status ${res.status}`);
  return performance.now() - t0;
}

const loadBefore = loadavg();
const replicas = await Promise.all([serve(blocks), serve(blocks), serve(blocks)]);
const single = await serve(3 * blocks);
const kvAware = await router(
  'kv-aware',
  replicas.map((r) => r.spec),
);
const roundRobin = await router(
  'round-robin',
  replicas.map((r) => r.spec),
);

const configs = { kvAware, roundRobin, single: single.url } as const;
type Name = keyof typeof configs;
const figures: Record<Name, RunFigures[]> = { kvAware: [], roundRobin: [], single: [] };
const order: Name[] = ['kvAware', 'roundRobin', 'single'];
for (let round = 0; round < rounds; round++) {
  for (let k = 0; k < order.length; k++) {
    const name = order[(k + round) % order.length]!;
    figures[name].push(await run(configs[name], `${round}${name}`));
  }
}

// Added latency: one short cached prompt, straight to replica 0 and through the router, in turn.
const direct: number[] = [];
const routed: number[] = [];
const shortPrompt = 'How far is the moon?';
await timed(replicas[0]!.url, shortPrompt);
await timed(kvAware, shortPrompt);
for (let i = 0; i < latencyPairs; i++) {
  direct.push(await timed(replicas[0]!.url, shortPrompt));
  routed.push(await timed(kvAware, shortPrompt));
}
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const p = (xs: number[], q: number) => percentile(sorted(xs), q);

const mean = (xs: RunFigures[], f: (r: RunFigures) => number) =>
  xs.reduce((s, r) => s + f(r), 0) / xs.length;
const hit = (n: Name) => mean(figures[n], (r) => r.hitRate);
const ttft = (n: Name) => mean(figures[n], (r) => r.meanTtftMs);
const round3 = (x: number) => Math.round(x * 1000) / 1000;
process.stdout.write(
  `${JSON.stringify(
    {
      command: `tsx bench/router.ts ${all.join(' ')}`.trim(),
      logs: cacheDir,
      setup: {
        replicas: 3,
        blocksPerReplica: blocks,
        singleReplicaBlocks: 3 * blocks,
        rounds,
        requests,
        prompts: numPrompts,
        systemWords,
        concurrency,
        maxTokens: 8,
        backend: 'cpu',
        model: 'random',
        overlapWeight: overlapWeight ?? 'router default',
      },
      loadavg: { before: loadBefore, after: loadavg() },
      hitRate: {
        kvAware: round3(hit('kvAware')),
        roundRobin: round3(hit('roundRobin')),
        single: round3(hit('single')),
      },
      clusterHitRateOverSingle: round3(hit('kvAware') / hit('single')),
      meanTtftMs: {
        kvAware: round3(ttft('kvAware')),
        roundRobin: round3(ttft('roundRobin')),
        single: round3(ttft('single')),
      },
      kvAwareOverRoundRobinTtft: round3(ttft('kvAware') / ttft('roundRobin')),
      routerAddedLatencyMs: {
        pairs: latencyPairs,
        direct: { p50: round3(p(direct, 0.5)), p99: round3(p(direct, 0.99)) },
        routed: { p50: round3(p(routed, 0.5)), p99: round3(p(routed, 0.99)) },
        added: {
          p50: round3(p(routed, 0.5) - p(direct, 0.5)),
          p99: round3(p(routed, 0.99) - p(direct, 0.99)),
        },
      },
      failedRequests: Object.fromEntries(
        order.map((n) => [n, figures[n].reduce((s, r) => s + r.failed, 0)]),
      ),
      rounds: figures,
    },
    null,
    2,
  )}\n`,
);
process.exit(0);
