import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, type ServerProcess, startServer } from './harness.js';

// A model with a 64-token context on a 24-block cache of 8-token blocks (192 tokens): a
// generation of 4 × the context cannot fit uncompressed, and every policy below holds at most
// 6 blocks, so two such requests run side by side in constant memory.
const CONTEXT = 64;
const BLOCKS = 24;

let server: ServerProcess;
let tmp: string;

type WithKv = OpenAI.CompletionCreateParamsNonStreaming & { kv_compression?: unknown };

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'kvasir-kvc-'));
  const dir = join(tmp, 'kvc-random');
  await writeRandomCheckpoint(
    dir,
    makeModelConfig({
      architecture: 'llama',
      hiddenSize: 64,
      intermediateSize: 128,
      numLayers: 2,
      numHeads: 4,
      numKvHeads: 2,
      vocabSize: 320,
      maxPositionEmbeddings: CONTEXT,
      tieWordEmbeddings: false,
    }),
    3,
  );
  server = await startServer([
    '--model',
    dir,
    '--backend',
    'cpu',
    '--block-size',
    '8',
    '--num-gpu-blocks',
    String(BLOCKS),
    '--max-num-batched-tokens',
    '32',
  ]);
});

afterAll(async () => {
  expect(await server.stop()).toBe(0);
  await rm(tmp, { recursive: true, force: true });
});

const POLICIES = [
  { policy: 'window', window: 40 },
  { policy: 'sinks', sinks: 4, window: 32 },
  { policy: 'h2o', budget: 48 },
  { policy: 'snapkv', budget: 40, observation: 8 },
] as const;

const usedBlocks = async () => (await server.metrics()).get('kvasir_kv_blocks{state="used"}');

describe('kv_compression through the server (real process, official client)', () => {
  it('runs every built-in policy 4× past the context in a bounded cache', async () => {
    const prompt = Array.from({ length: 40 }, (_, i) => (i * 37) % 300);
    const results = await Promise.all(
      POLICIES.map((kv) =>
        server.client.completions.create({
          model: 'kvc-random',
          prompt,
          max_tokens: 4 * CONTEXT,
          temperature: 0,
          ignore_eos: true,
          kv_compression: kv,
        } as WithKv),
      ),
    );
    for (const res of results) {
      expect(res.choices[0]!.finish_reason).toBe('length');
      expect(res.usage!.completion_tokens).toBe(4 * CONTEXT);
    }
    // Original positions cannot pass the context (the server refuses), but compress within it.
    const original = await server.client.completions.create({
      model: 'kvc-random',
      prompt,
      max_tokens: CONTEXT - prompt.length,
      temperature: 0,
      ignore_eos: true,
      kv_compression: { policy: 'window', window: 16, positions: 'original' },
    } as WithKv);
    expect(original.usage!.completion_tokens).toBe(CONTEXT - prompt.length);
    const m = await server.metrics();
    for (const name of ['window', 'sinks', 'h2o', 'snapkv']) {
      expect(m.get(`kvasir_kv_compression_dropped_tokens_total{policy="${name}"}`)).toBeGreaterThan(
        0,
      );
    }
    // Every block came back once the requests ended.
    expect(await eventually(async () => (await usedBlocks()) === 0)).toBe(true);
  });

  it('refuses a request past the context without compression, and bad policies by name', async () => {
    const long = await server.client.completions
      .create({ model: 'kvc-random', prompt: [1, 2, 3], max_tokens: 4 * CONTEXT })
      .catch((e: unknown) => e);
    expect(long).toBeInstanceOf(OpenAI.APIError);
    expect((long as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
    for (const [kv, words] of [
      [{ policy: 'lru' }, /unknown policy/],
      [{ policy: 'sinks', sinks: 4 }, /window/],
      [{ policy: 'sinks', sinks: 4, window: 32, budget: 9 }, /unknown parameter/],
      [{ policy: 'h2o', budget: 4 }, /2 blocks/],
      [{ policy: 'window', window: 32, positions: 'elsewhere' }, /positions/],
      // Larger than the context in cache positions: the scheduler's refusal, named as sent.
      [{ policy: 'window', window: 1e12 }, /^400 kv_compression: .*maxModelLen 64/],
    ] as const) {
      const error = await server.client.completions
        .create({
          model: 'kvc-random',
          prompt: [1, 2, 3],
          max_tokens: 4,
          kv_compression: kv,
        } as WithKv)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      const api = error as InstanceType<typeof OpenAI.APIError>;
      expect(api.status).toBe(400);
      expect(api.param).toBe('kv_compression');
      expect(api.message).toMatch(words);
      expect(api.message).not.toMatch(/\bat .*\.js:\d+/);
    }
  });

  it('returns every block when compressed streams are aborted mid-generation', async () => {
    const streams = await Promise.all(
      [0, 1, 2].map((k) =>
        server.client.completions.create({
          model: 'kvc-random',
          prompt: [5 + k, 6, 7, 8, 9],
          max_tokens: 8 * CONTEXT,
          ignore_eos: true,
          stream: true,
          kv_compression:
            k === 2 ? { policy: 'h2o', budget: 32 } : { policy: 'sinks', sinks: 8, window: 24 },
        } as unknown as OpenAI.CompletionCreateParamsStreaming),
      ),
    );
    let seen = 0;
    await Promise.all(
      streams.map(async (stream) => {
        let n = 0;
        for await (const _chunk of stream) {
          if (++n === 2 * CONTEXT) break; // past the context, then the client goes away
        }
        seen += n;
      }),
    );
    expect(seen).toBe(3 * 2 * CONTEXT);
    expect(await eventually(async () => (await usedBlocks()) === 0)).toBe(true);
  });
});
