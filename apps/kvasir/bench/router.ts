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
// `--policies` lists the routers to compare over the same 3 replicas: `kv-aware` (at
// `--overlap-weight`, else the router's default), `kv-aware@W` (at weight W), `round-robin`,
// `least-loaded`, `longest-prefix` (bench/longest-prefix-policy.mjs: the load term off). Every
// router runs with --explain-routes, so each request's routing is checked against what the
// replica reported: where the router's index saw the longest cached prefix, where the request
// went, and the cached_tokens the replica answered with (`routing` in the JSON).
//
//   pnpm --filter kvasir exec tsx bench/router.ts [--rounds 2] [--blocks 64] [--requests 24]
//     [--prompts 6] [--system-words 60] [--concurrency 4] [--latency-pairs 60]
//     [--policies kv-aware,round-robin] [--overlap-weight W] [-- <serve flags>]
//
// Prints one JSON object, with /proc/loadavg before and after each run.
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
const blockSize = 16;
/** The plain kv-aware router's `--overlap-weight` (absent: the router's default). */
const overlapWeight = argv.includes('--overlap-weight') ? arg('--overlap-weight', 1) : undefined;
const policiesArg = argv.indexOf('--policies');
const policies = (policiesArg >= 0 ? argv[policiesArg + 1]! : 'kv-aware,round-robin').split(',');

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
      String(blockSize),
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

/** `kvasir router` args for a `--policies` entry. */
function routingArgs(policy: string): string[] {
  if (policy === 'longest-prefix') {
    return ['--routing', join(root, 'bench', 'longest-prefix-policy.mjs')];
  }
  const [name, weight] = policy.split('@');
  const w = weight ?? (name === 'kv-aware' ? overlapWeight?.toString() : undefined);
  return ['--routing', name!, ...(w === undefined ? [] : ['--overlap-weight', w])];
}

