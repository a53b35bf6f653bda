import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_KEY, type ServerProcess, startServer } from './harness.js';

// A random Gemma 3 shaped as the tiny-gemma3 fixture (layers 0-4 slide over 20 tokens, layer 5
// is global), served twice with the same KV bytes: by default (KV cache groups, the sliding
// layers hold only their window) and with --swa-full (every layer keeps the whole context).
// The same greedy requests, prompts five windows long sharing a prefix, run on both: the same
// tokens come back, and the grouped server runs more of them at once (vllm:num_requests_running
// sampled from /metrics while they run).

const WHOLE_BLOCKS = 60;
// One whole-context block holds 6 layers; a grouped block one (layersPerGroup 1): same bytes.
const GROUPED_BLOCKS = 6 * WHOLE_BLOCKS;
const shared = Array.from({ length: 48 }, (_, i) => 3 + ((i * 37) % 250));
const prompts = Array.from({ length: 12 }, (_, r) => [
  ...shared,
  ...Array.from({ length: 52 }, (_, i) => 3 + ((r * 101 + i * 13) % 250)),
]);

let dir: string;
let grouped: ServerProcess;
let whole: ServerProcess;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-swa-'));
  const config = makeModelConfig({
    architecture: 'gemma3',
    hiddenSize: 128,
    intermediateSize: 256,
    numLayers: 6,
    numHeads: 4,
    numKvHeads: 2,
    headDim: 32,
    vocabSize: 272,
    slidingWindow: 20,
    slidingWindowLayers: [0, 1, 2, 3, 4],
  });
  await writeRandomCheckpoint(join(dir, 'gemma'), config, 7);
  const common = ['--model', join(dir, 'gemma'), '--backend', 'cpu', '--block-size', '4'];
  const flags = ['--max-num-batched-tokens', '64', '--max-num-seqs', '16'];
  [grouped, whole] = await Promise.all([
    startServer([...common, ...flags, '--num-gpu-blocks', String(GROUPED_BLOCKS)]),
    startServer([...common, ...flags, '--num-gpu-blocks', String(WHOLE_BLOCKS), '--swa-full']),
  ]);
}, 120_000);

afterAll(async () => {
  expect(await grouped?.stop()).toBe(0);
  expect(await whole?.stop()).toBe(0);
  await rm(dir, { recursive: true, force: true });
});

/** Runs every prompt at once (greedy); returns the tokens and the most requests seen running. */
async function runAll(server: ServerProcess) {
  let peak = 0;
  let done = false;
  const samples: number[] = [];
  const sampler = (async () => {
    while (!done) {
      const m = await server.metrics();
      const running = m.get('vllm:num_requests_running') ?? 0;
      samples.push(running);
      peak = Math.max(peak, running);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const outputs = await Promise.all(
    prompts.map(async (prompt) => {
      const res = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
        body: JSON.stringify({
          model: 'gemma',
          prompt,
          max_tokens: 40,
          temperature: 0,
          ignore_eos: true,
          logprobs: 1,
        }),
      });
      const body = (await res.json()) as {
        choices: { logprobs: { tokens: string[] } }[];
      };
      expect(res.status, JSON.stringify(body)).toBe(200);
      return body.choices[0]!.logprobs.tokens;
    }),
  );
  done = true;
  await sampler;
  const mean = samples.reduce((x, y) => x + y, 0) / samples.length;
  return { outputs, peak, mean };
}

describe('kvasir serve: sliding-window layers hold only their window (real processes)', () => {
  it('both caches have the same bytes; the banner names the groups', () => {
    const bytes = (s: ServerProcess) =>
      /KV cache\s+\d+ blocks × 4 tokens = \d+ tokens \(([^,]+),/.exec(s.output())?.[1];
    expect(bytes(grouped)).toBeDefined();
    expect(bytes(grouped)).toBe(bytes(whole));
    expect(grouped.output()).toMatch(/KV groups\s+6 groups/);
    expect(whole.output()).toMatch(
      /KV groups\s+one: whole-context KV on the sliding-window layers \(--swa-full\)/,
    );
  });

  it('gives the same greedy tokens and runs more sequences at once in the same bytes', async () => {
    const a = await runAll(grouped);
    const b = await runAll(whole);
    expect(a.outputs).toEqual(b.outputs);
    // Whole: 36 blocks per 140-token sequence of 60: one or two in decode, a few more while
    // their prefill chunks are short. Grouped: 36 global pages plus 5 sliding groups of at most
    // 6 pages in decode (~21 with a 64-token chunk), of 360: several times as many.
    expect(a.mean).toBeGreaterThanOrEqual(1.8 * b.mean);
    expect(a.peak).toBeGreaterThanOrEqual(b.peak + 2);
    const preempted = async (s: ServerProcess) =>
      (await s.metrics()).get('kvasir_preemptions_total{mode="recompute"}') ?? 0;
    expect(await preempted(grouped)).toBeLessThan(await preempted(whole));
    const m = await grouped.metrics();
    // Idle again: no group holds blocks; the groups are listed with their windows.
    expect(m.get('kvasir_kv_group_blocks{group="0",window="full"}')).toBe(0);
    expect(m.get('kvasir_kv_group_blocks{group="5",window="20"}')).toBe(0);
    expect(m.get('vllm:kv_cache_usage_perc')).toBe(0);
  }, 300_000);

  it('refuses kv_compression on the grouped server with a 400 that names --swa-full', async () => {
    const res = await fetch(`${grouped.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
      body: JSON.stringify({
        model: 'gemma',
        prompt: 'one two',
        max_tokens: 3,
        kv_compression: { policy: 'sinks', sinks: 4, window: 28 },
      }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; param: string | null } };
    expect(body.error.message).toMatch(/--swa-full/);
  });
});
