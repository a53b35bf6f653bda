import { spawnSync } from 'node:child_process';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CACHE_DIR, CLI, type ServerProcess, startServer } from './harness.js';

// `kvasir serve --devices wasm,wasm`: the random model's layers split over two WebAssembly
// memories, served to the official `openai` client, answers as the unsplit wasm server does
// (same greedy tokens, same logprobs), with swap preemption moving blocks through both devices.
const MODEL = 'kvasir-random-tiny';
const COMMON = [
  '--threads',
  '1',
  '--block-size',
  '8',
  '--num-gpu-blocks',
  '24',
  '--preemption-mode',
  'swap',
];

async function answers(server: ServerProcess) {
  const prompts = ['The quick brown fox', 'Pipeline parallelism by layer', 'a', 'KV pages'];
  // Concurrent, so that they share steps and, over 24 blocks of 8, preempt one another.
  const results = await Promise.all(
    prompts.map((prompt, i) =>
      server.client.completions.create({
        model: MODEL,
        prompt,
        max_tokens: 60 + 8 * i,
        temperature: 0,
        ignore_eos: true,
        logprobs: 1,
      } as OpenAI.CompletionCreateParamsNonStreaming),
    ),
  );
  return results.map((r) => r.choices[0] as OpenAI.CompletionChoice);
}

describe('kvasir serve --devices wasm,wasm', () => {
  let whole: ServerProcess;
  let split: ServerProcess;
  beforeAll(async () => {
    [whole, split] = await Promise.all([
      startServer(['--backend', 'wasm', ...COMMON]),
      startServer(['--devices', 'wasm,wasm', ...COMMON]),
    ]);
  }, 120_000);
  afterAll(async () => {
    expect(await whole?.stop()).toBe(0);
    expect(await split?.stop()).toBe(0);
  });

  it('says in its banner which layers each device runs, and its weights and KV blocks', () => {
    const out = split.output();
    expect(out).toMatch(/backend +split by layer over 2 devices/);
    expect(out).toMatch(
      /device 0 +wasm \(1 threads, simd128[^)]*\): layers 0-1, weights [\d.]+ MiB, KV 24 blocks/,
    );
    expect(out).toMatch(
      /device 1 +wasm \(1 threads, simd128[^)]*\): layers 2-3, weights [\d.]+ MiB, KV 24 blocks/,
    );
  });

  it('gives the unsplit server tokens and logprobs through the openai client, with swaps', async () => {
    const [want, got] = await Promise.all([answers(whole), answers(split)]);
    for (const [i, choice] of got.entries()) {
      const w = want[i] as OpenAI.CompletionChoice;
      expect(choice.text, `prompt ${i}`).toBe(w.text);
      expect(choice.logprobs?.tokens).toEqual(w.logprobs?.tokens);
      const lp = choice.logprobs?.token_logprobs as number[];
      const wlp = w.logprobs?.token_logprobs as number[];
      for (const [t, v] of lp.entries()) expect(v).toBeCloseTo(wlp[t] as number, 4);
    }
    const swapped = async (s: ServerProcess) =>
      [...(await s.metrics()).entries()]
        .filter(([k]) => k.startsWith('kvasir_preemptions_total') && k.includes('swap'))
        .reduce((a, [, v]) => a + v, 0);
    expect(await swapped(split)).toBeGreaterThan(0);
  }, 240_000);

  it('refuses a bad placement at start-up with one line naming the flag and the numbers', () => {
    for (const [flags, message] of [
      [
        ['--devices', 'wasm:layers=0-1,wasm:layers=1-3'],
        /--devices .*: device 1 \(wasm\) layers 1-3 overlap device 0 \(wasm\) layers 0-1/,
      ],
      [['--devices', 'wasm:layers=0-9'], /layers 0-9 reach past the model's 4 layers \(0-3\)/],
      [['--devices', 'wasm,gpu'], /device 1 'gpu': unknown backend 'gpu'/],
      [['--gpu-layers', '5'], /--gpu-layers 5: gpu layers must be an integer in \[0, 4\]/],
    ] as const) {
      const r = spawnSync(
        process.execPath,
        [CLI, 'serve', '--port', '0', '--cache-dir', CACHE_DIR, '--model', 'random', ...flags],
        { encoding: 'utf8', env: { ...process.env, KVASIR_API_KEY: '' }, timeout: 60_000 },
      );
      expect(r.status, r.stderr).toBe(1);
      const lines = r.stderr.trim().split('\n');
      expect(lines.at(-1)).toMatch(message);
      expect(lines.at(-1)).toMatch(/\[INVALID_CONFIG\]$/);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
  }, 240_000);
});
