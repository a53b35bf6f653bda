// One greedy stream through `kvasir serve` against the library's own decode loop (`forward`, then
// an argmax over the logits) on the same GGUF file, backend and thread count, alternating
// rounds in one run. The server runs in its own process, as users run it, and idles (parked
// workers, no CPU) while the library side runs here.
//
//   pnpm --filter kvasir exec tsx bench/serve-vs-forward.ts --gguf <file.gguf>
//     [--threads 2] [--rounds 3] [--tokens 128] [--prompt-tokens 16] [--forward-blocks server]
//     [-- <extra serve flags>]
//
// Prints one JSON object: decode tokens/s of each round on each side (the server's from its
// first streamed token to its last, so prefill is out of both), their medians and the ratio.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModel } from '@kvasir/model';

const argv = process.argv.slice(2);
const cut = argv.indexOf('--');
const own = cut >= 0 ? argv.slice(0, cut) : argv;
const serveExtra = cut >= 0 ? argv.slice(cut + 1) : [];
const arg = (name: string, fallback?: string) => {
  const i = own.indexOf(name);
  return i >= 0 ? own[i + 1] : fallback;
};
const gguf = arg('--gguf');
if (!gguf || !existsSync(gguf)) throw new Error('usage: serve-vs-forward.ts --gguf <file.gguf>');
const threads = Number(arg('--threads', '2'));
const rounds = Number(arg('--rounds', '3'));
const tokens = Number(arg('--tokens', '128'));
const promptTokens = Number(arg('--prompt-tokens', '16'));

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'dist', 'cli.js');
if (!existsSync(cli)) execFileSync('pnpm', ['exec', 'tsup'], { cwd: root, stdio: 'ignore' });

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

const child = spawn(
  process.execPath,
  [
    cli,
    'serve',
    '--model',
    gguf,
    '--port',
    '0',
    '--backend',
    'wasm',
    '--threads',
    String(threads),
    ...serveExtra,
  ],
  { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, KVASIR_API_KEY: '' } },
);
const stopServer = () => {
  if (child.exitCode === null) child.kill('SIGTERM');
};
process.on('exit', stopServer);
for (const s of ['SIGINT', 'SIGTERM'] as const) {
  process.on(s, () => {
    stopServer();
    process.exit(130);
  });
}
let banner = '';
const url = await new Promise<string>((resolve, reject) => {
  child.stdout!.on('data', (chunk: Buffer) => {
    banner += chunk.toString();
    const m = /Kvasir is listening on (http:\/\/\S+)/.exec(banner);
    if (m) resolve(m[1]!);
  });
  child.on('exit', (code) => reject(new Error(`kvasir serve exited (${code}):\n${banner}`)));
});
const modelId = ((await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] })
  .data[0]!.id;

// The library's cache: just what the stream needs, or (--forward-blocks server) as many blocks
// as the server planned, to see what a cache sized to host memory costs.
const serverBlocks = Number(/KV cache\s+(\d+) blocks/.exec(banner)?.[1]);
const forwardBlocks =
  arg('--forward-blocks') === 'server' ? serverBlocks : Math.ceil((promptTokens + tokens) / 16) + 1;
const model = await loadModel(gguf, {
  backend: 'wasm',
  threads,
  numBlocks: forwardBlocks,
  blockSize: 16,
  kvFormat: 'f32',
});
const vocab = model.config.vocabSize;
const prompt = Array.from({ length: promptTokens }, (_, i) => (i * 7 + 1) % vocab);

