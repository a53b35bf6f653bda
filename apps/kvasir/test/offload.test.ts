import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type RedisServerHandle, startRedisServer } from '@kvasir/offload/testing';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { eventually, type ServerProcess, startServer } from './harness.js';

const PROMPTS = [
  'Swap preemption keeps the KV of a paused request in host memory',
  'The scheduler picks a victim when the GPU cache runs out of blocks',
  'Offload tiers sit below the GPU: host memory, local disk and Redis',
  'A resumed request must continue exactly where it stopped',
];

/** Sampled (not greedy) with fixed seeds, so any KV corruption would change the tokens. */
async function runAll(server: ServerProcess, concurrent: boolean): Promise<string[]> {
  const one = async (prompt: string, i: number) => {
    const res = (await server.client.completions.create({
      model: RANDOM_MODEL_NAME,
      prompt,
      max_tokens: 48,
      temperature: 0.8,
      seed: 100 + i,
      ignore_eos: true,
    } as never)) as unknown as OpenAI.Completion;
    return res.choices[0]!.text;
  };
  if (concurrent) return Promise.all(PROMPTS.map(one));
  const out: string[] = [];
  for (const [i, p] of PROMPTS.entries()) out.push(await one(p, i));
  return out;
}

let reference: string[];

beforeAll(async () => {
  // One request at a time with plenty of blocks: nothing is ever preempted.
  const roomy = await startServer(['--backend', 'cpu']);
  reference = await runAll(roomy, false);
  const m = await roomy.metrics();
  expect(m.get('kvasir_preemptions_total{mode="swap"}') ?? 0).toBe(0);
  expect(m.get('kvasir_preemptions_total{mode="recompute"}') ?? 0).toBe(0);
  await roomy.stop();
});

describe('swap preemption through the offload tiers (built CLI)', () => {
  let redis: RedisServerHandle;
  beforeAll(async () => {
    redis = await startRedisServer();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  // 4 requests × (≈12 prompt + 48 output tokens) need ≈16 blocks of 16; 8 blocks force swaps.
  const tiny = [
    '--backend',
    'cpu',
    '--num-gpu-blocks',
    '8',
    '--block-size',
    '16',
    '--preemption-mode',
    'swap',
  ];

  it('swaps to host memory and produces exactly the unpreempted output', async () => {
    const server = await startServer([...tiny, '--offload-host-bytes', '64MiB']);
    const out = await runAll(server, true);
    const m = await server.metrics();
    expect(m.get('kvasir_preemptions_total{mode="swap"}')).toBeGreaterThan(0);
    expect(m.get('kvasir_offload_hits_total{tier="host"}')).toBeGreaterThan(0);
    expect(out).toEqual(reference);
    expect(
      await eventually(
        async () => (await server.metrics()).get('kvasir_kv_blocks{state="used"}') === 0,
      ),
    ).toBe(true);
    expect(await server.stop()).toBe(0);
  });

  it('swaps through host and a real Redis, serving blocks the host tier evicted from Redis', async () => {
    // A host tier of about one block: most swapped blocks are only found in Redis.
    const server = await startServer([
      ...tiny,
      '--offload-host-bytes',
      '40KiB',
      '--offload-redis-url',
      redis.url,
      '--swap-blocks',
      '64',
    ]);
    const out = await runAll(server, true);
    const m = await server.metrics();
    expect(m.get('kvasir_preemptions_total{mode="swap"}')).toBeGreaterThan(0);
    expect(m.get('kvasir_offload_hits_total{tier="redis"}')).toBeGreaterThan(0);
    expect(out).toEqual(reference);
    expect(await server.stop()).toBe(0);
  });
});

describe('custom eviction policy from a file (built CLI)', () => {
  it('loads the module and the GPU block pool evicts through it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-policy-'));
    const log = join(dir, 'victims.log');
    const module = join(dir, 'logging-fifo.mjs');
    await writeFile(
      module,
      `import { appendFileSync } from 'node:fs';
export default function createPolicy() {
  const queue = [];
  return {
    specificationVersion: 'v1',
    name: 'logging-fifo',
    insert(k) { queue.push(k); },
    touch() {},
    remove(k) { const i = queue.indexOf(k); if (i >= 0) queue.splice(i, 1); },
    chooseVictim() {
      const v = queue[0];
      if (v !== undefined) appendFileSync(${JSON.stringify(log)}, v + '\\n');
      return v;
    },
  };
}
`,
    );
    const server = await startServer([
      '--backend',
      'cpu',
      '--num-gpu-blocks',
      '12',
      '--eviction-policy',
      module,
    ]);
    expect(server.output()).toContain(`eviction ${module}`);
    // Distinct prompts fill the cache with cached blocks; later ones must reclaim them.
    for (const [i, p] of PROMPTS.entries()) {
      await server.client.completions.create({
        model: RANDOM_MODEL_NAME,
        prompt: `${p} ${p}`,
        max_tokens: 40,
        seed: i,
        ignore_eos: true,
      } as never);
    }
    const victims = (await readFile(log, 'utf8')).trim().split('\n');
    expect(victims.length).toBeGreaterThan(0);
    for (const v of victims) expect(Number.isInteger(Number(v))).toBe(true);
    expect(await server.stop()).toBe(0);
  });
});
