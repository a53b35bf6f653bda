import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { DEFAULT_MODEL_NAME } from '../src/default-model.js';
import { startServer } from './harness.js';

describe('WebGPU backend smoke test (software adapter in CI)', () => {
  it('serves the default model on WebGPU with the same greedy tokens as the CPU backend', async () => {
    const ask = async (backend: string) => {
      const server = await startServer(['--backend', backend, '--num-gpu-blocks', '64']);
      try {
        expect(server.output()).toMatch(/backend\s+\S+/);
        const res = (await server.client.completions.create({
          model: DEFAULT_MODEL_NAME,
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
