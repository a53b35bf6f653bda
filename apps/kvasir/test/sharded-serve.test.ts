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

describe('kvasir serve --gpu-layers 2 (WebGPU + wasm, as llama.cpp -ngl)', () => {
  let whole: ServerProcess;
  let split: ServerProcess;
  beforeAll(async () => {
    [whole, split] = await Promise.all([
      startServer(['--backend', 'wasm', '--threads', '1']),
      startServer(['--gpu-layers', '2', '--threads', '1']),
    ]);
  }, 180_000);
  afterAll(async () => {
    expect(await whole?.stop()).toBe(0);
    expect(await split?.stop()).toBe(0);
  });

  it('runs layers 0-1 on the WebGPU adapter and 2-3 on wasm, with the wasm server tokens', async () => {
    expect(split.output()).toMatch(/device 0 +webgpu \([^)]*\): layers 0-1, /);
    expect(split.output()).toMatch(/device 1 +wasm \([^)]*\): layers 2-3, /);
    const ask = (s: ServerProcess) =>
      s.client.completions.create({
        model: MODEL,
        prompt: 'Layers on two devices',
        max_tokens: 12,
        temperature: 0,
        ignore_eos: true,
        logprobs: 1,
      } as OpenAI.CompletionCreateParamsNonStreaming);
    const [want, got] = await Promise.all([ask(whole), ask(split)]);
    const w = want.choices[0] as OpenAI.CompletionChoice;
    const g = got.choices[0] as OpenAI.CompletionChoice;
    expect(g.logprobs?.tokens).toEqual(w.logprobs?.tokens);
    const wlp = w.logprobs?.token_logprobs ?? [];
    const glp = g.logprobs?.token_logprobs ?? [];
    expect(glp).toHaveLength(12);
    for (const [t, v] of glp.entries()) {
      expect(Math.abs(v - (wlp[t] as number))).toBeLessThan(1e-3);
    }
  }, 180_000);
});

describe('kvasir info --devices', () => {
  it('shows the plan per device before serving', () => {
    const r = spawnSync(
      process.execPath,
      [
        CLI,
        'info',
        '--cache-dir',
        CACHE_DIR,
        '--model',
        'random',
        '--devices',
        'cpu:layers=0-0,wasm',
        '--num-gpu-blocks',
        '10',
        '--json',
      ],
      { encoding: 'utf8', timeout: 60_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as {
      devices: {
        description: string;
        first_layer: number;
        num_layers: number;
        weight_bytes: number;
        kv_blocks: number;
        kv_cache_bytes: number;
      }[];
      kv_cache: { bytes_per_block: number };
      model: { weight_bytes: number };
    };
    expect(
      report.devices.map((d) => [d.description.split(' ')[0], d.first_layer, d.num_layers]),
    ).toEqual([
      ['cpu', 0, 1],
      ['wasm', 1, 3],
    ]);
    for (const d of report.devices) {
      expect(d.kv_blocks).toBe(10);
      expect(d.kv_cache_bytes).toBe((10 * report.kv_cache.bytes_per_block * d.num_layers) / 4);
    }
    expect(report.devices[0]!.weight_bytes + report.devices[1]!.weight_bytes).toBe(
      report.model.weight_bytes,
    );
  });
});

// The wasm backend's automatic split (a model past one WebAssembly memory goes over several),
// at the random model's scale: --wasm-memory-bytes lowers the memory so that its 3.5 MiB of
// weights and one full-context cache need two, as a 7B model in Q4_K_M needs two 4 GiB ones.
describe('kvasir --backend wasm with a model past one WebAssembly memory', () => {
  // The 256 MiB activation reserve and 3 MiB: half the weights and their cache each.
  const MEMORY = String(259 * 2 ** 20);
  const run = (args: string[]) =>
    spawnSync(
      process.execPath,
      [CLI, ...args, '--cache-dir', CACHE_DIR, '--model', 'random', '--threads', '1'],
      { encoding: 'utf8', env: { ...process.env, KVASIR_API_KEY: '' }, timeout: 120_000 },
    );

  it('plans it over two memories, each within its own budget, before loading', () => {
    const r = run(['info', '--backend', 'wasm', '--wasm-memory-bytes', MEMORY, '--json']);
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as {
      devices: {
        description: string;
        first_layer: number;
        num_layers: number;
        weight_bytes: number;
        kv_cache_bytes: number;
        memory_bytes: number;
        memory_source: string;
        budget_bytes: number;
        reserved_bytes: number;
      }[];
      memory_plan: { limited_by: string };
    };
    expect(
      report.devices.map((d) => [d.description.split(' ')[0], d.first_layer, d.num_layers]),
    ).toEqual([
      ['wasm', 0, 2],
      ['wasm', 2, 2],
    ]);
    for (const d of report.devices) {
      expect([d.memory_bytes, d.budget_bytes, d.memory_source]).toEqual([
        Number(MEMORY),
        Number(MEMORY),
        'wasm-memory',
      ]);
      expect(d.weight_bytes + d.kv_cache_bytes + d.reserved_bytes).toBeLessThanOrEqual(
        Number(MEMORY),
      );
    }
    expect(report.memory_plan.limited_by).toBe('device');
  });

  it("generates the unsplit model's greedy text, the banner naming each memory", () => {
    const args = [
      'generate',
      '-t',
      '0',
      '-n',
      '24',
      'Two memories, one model',
      '--backend',
      'wasm',
    ];
    const whole = run(args);
    const split = run([...args, '--wasm-memory-bytes', MEMORY]);
    expect(whole.status, whole.stderr).toBe(0);
    expect(split.status, split.stderr).toBe(0);
    expect(split.stdout.length).toBeGreaterThan(0);
    expect(split.stdout).toBe(whole.stdout);
    expect(split.stderr).toMatch(/\[kvasir\] backend split by layer over 2 devices\n/);
    expect(split.stderr).toMatch(
      /\[kvasir\] device 1 wasm \([^)]*\): layers 2-3, weights [\d.]+ MiB, KV \d+ blocks \([^)]*\), budget 259 MiB \(its WebAssembly memory\), room for \d+ blocks\n/,
    );
    expect(whole.stderr).not.toMatch(/split by layer/);
  });

  it('refuses a device whose memory cannot hold its layers, naming it and its numbers', () => {
    const r = run(['info', '--devices', 'wasm,wasm', '--wasm-memory-bytes', String(257 * 2 ** 20)]);
    expect(r.status, r.stderr).toBe(1);
    const lines = r.stderr.trim().split('\n');
    expect(lines.at(-1)).toMatch(
      /^kvasir: device 0 \(wasm \(1 threads, simd128[^)]*\), layers 0-1\): its weights \([\d.]+ MiB\) and activations \(256 MiB\) leave no room for its part of one KV block \([\d.]+ KiB\) in its budget of 257 MiB \(its WebAssembly memory\): give it fewer layers \[INVALID_CONFIG\]$/,
    );
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});