async function router(policy: string, specs: readonly string[]): Promise<string> {
  const m = await start(
    [
      'router',
      '--port',
      '0',
      '--cache-dir',
      cacheDir,
      '--model',
      'random',
      '--explain-routes',
      ...routingArgs(policy),
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
function workload(tag: string): { prompts: string[]; systemOf: number[] } {
  const systems = Array.from(
    { length: numPrompts },
    (_, p) =>
      `System ${tag}-${p}: ${Array.from({ length: systemWords }, () => WORDS[rand(WORDS.length)]).join(' ')}.`,
  );
  const systemOf = Array.from({ length: requests }, () => rand(numPrompts));
  return {
    prompts: systemOf.map(
      (s, i) => `${systems[s]}\nUser ${i}: ${WORDS[rand(20)]} ${WORDS[rand(20)]}?`,
    ),
    systemOf,
  };
}

/** `x-kvasir-route`, as the router writes it with --explain-routes. */
interface Route {
  readonly promptBlocks: number;
  readonly chosen: number;
  /** Per candidate: [index, cached, predicted, inFlight, pendingPrefill, active]. */
  readonly candidates: readonly (readonly number[])[];
}

/**
 * Each routed request checked against the replica's answer: did it go where the index saw the
 * longest prefix, and did the replica's cached_tokens match what the index said?
 */
interface RoutingCheck {
  readonly requests: number;
  /** Whose system prompt an earlier request of the run had (the only ones that can hit). */
  readonly repeats: number;
  /** Of those, whose earlier request had not answered its first token when this one started. */
  readonly repeatsWhileFirstPrefilling: number;
  /** Sent to a replica with the longest indexed prefix (> 0 blocks). */
  readonly toLongestPrefix: number;
  /** Sent elsewhere although some replica held more of the prompt (the load term won). */
  readonly awayFromPrefix: number;
  /** A repeat for which no replica had any of its blocks indexed (events and predictions missed it). */
  readonly repeatsNotIndexed: number;
  /** Prompt blocks the index said the chosen replica held (of them, only predicted). */
  readonly expectedBlocks: number;
  readonly expectedPredicted: number;
  /** Prompt blocks the replicas reported cached (cached_tokens / block size). */
  readonly actualBlocks: number;
  /** Requests whose replica hit fewer blocks than the index said (stale or evicted), or more (events late). */
  readonly actualBelowExpected: number;
  readonly actualAboveExpected: number;
  /** Requests sent to each replica. */
  readonly perReplica: readonly number[];
}

interface RunFigures {
  readonly hitRate: number;
  readonly meanTtftMs: number;
  readonly failed: number;
  readonly errors: Readonly<Record<string, number>>;
  readonly loadavg: string;
  /** KV blocks evicted on the run's replicas during the run (kvasir_kv_cache_evictions_total). */
  readonly evictions: number;
  readonly routing?: RoutingCheck;
}

function checkRouting(report: LoadReport, systemOf: readonly number[]): RoutingCheck | undefined {
  // Requests are issued in prompt order, so start order gives each record its prompt.
  const records = [...report.records].sort((a, b) => a.startMs - b.startMs);
  if (!records.some((r) => r.route !== undefined)) return undefined;
  const firstOf = new Map<number, (typeof records)[number]>();
  const c = {
    requests: 0,
    repeats: 0,
    repeatsWhileFirstPrefilling: 0,
    toLongestPrefix: 0,
    awayFromPrefix: 0,
    repeatsNotIndexed: 0,
    expectedBlocks: 0,
    expectedPredicted: 0,
    actualBlocks: 0,
    actualBelowExpected: 0,
    actualAboveExpected: 0,
    perReplica: [0, 0, 0],
  };
  records.forEach((r, i) => {
    const system = systemOf[i]!;
    const first = firstOf.get(system);
    if (first === undefined) firstOf.set(system, r);
    if (r.route === undefined || r.error !== undefined) return;
    const route = JSON.parse(r.route) as Route;
    c.requests++;
    c.perReplica[route.chosen] = (c.perReplica[route.chosen] ?? 0) + 1;
    const chosen = route.candidates.find((x) => x[0] === route.chosen)!;
    const best = Math.max(...route.candidates.map((x) => x[1]!));
    const repeat = first !== undefined;
    if (repeat) {
      c.repeats++;
      if (first.startMs + first.ttftMs > r.startMs) c.repeatsWhileFirstPrefilling++;
      if (best === 0) c.repeatsNotIndexed++;
    }
    if (best > 0 && chosen[1] === best) c.toLongestPrefix++;
    if (chosen[1]! < best) c.awayFromPrefix++;
    const actual = Math.floor(r.cachedTokens / blockSize);
    c.expectedBlocks += chosen[1]!;
    c.expectedPredicted += chosen[2]!;
    c.actualBlocks += actual;
    if (actual < chosen[1]!) c.actualBelowExpected++;
    if (actual > chosen[1]!) c.actualAboveExpected++;
  });
  return c;
}

/** Sum of `name` over the servers' /metrics. */
async function metricSum(urls: readonly string[], name: string): Promise<number> {
  let sum = 0;
  for (const url of urls) {
    const text = await (await fetch(`${url}/metrics`)).text();
    for (const line of text.split('\n')) {
      if (line.startsWith(name)) sum += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
    }
  }
  return sum;
}

async function run(url: string, replicaUrls: readonly string[], tag: string): Promise<RunFigures> {
  const { prompts, systemOf } = workload(tag);
  const evictedBefore = await metricSum(replicaUrls, 'kvasir_kv_cache_evictions_total');
  const report: LoadReport = await runLoad({
    url,
    model: RANDOM_MODEL_NAME,
    mode: 'closed',
    concurrency,
    durationSec: 600,
    maxRequests: requests,
    prompts,
    maxTokens: 8,
  });
  const evicted = (await metricSum(replicaUrls, 'kvasir_kv_cache_evictions_total')) - evictedBefore;
  const ok = report.records.filter((r) => r.error === undefined);
  const prompt = ok.reduce((s, r) => s + r.promptTokens, 0);
  const cached = ok.reduce((s, r) => s + r.cachedTokens, 0);
  const routing = checkRouting(report, systemOf);
  return {
    hitRate: prompt === 0 ? 0 : cached / prompt,
    meanTtftMs: ok.reduce((s, r) => s + r.ttftMs, 0) / Math.max(1, ok.length),
    failed: report.failed_requests,
    errors: report.errors,
    loadavg: loadavg(),
    evictions: evicted,
    ...(routing ? { routing } : {}),
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
const replicaUrls = replicas.map((r) => r.url);
const configs: Record<string, { url: string; replicas: readonly string[] }> = {};
for (const policy of policies) {
  configs[policy] = {
    url: await router(
      policy,
      replicas.map((r) => r.spec),
    ),
    replicas: replicaUrls,
  };
}
configs.single = { url: single.url, replicas: [single.url] };

const order = Object.keys(configs);
const figures: Record<string, RunFigures[]> = Object.fromEntries(order.map((n) => [n, []]));
for (let round = 0; round < rounds; round++) {
  for (let k = 0; k < order.length; k++) {
    const name = order[(k + round) % order.length]!;
    const c = configs[name]!;
    figures[name]!.push(await run(c.url, c.replicas, `${round}${name}`));
  }
}

// Added latency: one short cached prompt, straight to replica 0 and through the router, in turn.
const direct: number[] = [];
const routed: number[] = [];
const shortPrompt = 'How far is the moon?';
const firstRouter = configs[policies[0]!]!.url;
await timed(replicas[0]!.url, shortPrompt);
await timed(firstRouter, shortPrompt);
for (let i = 0; i < latencyPairs; i++) {
  direct.push(await timed(replicas[0]!.url, shortPrompt));
  routed.push(await timed(firstRouter, shortPrompt));
}
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const p = (xs: number[], q: number) => percentile(sorted(xs), q);

const mean = (xs: RunFigures[], f: (r: RunFigures) => number) =>
  xs.reduce((s, r) => s + f(r), 0) / xs.length;
const hit = (n: string) => mean(figures[n]!, (r) => r.hitRate);
const ttft = (n: string) => mean(figures[n]!, (r) => r.meanTtftMs);
const round3 = (x: number) => Math.round(x * 1000) / 1000;
const kvAware = policies.find((x) => x.startsWith('kv-aware')) ?? policies[0]!;
const baseline = policies.includes('round-robin') ? 'round-robin' : undefined;
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
        policies,
        overlapWeight: overlapWeight ?? 'router default',
      },
      loadavg: { before: loadBefore, after: loadavg() },
      hitRate: Object.fromEntries(order.map((n) => [n, round3(hit(n))])),
      hitRateOverSingle: Object.fromEntries(
        policies.map((n) => [n, round3(hit(n) / hit('single'))]),
      ),
      clusterHitRateOverSingle: round3(hit(kvAware) / hit('single')),
      meanTtftMs: Object.fromEntries(order.map((n) => [n, round3(ttft(n))])),
      ...(baseline
        ? {
            ttftOverRoundRobin: Object.fromEntries(
              policies.map((n) => [n, round3(ttft(n) / ttft(baseline))]),
            ),
            kvAwareOverRoundRobinTtft: round3(ttft(kvAware) / ttft(baseline)),
          }
        : {}),
      routerAddedLatencyMs: {
        router: policies[0],
        pairs: latencyPairs,
        direct: { p50: round3(p(direct, 0.5)), p99: round3(p(direct, 0.99)) },
        routed: { p50: round3(p(routed, 0.5)), p99: round3(p(routed, 0.99)) },
        added: {
          p50: round3(p(routed, 0.5) - p(direct, 0.5)),
          p99: round3(p(routed, 0.99) - p(direct, 0.99)),
        },
      },
      failedRequests: Object.fromEntries(
        order.map((n) => [n, figures[n]!.reduce((s, r) => s + r.failed, 0)]),
      ),
      rounds: figures,
    },
    null,
    2,
  )}\n`,
);
process.exit(0);
