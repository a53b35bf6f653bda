import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type RedisClusterHandle,
  type RedisServerHandle,
  startRedisCluster,
  startRedisServer,
} from '@kvasir/offload/testing';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { eventually, type ServerProcess, startServer } from './harness.js';

const BLOCK = 16;
/** A prompt of several full blocks (shared document, system prompt, few-shot examples). */
const SHARED =
  'Replicas behind one load balancer share the KV cache of common prefixes through Redis, so a ' +
  'long system prompt is computed once for the whole fleet rather than once per replica. ';
const OTHERS = [
  'Eviction traffic one: the GPU cache is small, so these distinct prompts reclaim the cached blocks of earlier ones.',
  'Eviction traffic two: every new prompt needs fresh blocks, and the least recently used cached block goes first.',
  'Eviction traffic three: after a few of these the shared prefix no longer lives on the GPU at all, only below it.',
];

interface Answer {
  readonly text: string;
  readonly promptTokens: number;
  readonly cachedTokens: number;
}

/** Greedy, so two replicas (or two runs) with the same weights must agree token for token. */
async function ask(server: ServerProcess, prompt: string): Promise<Answer> {
  const res = (await server.client.completions.create({
    model: RANDOM_MODEL_NAME,
    prompt,
    max_tokens: 12,
    temperature: 0,
    ignore_eos: true,
  } as never)) as unknown as OpenAI.Completion;
  const usage = res.usage as unknown as {
    prompt_tokens: number;
    prompt_tokens_details?: { cached_tokens?: number };
  };
  return {
    text: res.choices[0]!.text,
    promptTokens: usage.prompt_tokens,
    cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

const metric = async (server: ServerProcess, name: string) =>
  (await server.metrics()).get(name) ?? 0;

/** Waits until the replica's background writes have stored at least `blocks` blocks. */
async function storedAtLeast(server: ServerProcess, blocks: number): Promise<boolean> {
  return eventually(
    async () => (await metric(server, 'kvasir_offload_prefix_stored_blocks_total')) >= blocks,
  );
}

const cpu = ['--backend', 'cpu', '--block-size', String(BLOCK)];

describe('prefix sharing across replicas through Redis (built CLI)', () => {
  let redis: RedisServerHandle;
  let a: ServerProcess;
  let b: ServerProcess;
  beforeAll(async () => {
    redis = await startRedisServer();
    // Redis as the only tier: whatever B finds, it found in Redis (written by A).
    const args = [...cpu, '--offload-host-bytes', '0', '--offload-redis-url', redis.url];
    [a, b] = await Promise.all([startServer(args), startServer(args)]);
    expect(a.output()).toContain('redis (prefix blocks shared through it)');
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await redis?.stop();
  });

  it('B reuses the prefix A computed, with the same greedy output', async () => {
    const prompt = SHARED.repeat(2);
    const first = await ask(a, prompt);
    expect(first.promptTokens).toBeGreaterThan(4 * BLOCK);
    expect(first.cachedTokens).toBe(0);
    const fullBlocks = Math.floor(first.promptTokens / BLOCK);
    expect(await storedAtLeast(a, fullBlocks)).toBe(true);

    const second = await ask(b, prompt);
    expect(second.cachedTokens).toBeGreaterThan(0);
    const imported = await metric(b, 'kvasir_offload_prefix_imported_tokens_total');
    expect(imported).toBeGreaterThan(0);
    // The prompt's whole reusable prefix (all but the last token) came from Redis.
    expect(imported).toBe(Math.floor((second.promptTokens - 1) / BLOCK) * BLOCK);
    expect(second.cachedTokens).toBe(imported);
    expect(await metric(b, 'kvasir_offload_hits_total{tier="redis"}')).toBeGreaterThan(0);
    expect(second.text).toBe(first.text);
    // A computed it itself and imported nothing.
    expect(await metric(a, 'kvasir_offload_prefix_imported_tokens_total')).toBe(0);
  });
});

describe('prefix sharing across replicas through a Redis Cluster (built CLI)', () => {
  let cluster: RedisClusterHandle;
  let a: ServerProcess;
  let b: ServerProcess;
  beforeAll(async () => {
    // Three masters: enough for blocks to land on several nodes, few processes for CI.
    cluster = await startRedisCluster({ nodes: 3 });
    const url = `redis+cluster://${cluster.startupNodes.map((n) => `${n.host}:${n.port}`).join(',')}`;
    const args = [...cpu, '--offload-host-bytes', '0', '--offload-redis-url', url];
    [a, b] = await Promise.all([startServer(args), startServer(args)]);
    expect(a.output()).toContain('(prefix blocks shared through it)');
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await cluster?.stop();
  });

  it('B reuses the prefix A computed, read from blocks spread over the masters', async () => {
    const prompt = SHARED.repeat(2);
    const first = await ask(a, prompt);
    expect(first.cachedTokens).toBe(0);
    const fullBlocks = Math.floor(first.promptTokens / BLOCK);
    expect(await storedAtLeast(a, fullBlocks)).toBe(true);
    // One key per block, hash-tagged into one slot each: the blocks sit on more than one master.
    const perNode = cluster.nodes.map((n) =>
      Number(
        execFileSync('redis-cli', ['-p', String(n.port), 'dbsize'])
          .toString()
          .trim(),
      ),
    );
    expect(perNode.reduce((x, y) => x + y, 0)).toBeGreaterThanOrEqual(fullBlocks);
    expect(perNode.filter((n) => n > 0).length).toBeGreaterThan(1);

    const second = await ask(b, prompt);
    const imported = await metric(b, 'kvasir_offload_prefix_imported_tokens_total');
    expect(imported).toBe(Math.floor((second.promptTokens - 1) / BLOCK) * BLOCK);
    expect(second.cachedTokens).toBe(imported);
    expect(await metric(b, 'kvasir_offload_hits_total{tier="redis"}')).toBeGreaterThan(0);
    expect(second.text).toBe(first.text);
  });
});

/** A GPU cache of 24 blocks: the prompts below need 8 to 11 each, so they evict each other. */
const tiny = [...cpu, '--num-gpu-blocks', '24', '--max-num-seqs', '1'];

describe('prefix offload below a tiny GPU cache (built CLI)', () => {
  it('imports an evicted prefix back from the host tier with identical output', async () => {
    const server = await startServer([...tiny, '--offload-host-bytes', '64MiB']);
    try {
      const prompt = SHARED;
      const first = await ask(server, prompt);
      expect(await storedAtLeast(server, Math.floor(first.promptTokens / BLOCK))).toBe(true);
      for (const other of OTHERS) await ask(server, `${other} ${other}`);
      const again = await ask(server, prompt);
      const reusable = Math.floor((again.promptTokens - 1) / BLOCK) * BLOCK;
      const imported = await metric(server, 'kvasir_offload_prefix_imported_tokens_total');
      expect(imported).toBeGreaterThan(0);
      // Part of the prefix was evicted from the GPU and came back from the host tier.
      expect(imported).toBeLessThanOrEqual(reusable);
      expect(again.cachedTokens).toBe(reusable);
      expect(await metric(server, 'kvasir_offload_hits_total{tier="host"}')).toBeGreaterThan(0);
      expect(again.text).toBe(first.text);
      expect(
        await eventually(
          async () => (await metric(server, 'kvasir_kv_blocks{state="used"}')) === 0,
        ),
      ).toBe(true);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('serves every request when Redis stops mid-run: imports miss, output is unchanged', async () => {
    const redis = await startRedisServer();
    const server = await startServer([
      ...tiny,
      '--offload-host-bytes',
      '0',
      '--offload-redis-url',
      redis.url,
    ]);
    try {
      const prompt = SHARED;
      const first = await ask(server, prompt);
      expect(await storedAtLeast(server, Math.floor(first.promptTokens / BLOCK))).toBe(true);
      expect(await metric(server, 'kvasir_offload_tier_up{tier="redis"}')).toBe(1);
      await redis.stop();
      for (const other of OTHERS) await ask(server, `${other} ${other}`);
      const again = await ask(server, prompt);
      expect(again.text).toBe(first.text);
      // The prefix was evicted (only part of it, if any, was still on the GPU) and Redis could
      // not bring it back.
      expect(again.cachedTokens).toBeLessThan(Math.floor((again.promptTokens - 1) / BLOCK) * BLOCK);
      expect(await metric(server, 'kvasir_offload_prefix_imported_tokens_total')).toBe(0);
      expect(await metric(server, 'kvasir_offload_tier_up{tier="redis"}')).toBe(0);
      expect(await metric(server, 'kvasir_offload_errors_total{tier="redis"}')).toBeGreaterThan(0);
      expect(
        await eventually(
          async () => (await metric(server, 'kvasir_kv_blocks{state="used"}')) === 0,
        ),
      ).toBe(true);
    } finally {
      expect(await server.stop()).toBe(0);
      await redis.stop();
    }
  });

  it('counts corrupted disk entries, writes the prefix again, and reuses the new copy', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvasir-disk-corrupt-'));
    const server = await startServer([
      ...tiny,
      '--offload-host-bytes',
      '0',
      '--offload-disk-dir',
      dir,
    ]);
    try {
      const prompt = SHARED;
      const first = await ask(server, prompt);
      const full = Math.floor(first.promptTokens / BLOCK);
      expect(await storedAtLeast(server, full)).toBe(true);
      // Flip the last byte of every stored entry: each read now fails its checksum.
      const files = walk(dir);
      expect(files.length).toBeGreaterThanOrEqual(full);
      for (const file of files) {
        const bytes = readFileSync(file);
        bytes[bytes.length - 1]! ^= 0xff;
        writeFileSync(file, bytes);
      }
      for (const other of OTHERS) await ask(server, `${other} ${other}`);
      const storedBefore = await settled(server, 'kvasir_offload_prefix_stored_blocks_total');
      const again = await ask(server, prompt);
      expect(again.text).toBe(first.text);
      expect(
        await metric(server, 'kvasir_offload_corrupt_entries_total{tier="disk"}'),
      ).toBeGreaterThan(0);
      expect(await metric(server, 'kvasir_offload_prefix_missing_blocks_total')).toBeGreaterThan(0);
      expect(await metric(server, 'kvasir_kv_cache_evictions_total')).toBeGreaterThan(0);
      // The recomputed prefix was written again, so a later eviction can still bring it back.
      expect(
        await eventually(
          async () =>
            (await metric(server, 'kvasir_offload_prefix_stored_blocks_total')) > storedBefore,
        ),
      ).toBe(true);
      const importedBefore = await metric(server, 'kvasir_offload_prefix_imported_blocks_total');
      for (const other of OTHERS) await ask(server, `${other} ${other}`);
      const third = await ask(server, prompt);
      expect(third.text).toBe(first.text);
      expect(await metric(server, 'kvasir_offload_prefix_imported_blocks_total')).toBeGreaterThan(
        importedBefore,
      );
    } finally {
      expect(await server.stop()).toBe(0);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** A counter's value once it has stopped moving (background writes done). */
async function settled(server: ServerProcess, name: string): Promise<number> {
  let last = await metric(server, name);
  for (let quiet = 0; quiet < 4; ) {
    await new Promise((r) => setTimeout(r, 50));
    const now = await metric(server, name);
    quiet = now === last ? quiet + 1 : 0;
    last = now;
  }
  return last;
}

function walk(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...walk(path));
    else if (entry.isFile()) out.push(path);
  }
  return out;
}
