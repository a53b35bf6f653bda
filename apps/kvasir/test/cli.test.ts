import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';
import { convertToGguf } from '@kvasir/model/formats';
import { describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { CACHE_DIR, CLI, startServer } from './harness.js';

const run = promisify(execFile);
const kvasir = (args: string[]) =>
  run(process.execPath, [CLI, ...args], {
    maxBuffer: 16 * 1024 * 1024,
    env: { ...process.env, KVASIR_API_KEY: '' },
  });

describe('kvasir CLI commands (built CLI)', () => {
  it('info reports the memory plan consistently', async () => {
    const { stdout } = await kvasir([
      'info',
      '--json',
      '--backend',
      'cpu',
      '--cache-dir',
      CACHE_DIR,
      '--model',
      'random',
      '--gpu-memory-bytes',
      '64MiB',
    ]);
    const info = JSON.parse(stdout);
    const plan = info.memory_plan;
    expect(info.model.random_weights).toBe(true);
    expect(info.model.id).toBe(RANDOM_MODEL_NAME);
    expect(info.kv_cache.bytes_per_token).toBe(
      2 * info.model.layers * info.model.kv_heads * info.model.head_dim * 4,
    );
    expect(plan.num_tokens).toBe(plan.num_blocks * info.kv_cache.block_size);
    expect(plan.kv_cache_bytes).toBe(plan.num_blocks * info.kv_cache.bytes_per_block);
    expect(plan.weight_bytes + plan.activation_bytes + plan.kv_cache_bytes).toBeLessThanOrEqual(
      plan.budget_bytes,
    );
  });

  it("info lists a k-quant GGUF's tensor types, bits per weight and the memory it needs", async () => {
    const gguf = join(
      import.meta.dirname,
      '../../../tooling/ggml-fixtures/models/tiny-llama-Q4_K_M.gguf',
    );
    const fixture = JSON.parse(await readFile(gguf.replace(/\.gguf$/, '.json'), 'utf8'));
    const args = ['info', '--backend', 'cpu', '--model', gguf, '--gpu-memory-bytes', '64MiB'];
    const info = JSON.parse((await kvasir([...args, '--json'])).stdout);
    const w = info.weights;
    const types = new Map<string, { tensors: number; parameters: number }>();
    for (const t of fixture.tensors as { type: string; shape: number[] }[]) {
      const e = types.get(t.type) ?? { tensors: 0, parameters: 0 };
      e.tensors++;
      e.parameters += t.shape.reduce((a, b) => a * b, 1);
      types.set(t.type, e);
    }
    expect(
      new Map(
        w.types.map((t: { dtype: string; tensors: number; parameters: number }) => [
          t.dtype,
          { tensors: t.tensors, parameters: t.parameters },
        ]),
      ),
    ).toEqual(types);
    const q4k = w.types.find((t: { dtype: string }) => t.dtype === 'Q4_K');
    expect(q4k.bits_per_weight).toBe(4.5);
    expect(w.types.find((t: { dtype: string }) => t.dtype === 'Q6_K').bits_per_weight).toBe(6.5625);
    expect(w.bits_per_weight).toBeCloseTo((8 * w.bytes) / w.parameters, 3);
    expect(w.bytes).toBe(info.model.weight_bytes);
    expect(info.memory_needed.full_context_bytes).toBe(
      w.bytes + info.kv_cache.bytes_per_token * info.model.max_model_len,
    );
    const text = (await kvasir(args)).stdout;
    expect(text).toMatch(/Q4_K +6 tensors/);
    expect(text).toMatch(/model needs +\S+ KiB of weights \+ \S+ KiB of KV per token/);
  });

  it('info names the architecture, the GGUF one and the GGUF tokenizer', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-info-qwen2-'));
    const config = makeModelConfig({
      architecture: 'qwen2',
      hiddenSize: 64,
      intermediateSize: 128,
      numLayers: 1,
      numHeads: 2,
      vocabSize: 300,
    });
    try {
      await writeRandomCheckpoint(join(dir, 'hf'), config, 1);
      const gguf = join(dir, 'qwen2.gguf');
      await convertToGguf(join(dir, 'hf'), gguf);
      const args = ['info', '--backend', 'cpu', '--model', gguf, '--gpu-memory-bytes', '64MiB'];
      const info = JSON.parse((await kvasir([...args, '--json'])).stdout);
      expect(info.model).toMatchObject({
        architecture: 'qwen2',
        gguf_architecture: 'qwen2',
        gguf_tokenizer: 'gpt2/gpt-2',
      });
      expect((await kvasir(args)).stdout).toMatch(
        /architecture +qwen2 \(GGUF qwen2, tokenizer gpt2\/gpt-2\)/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('info of a mixture of experts: experts per layer and token, weights active per token beside KV per token', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-info-qwen3moe-'));
    const config = makeModelConfig({
      architecture: 'qwen3moe',
      hiddenSize: 64,
      intermediateSize: 128,
      numLayers: 2,
      numHeads: 2,
      vocabSize: 300,
      moe: { numExperts: 8, numExpertsPerToken: 2, expertIntermediateSize: 32, normTopkProb: true },
    });
    try {
      await writeRandomCheckpoint(join(dir, 'hf'), config, 1);
      const gguf = join(dir, 'qwen3moe.gguf');
      await convertToGguf(join(dir, 'hf'), gguf);
      const args = ['info', '--backend', 'cpu', '--model', gguf, '--gpu-memory-bytes', '64MiB'];
      const info = JSON.parse((await kvasir([...args, '--json'])).stdout);
      // F32: each of the 2 layers' 8 experts holds 3 matrices of 32 x 64 floats; a token uses 2.
      const expertBytes = 2 * 8 * 3 * 32 * 64 * 4;
      expect(info.model.architecture).toBe('qwen3moe');
      expect(info.model.experts).toEqual({
        per_layer: 8,
        per_token: 2,
        active_weight_bytes_per_token: info.weights.bytes - (expertBytes * 6) / 8,
      });
      // The memory plan holds every expert.
      expect(info.model.weight_bytes).toBe(info.weights.bytes);
      expect((await kvasir(args)).stdout).toMatch(
        /experts +8 per layer, 2 per token: \S+ KiB of weights active per token, \S+ KiB of KV per token/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('generate prints a continuation and its token accounting', async () => {
    const { stdout, stderr } = await kvasir([
      'generate',
      'Hello',
      '--backend',
      'cpu',
      '--cache-dir',
      CACHE_DIR,
      '--model',
      'random',
      '-n',
      '8',
      '--seed',
      '3',
    ]);
    expect(stderr).toMatch(/noise/);
    expect(stderr).toMatch(/8 generated|finish: stop/);
    const again = await kvasir([
      'generate',
      'Hello',
      '--backend',
      'cpu',
      '--cache-dir',
      CACHE_DIR,
      '--model',
      'random',
      '-n',
      '8',
      '--seed',
      '3',
    ]);
    expect(again.stdout).toBe(stdout);
  });

  it('simulate compares Kvasir with Orca-like and static batching', async () => {
    const { stdout } = await kvasir(['simulate', '--requests', '60', '--rate', '1', '--json']);
    const sim = JSON.parse(stdout);
    expect(sim.systems.map((s: { system: string }) => s.system)).toEqual([
      'kvasir',
      'orca',
      'static',
    ]);
    for (const s of sim.systems) expect(s.completed).toBe(60);
  });

  it('bench runs an in-process engine with Poisson arrivals', async () => {
    const { stdout } = await kvasir([
      'bench',
      '--backend',
      'cpu',
      '--cache-dir',
      CACHE_DIR,
      '--model',
      'random',
      '--rate',
      '50',
      '--concurrency',
      '4',
      '--max-requests',
      '4',
      '--duration',
      '60',
      '--max-tokens',
      '3',
      '--prompt-words',
      '4',
      '--json',
    ]);
    const report = JSON.parse(stdout);
    expect(report.target).toBe('in-process');
    expect(report.mode).toBe('rate');
    expect(report.completed).toBe(4);
    expect(report.tpot_ms.count).toBe(4);
  });

  it('bench loads a running server and writes JSON and an SVG chart', async () => {
    const server = await startServer(['--backend', 'cpu']);
    const out = await mkdtemp(join(tmpdir(), 'kvasir-bench-'));
    const { stdout } = await kvasir([
      'bench',
      '--url',
      server.url,
      '--api-key',
      'sk-kvasir-e2e',
      '--concurrency',
      '4',
      '--max-requests',
      '8',
      '--duration',
      '60',
      '--max-tokens',
      '6',
      '--prompt-words',
      '8',
      '--json',
      '--out',
      out,
    ]);
    const report = JSON.parse(stdout);
    expect(report.requests).toBe(8);
    expect(report.failed_requests).toBe(0);
    expect(report.ttft_ms.count).toBe(8);
    expect(report.throughput_tok_s).toBeGreaterThan(0);
    const files = await readdir(out);
    const svg = files.find((f) => f.endsWith('.svg'))!;
    expect(await readFile(join(out, svg), 'utf8')).toMatch(/^<svg/);
    const full = JSON.parse(
      await readFile(join(out, files.find((f) => f.endsWith('.json'))!), 'utf8'),
    );
    expect(full.records).toHaveLength(8);
    expect(full.records.every((r: { outputTokens: number }) => r.outputTokens === 6)).toBe(true);
    expect(await server.stop()).toBe(0);
  });
});
