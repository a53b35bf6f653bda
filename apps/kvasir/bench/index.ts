// `pnpm --filter kvasir bench:serve [--json]`: the serving benchmark on the random-weight model
// (`--model random`, the model the published figures were measured on) over loopback. 64
// concurrent streaming clients for a bounded time, then the same load with one client, in one
// run; blocks still referenced after everything finished are leaks.

import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { syntheticPrompts } from '../src/bench/prompts.js';
import { loadWithProgress } from '../src/commands/bench.js';

const json = process.argv.includes('--json');
const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const durationSec = arg('--duration', 30);
const soloSec = arg('--solo-duration', Math.max(5, durationSec / 3));
const maxTokens = arg('--max-tokens', 32);
const backend = process.argv.includes('--webgpu') ? 'webgpu' : 'cpu';

// The server runs in its own process (the built CLI), as users run it: clients do not share
// its event loop.
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'dist', 'cli.js');
if (!existsSync(cli)) execFileSync('pnpm', ['exec', 'tsup'], { cwd: root, stdio: 'ignore' });
const child = spawn(
  process.execPath,
  [
    cli,
    'serve',
    '--model',
    'random',
    '--port',
    '0',
    '--backend',
    backend,
    '--max-num-seqs',
    '64',
    '--max-num-batched-tokens',
    '1024',
    '--max-waiting',
    '1024',
  ],
  { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, KVASIR_API_KEY: '' } },
);
const url = await new Promise<string>((resolve, reject) => {
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    const m = /Kvasir is listening on (http:\/\/\S+)/.exec(out);
    if (m) resolve(m[1]!);
  });
  child.on('exit', (code: number | null) =>
    reject(new Error(`kvasir serve exited (${code}):\n${out}`)),
  );
});
const target = { url };
const prompts = syntheticPrompts(512, 24, 7);
const progress = !json && process.stderr.isTTY === true;
const common = { url: target.url, mode: 'closed' as const, prompts, maxTokens };

const solo = await loadWithProgress(
  'concurrency 1',
  { ...common, concurrency: 1, durationSec: soloSec },
  progress,
);
const many = await loadWithProgress(
  'concurrency 64',
  { ...common, concurrency: 64, durationSec },
  progress,
);
const metrics = await (await fetch(`${url}/metrics`)).text();
const used = /^kvasir_kv_blocks\{state="used"\} (\S+)$/m.exec(metrics);
const blocksLeaked = used ? Number(used[1]) : Number.NaN;
child.kill('SIGTERM');

const result = {
  model: 'random tiny Llama (--model random)',
  backend,
  duration_s: Number(many.duration_s.toFixed(2)),
  requests: many.requests,
  failed_requests: many.failed_requests + solo.failed_requests,
  blocks_leaked_after: blocksLeaked,
  ttft_p99_ms: Number(many.ttft_ms.p99.toFixed(2)),
  ttft_p50_ms: Number(many.ttft_ms.p50.toFixed(2)),
  tpot_p50_ms: Number(many.tpot_ms.p50.toFixed(3)),
  tpot_p99_ms: Number(many.tpot_ms.p99.toFixed(3)),
  throughput_tok_s: Number(many.throughput_tok_s.toFixed(1)),
  throughput_tok_s_concurrency1: Number(solo.throughput_tok_s.toFixed(1)),
  concurrency64_vs_1: Number((many.throughput_tok_s / solo.throughput_tok_s).toFixed(2)),
  errors: { ...solo.errors, ...many.errors },
};
if (json) {
  process.stdout.write(`${JSON.stringify(result)}\n`);
} else {
  for (const [k, v] of Object.entries(result))
    process.stdout.write(`${k.padEnd(32)} ${JSON.stringify(v)}\n`);
}
