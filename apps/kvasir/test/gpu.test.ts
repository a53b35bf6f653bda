import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { startServer } from './harness.js';

describe('WebGPU backend smoke test (software adapter in CI)', () => {
  it('serves the random model on WebGPU with the same greedy tokens as the CPU backend', async () => {
    const ask = async (backend: string) => {
      const server = await startServer(['--backend', backend, '--num-gpu-blocks', '64']);
      try {
        expect(server.output()).toMatch(/backend\s+\S+/);
        const res = (await server.client.completions.create({
          model: RANDOM_MODEL_NAME,
          prompt: 'WebGPU smoke test',
          max_tokens: 4,
          temperature: 0,
          logprobs: 0,
          ignore_eos: true,
        } as never)) as unknown as OpenAI.Completion;
        return res.choices[0]!.logprobs!.tokens!;
      } finally {
        await server.stop();
      }
    };
    const gpu = await ask('webgpu');
    const cpu = await ask('cpu');
    expect(gpu).toHaveLength(4);
    // Random weights give well-separated logits, so f32 GPU and CPU pick the same tokens.
    expect(gpu).toEqual(cpu);
  });
});

describe('swap preemption on the WebGPU backend', () => {
  it('swaps KV blocks out of and back into the GPU cache with the unpreempted greedy output', async () => {
    const prompts = [
      'Swap preemption on WebGPU reads whole blocks back',
      'and writes them into the cache when the request resumes',
      'so the resumed request continues where it stopped',
      'exactly as if it had never been paused',
    ];
    const run = async (args: string[], concurrent: boolean) => {
      const server = await startServer(['--backend', 'webgpu', ...args]);
      const one = async (prompt: string) => {
        const res = (await server.client.completions.create({
          model: RANDOM_MODEL_NAME,
          prompt,
          max_tokens: 40,
          temperature: 0,
          ignore_eos: true,
        } as never)) as unknown as OpenAI.Completion;
        return res.choices[0]!.text;
      };
      try {
        const out = concurrent
          ? await Promise.all(prompts.map(one))
          : await prompts.reduce<Promise<string[]>>(
              async (acc, p) => [...(await acc), await one(p)],
              Promise.resolve([]),
            );
        const swaps = (await server.metrics()).get('kvasir_preemptions_total{mode="swap"}') ?? 0;
        return { out, swaps };
      } finally {
        await server.stop();
      }
    };
    const reference = await run(['--num-gpu-blocks', '64'], false);
    expect(reference.swaps).toBe(0);
    // 4 requests × (≈12 prompt + 40 output tokens) need ≈16 blocks of 16; 8 force swaps.
    const swapped = await run(
      [
        '--num-gpu-blocks',
        '8',
        '--block-size',
        '16',
        '--preemption-mode',
        'swap',
        '--offload-host-bytes',
        '64MiB',
      ],
      true,
    );
    expect(swapped.swaps).toBeGreaterThan(0);
    // Greedy tokens: the random weights' well-separated logits do not flip between batch shapes.
    expect(swapped.out).toEqual(reference.out);
  });
});