/** Per-token intervals (ms) of one streamed greedy completion through the server. */
async function viaServer(): Promise<number[]> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: modelId,
      prompt,
      max_tokens: tokens,
      temperature: 0,
      ignore_eos: true,
      stream: true,
    }),
  });
  if (!res.ok || !res.body) throw new Error(`server answered ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  const gaps: number[] = [];
  let last = 0;
  let seen = 0;
  let buffered = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(chunk, { stream: true });
    let nl = buffered.indexOf('\n\n');
    while (nl >= 0) {
      const event = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 2);
      nl = buffered.indexOf('\n\n');
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const body = JSON.parse(event.slice(6)) as { choices?: { text: string }[] };
      if (!body.choices?.length) continue;
      seen++;
      const now = performance.now();
      if (seen > 1) gaps.push(now - last);
      last = now;
    }
  }
  // The server sends one chunk per token (a step's token is streamed before the next step).
  if (seen !== tokens) throw new Error(`the server streamed ${seen} chunks for ${tokens} tokens`);
  return gaps;
}

/** Per-token intervals (ms) of the library's greedy loop: forward, argmax, next token. */
async function viaForward(): Promise<number[]> {
  const table = Array.from({ length: Math.ceil((promptTokens + tokens) / 16) + 1 }, (_, i) => i);
  const slot = (p: number) => table[Math.floor(p / 16)]! * 16 + (p % 16);
  const argmax = (logits: Float32Array) => {
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
    return best;
  };
  let logits = await model.forward({
    tokenIds: Int32Array.from(prompt),
    positions: Int32Array.from(prompt, (_, i) => i),
    slotMapping: Int32Array.from(prompt, (_, i) => slot(i)),
    rows: [{ queryStart: 0, queryLen: promptTokens, contextLen: promptTokens, blockTable: table }],
    logitsIndices: Int32Array.of(promptTokens - 1),
  });
  let next = argmax(logits);
  const gaps: number[] = [];
  let last = performance.now();
  for (let p = promptTokens; p < promptTokens + tokens - 1; p++) {
    logits = await model.forward({
      tokenIds: Int32Array.of(next),
      positions: Int32Array.of(p),
      slotMapping: Int32Array.of(slot(p)),
      rows: [{ queryStart: 0, queryLen: 1, contextLen: p + 1, blockTable: table }],
      logitsIndices: Int32Array.of(0),
    });
    next = argmax(logits);
    const now = performance.now();
    gaps.push(now - last);
    last = now;
  }
  return gaps;
}

// Warm both (compiles, tier-up, first touch of the caches) before timing.
await viaServer();
await viaForward();
const server: number[][] = [];
const forward: number[][] = [];
const load: string[] = [];
for (let r = 0; r < rounds; r++) {
  load.push(loadavg());
  server.push(await viaServer());
  forward.push(await viaForward());
}
await model.destroy();
stopServer();
const tokS = (gaps: number[]) =>
  +((gaps.length / gaps.reduce((a, b) => a + b, 0)) * 1000).toFixed(2);
const quantile = (runs: number[][], q: number) => {
  const all = runs.flat().sort((a, b) => a - b);
  return +all[Math.floor(q * (all.length - 1))]!.toFixed(3);
};
const serverTokS = server.map(tokS);
const forwardTokS = forward.map(tokS);
console.log(
  JSON.stringify(
    {
      gguf,
      threads,
      tokens,
      prompt_tokens: promptTokens,
      serve_flags: serveExtra,
      server_kv_cache: /KV cache\s+(.*)/.exec(banner)?.[1],
      forward_kv_blocks: forwardBlocks,
      loadavg: load,
      server_tok_s: serverTokS,
      forward_tok_s: forwardTokS,
      server_vs_forward: +(median(serverTokS) / median(forwardTokS)).toFixed(3),
      // Per-token intervals over every round, ms: the low quantiles are the steps the other
      // jobs on a shared machine did not interrupt.
      server_step_ms: { p10: quantile(server, 0.1), p50: quantile(server, 0.5) },
      forward_step_ms: { p10: quantile(forward, 0.1), p50: quantile(forward, 0.5) },
      server_vs_forward_p10: +(quantile(forward, 0.1) / quantile(server, 0.1)).toFixed(3),
    },
    null,
    2,
  ),
);
