import { describe, expect, it } from 'vitest';
import { h2oPolicy, sinksPolicy, snapkvPolicy, windowPolicy } from './kv-compression/builtins.js';
import type { KvCompressionSpec } from './kv-compression/parse.js';
import { defineKvCompressionPolicy } from './kv-compression/policy.js';
import {
  type ReferencePolicy,
  referenceCompressedGeneration,
} from './testing/kv-compression-reference.js';
import { expectError, SEED, seqPrompt, setup, VOCAB } from './testing/scheduler-harness.js';

const MODEL_LEN = 64;
const BS = 4;

function specOf(p: ReferencePolicy, positions: 'cache' | 'original' = 'cache'): KvCompressionSpec {
  const policy =
    p.name === 'window'
      ? windowPolicy(p)
      : p.name === 'sinks'
        ? sinksPolicy(p)
        : p.name === 'h2o'
          ? h2oPolicy(p)
          : snapkvPolicy(p);
  return { policy, positions };
}

describe('KV compression through the scheduler', () => {
  const cases: { policy: ReferencePolicy; prompt: number }[] = [
    { policy: { name: 'window', window: 16 }, prompt: 10 },
    { policy: { name: 'sinks', sinks: 4, window: 12 }, prompt: 10 },
    { policy: { name: 'h2o', budget: 24 }, prompt: 10 },
    { policy: { name: 'h2o', budget: 24, recent: 0.25 }, prompt: 22 },
    { policy: { name: 'snapkv', budget: 24, observation: 4 }, prompt: 40 },
  ];
  for (const { policy, prompt } of cases) {
    it(`${policy.name} generates what its reference generates, 4x past the context, in constant memory`, () => {
      const h = setup({ numBlocks: 64, blockSize: BS, maxModelLen: MODEL_LEN });
      h.exec.checkCachePositions = () => true;
      const spec = specOf(policy);
      const maxBlocks = spec.policy.maxBlocks(BS);
      const maxTokens = 4 * MODEL_LEN;
      const promptIds = seqPrompt(prompt, 3);
      h.sched.add({ id: 'r', promptTokenIds: promptIds, maxTokens, kvCompression: spec });
      const held: number[] = [];
      let massRows = 0;
      for (let i = 0; i < 1000 && h.sched.hasUnfinished(); i++) {
        const plan = h.step();
        for (const row of plan.rows) {
          if (!row.attentionMass) continue;
          massRows++;
          expect(row.massQueries).toBe(
            spec.policy.attention === 'decode' ? row.queryLen : Math.min(4, row.queryLen),
          );
        }
        // Within a step the cache may hold one block more (the new token's); after it, no more
        // than the policy's blocks.
        if (h.sched.hasUnfinished()) {
          held.push(h.kv.stats().usedBlocks);
          const m = h.sched.metrics().kvCompression[spec.policy.name]!;
          expect([m.requests, m.blocksHeld]).toEqual([1, held.at(-1)]);
        }
      }
      const out = h.outputs.get('r')!;
      expect(out.finishReason).toBe('length');
      const ref = referenceCompressedGeneration(policy, {
        seed: SEED,
        vocab: VOCAB,
        blockSize: BS,
        prompt: promptIds,
        maxTokens,
      });
      expect(Array.from(out.outputs[0]!.tokenIds)).toEqual(ref.output);
      expect(Math.max(...held)).toBeLessThanOrEqual(maxBlocks);
      // Constant: the second half of the generation holds what the first half settled at.
      expect(held.slice(held.length / 2).every((n) => n === held[held.length - 1])).toBe(true);
      expect(h.kv.stats().usedBlocks).toBe(0);
      expect(massRows > 0).toBe(spec.policy.attention !== 'none');
      if (policy.name !== 'window') expect(h.exec.shifts.length).toBeGreaterThan(0);
      const m = h.sched.metrics().kvCompression[spec.policy.name]!;
      // Every token but the last sampled one entered the cache; the last step (after which the
      // request ended, uncompressed) held at most one block more than the policy keeps.
      expect(m.tokensDropped % BS).toBe(0);
      expect(m.tokensDropped).toBeGreaterThanOrEqual(prompt + maxTokens - 1 - (maxBlocks + 1) * BS);
      expect(m.requests).toBe(0);
    });
  }

  it('after a drop, the next plan shifts exactly the kept blocks after the first dropped one', () => {
    const h = setup({ numBlocks: 64, blockSize: BS, maxModelLen: MODEL_LEN });
    h.exec.checkCachePositions = () => true;
    // sinks: 1 block + window 2 blocks. The prompt fills 3 blocks; the first decode opens a 4th.
    const spec = specOf({ name: 'sinks', sinks: 4, window: 8 });
    h.sched.add({ id: 'r', promptTokenIds: seqPrompt(12), maxTokens: 8, kvCompression: spec });
    h.step(); // the prompt
    const before = [...h.kv.blockTable(1)];
    const decode = h.step(); // token 13 in a new block; then block 1 (tokens 4..7) is dropped
    expect(decode.keyShifts).toEqual([]);
    expect(h.kv.blockTable(1)).toEqual([before[0], before[2], decode.rows[0]!.blockTable[3]]);
    const next = h.step();
    expect(next.keyShifts).toEqual([
      { block: before[2], delta: -4 },
      { block: decode.rows[0]!.blockTable[3], delta: -4 },
    ]);
    expect(next.positions[0]).toBe(9);
    expect(next.contextLens[0]).toBe(10);
    h.runAll();
  });

  it("snapkv's last prompt chunk holds the whole observation window and reports its mass", () => {
    const h = setup({
      numBlocks: 64,
      blockSize: BS,
      maxModelLen: MODEL_LEN,
      maxNumBatchedTokens: 8,
    });
    const spec = specOf({ name: 'snapkv', budget: 12, observation: 6 });
    h.sched.add({ id: 'r', promptTokenIds: seqPrompt(19), maxTokens: 3, kvCompression: spec });
    const chunks: number[] = [];
    const mass: (number | undefined)[] = [];
    while (h.sched.hasUnfinished()) {
      const plan = h.step();
      const row = plan.rows[0]!;
      if (row.isPrefill) chunks.push(row.queryLen);
      mass.push(row.massQueries);
    }
    // 19 = 8 + 5 + 6: the second chunk stops short so the last holds all 6 observed tokens.
    expect(chunks).toEqual([8, 5, 6]);
    expect(mass).toEqual([undefined, undefined, 6, undefined, undefined]);
    expect(h.outputs.get('r')!.outputs[0]!.tokenIds).toHaveLength(3);
  });

  it("positions 'original': no key shifts, positions are token indices, capped at the context", () => {
    const h = setup({ numBlocks: 64, blockSize: BS, maxModelLen: MODEL_LEN });
    const spec = specOf({ name: 'sinks', sinks: 4, window: 12 }, 'original');
    h.sched.add({ id: 'r', promptTokenIds: seqPrompt(10), maxTokens: 500, kvCompression: spec });
    let lastPosition = -1;
    while (h.sched.hasUnfinished()) {
      const plan = h.step();
      expect(plan.keyShifts).toEqual([]);
      if (plan.numTokens > 0) {
        const p = plan.positions[plan.numTokens - 1]!;
        expect(p).toBe(lastPosition < 0 ? 9 : lastPosition + 1);
        // The policy's 4 blocks, and the new token in a fifth while the step runs.
        expect(plan.contextLens[0]!).toBeLessThanOrEqual(4 * BS + 1);
        lastPosition = p;
      }
    }
    expect(lastPosition).toBe(MODEL_LEN - 2);
    const out = h.outputs.get('r')!;
    expect([out.finishReason, out.outputs[0]!.tokenIds.length]).toEqual(['length', MODEL_LEN - 10]);
    const ref = referenceCompressedGeneration(
      { name: 'sinks', sinks: 4, window: 12 },
      { seed: SEED, vocab: VOCAB, blockSize: BS, prompt: seqPrompt(10), maxTokens: MODEL_LEN - 10 },
    );
    expect(Array.from(out.outputs[0]!.tokenIds)).toEqual(ref.output);
  });

  it("streams a prompt longer than the context through a bounded cache ('cache' positions)", () => {
    const h = setup({ numBlocks: 64, blockSize: BS, maxModelLen: MODEL_LEN });
    h.exec.checkCachePositions = () => true;
    const spec = specOf({ name: 'sinks', sinks: 4, window: 12 });
    const prompt = seqPrompt(150, 7);
    h.sched.add({ id: 'long', promptTokenIds: prompt, maxTokens: 5, kvCompression: spec });
    let peak = 0;
    let steps = 0;
    let context: number[] = [];
    while (h.sched.hasUnfinished()) {
      const plan = h.step();
      steps++;
      for (const row of plan.rows) expect(row.queryLen).toBeLessThanOrEqual(16);
      peak = Math.max(peak, h.kv.stats().usedBlocks);
      const row = plan.rows[0]!;
      context = [];
      for (let i = 0; i < row.contextLen; i++) {
        context.push(h.exec.gpu.get(row.blockTable[Math.floor(i / BS)]!)![i % BS]!);
      }
    }
    const out = Array.from(h.outputs.get('long')!.outputs[0]!.tokenIds);
    expect(out).toHaveLength(5);
    // After a step the sink block and 3 window blocks; during one, a chunk's blocks besides.
    expect(peak).toBeLessThanOrEqual(4 + 5);
    expect(steps).toBeGreaterThanOrEqual(Math.ceil(150 / 16) + 4);
    // What the last token saw: the sink block (the first 4 prompt tokens) and the window's
    // blocks, which stayed aligned to the block size: tokens 144..153 of prompt + output.
    const all = [...prompt, ...out];
    expect(context).toEqual([...all.slice(0, 4), ...all.slice(144, 154)]);
  });

  it('refuses what it cannot serve, naming the field', () => {
    const h = setup({ numBlocks: 64, blockSize: BS, maxModelLen: MODEL_LEN });
    const add = (over: object) => () =>
      h.sched.add({ id: 'x', promptTokenIds: seqPrompt(8), maxTokens: 4, ...over });
    const sinks = specOf({ name: 'sinks', sinks: 4, window: 12 });
    expectError(add({ kvCompression: sinks, beamWidth: 2 }), 'INVALID_REQUEST', /beam search/);
    expectError(
      add({ kvCompression: specOf({ name: 'window', window: 64 }) }),
      'INVALID_REQUEST',
      /'cache' positions would reach maxModelLen 64/,
    );
    expectError(
      add({ kvCompression: specOf({ name: 'h2o', budget: 4 }) }),
      'INVALID_REQUEST',
      /at least 2 blocks/,
    );
    expectError(
      add({ kvCompression: { policy: { name: 'mine' }, positions: 'cache' } }),
      'INVALID_REQUEST',
      /kvCompression.policy: .*defineKvCompressionPolicy/,
    );
    expectError(
      add({ kvCompression: { ...sinks, positions: 'rope' } }),
      'INVALID_REQUEST',
      /positions/,
    );
    const long = seqPrompt(MODEL_LEN + 1);
    expectError(add({ promptTokenIds: long }), 'INVALID_REQUEST', /over maxModelLen/);
    expectError(
      add({ promptTokenIds: long, kvCompression: specOf({ name: 'snapkv', budget: 24 }) }),
      'INVALID_REQUEST',
      /streams a longer prompt/,
    );
    expectError(
      add({ promptTokenIds: long, kvCompression: { ...sinks, positions: 'original' } }),
      'INVALID_REQUEST',
      /over maxModelLen/,
    );
    expect(h.sched.hasUnfinished()).toBe(false);
  });

  it('a user scoring policy plugs in; a bad selection is INVALID_POLICY and memory stays bounded', () => {
    const h = setup({ numBlocks: 64, blockSize: BS, maxModelLen: MODEL_LEN });
    // Keeps blocks whose first token is even-indexed... and once, selects the last block.
    let misbehave = false;
    const evenStarts = defineKvCompressionPolicy({
      name: 'even-starts',
      attention: 'none',
      maxBlocks: () => 6,
      select(v) {
        if (misbehave) return [v.numBlocks - 1];
        const out: number[] = [];
        for (let i = 0; i < v.numBlocks - 1; i++)
          if ((v.blockStarts[i]! / BS) % 2 === 1) out.push(i);
        return out;
      },
    });
    h.sched.add({
      id: 'u',
      promptTokenIds: seqPrompt(9),
      maxTokens: 100,
      kvCompression: { policy: evenStarts, positions: 'cache' },
    });
    for (let i = 0; i < 30; i++) h.step();
    const plan = h.sched.schedule();
    misbehave = true;
    expectError(() => h.sched.update(h.exec.run(plan)), 'INVALID_POLICY', /even-starts selected/);
    expect(h.kv.stats().usedBlocks).toBeLessThanOrEqual(6);
    misbehave = false;
    h.runAll();
    expect(h.outputs.get('u')!.outputs[0]!.tokenIds).toHaveLength(100);
    expect(h.kv.stats().usedBlocks).toBe(0);
  });

  it('a select that throws names only its requests; a built-in one in the same step goes on', () => {
    const h = setup({ numBlocks: 64, blockSize: BS, maxModelLen: MODEL_LEN });
    let fail = false;
    const flaky = defineKvCompressionPolicy({
      name: 'flaky',
      attention: 'none',
      maxBlocks: () => 4,
      select() {
        if (fail) throw new Error('bug in select');
        return [];
      },
    });
    h.sched.add({
      id: 'mine',
      promptTokenIds: seqPrompt(9),
      maxTokens: 40,
      kvCompression: { policy: flaky, positions: 'cache' },
    });
    h.sched.add({
      id: 'builtin',
      promptTokenIds: seqPrompt(9, 5),
      maxTokens: 40,
      kvCompression: { policy: windowPolicy({ window: 16 }), positions: 'cache' },
    });
    for (let i = 0; i < 20; i++) h.step();
    fail = true;
    const plan = h.sched.schedule();
    expect(new Set(plan.rows.map((r) => r.requestId))).toEqual(new Set(['mine', 'builtin']));
    let error: unknown;
    try {
      h.sched.update(h.exec.run(plan));
    } catch (e) {
      error = e;
    }
    expect(error).toMatchObject({
      code: 'INVALID_POLICY',
      message: expect.stringMatching(/flaky threw from select: bug in select/),
      details: { policy: 'flaky', requestIds: ['mine'] },
    });
    // The step was applied to both; the caller ends the one named, the other runs to its end.
    expect(h.sched.abort('mine', { keepCached: false })).toBeDefined();
    h.runAll();
    expect(h.outputs.get('builtin')!.outputs[0]!.tokenIds).toHaveLength(40);
    expect(h.kv.stats().usedBlocks).toBe(0);
  });

  it('reads maxBlocks once, at add: a policy failing later cannot stop a step; one failing at add is refused', () => {
    const h = setup({ numBlocks: 64, blockSize: BS, maxModelLen: MODEL_LEN });
    let calls = 0;
    const once = defineKvCompressionPolicy({
      name: 'once',
      attention: 'none',
      maxBlocks: () => {
        if (calls++ > 0) throw new Error('maxBlocks broke');
        return 4;
      },
      select: () => [],
    });
    h.sched.add({
      id: 'r',
      promptTokenIds: seqPrompt(30),
      maxTokens: 60,
      kvCompression: { policy: once, positions: 'cache' },
    });
    h.runAll();
    expect(h.outputs.get('r')!.outputs[0]!.tokenIds).toHaveLength(60);
    expect(h.kv.stats().usedBlocks).toBe(0);
    expectError(
      () =>
        h.sched.add({
          id: 'r2',
          promptTokenIds: seqPrompt(9),
          maxTokens: 4,
          kvCompression: { policy: once, positions: 'cache' },
        }),
      'INVALID_POLICY',
      /once: maxBlocks\(4\) threw: maxBlocks broke/,
    );
    expect(h.sched.hasUnfinished()).toBe(false);
  });

  it('preempts a compressed request by recompute (swap mode falls back), re-prefilling within its budget', () => {
    // 14 blocks: two sinks requests of 4 blocks each plus a long plain one compete.
    const h = setup({
      numBlocks: 14,
      blockSize: BS,
      maxModelLen: MODEL_LEN,
      preemptionMode: 'swap',
      hostSwapBlocks: 64,
      admissionWatermark: 0,
    });
    h.exec.checkCachePositions = (id) => id !== 'plain';
    const spec = specOf({ name: 'sinks', sinks: 4, window: 12 });
    h.sched.add({ id: 'plain', promptTokenIds: seqPrompt(8), maxTokens: 40, ignoreEos: true });
    h.sched.add({ id: 'a', promptTokenIds: seqPrompt(12, 2), maxTokens: 120, kvCompression: spec });
    h.sched.add({ id: 'b', promptTokenIds: seqPrompt(30, 5), maxTokens: 120, kvCompression: spec });
    const request = new Map<number, string>();
    while (h.sched.hasUnfinished()) {
      const plan = h.step();
      for (const row of plan.rows) request.set(row.seqId, row.requestId);
      // After every step, re-prefills included, a compressed request holds its 4 blocks at most.
      for (const seq of h.kv.sequences()) {
        if (request.get(Number(seq)) !== 'plain') {
          expect(h.kv.blockTable(seq).length).toBeLessThanOrEqual(4);
        }
      }
    }
    const m = h.sched.metrics();
    expect(m.preemptionsRecompute).toBeGreaterThan(0);
    expect(m.swapFallbacks).toBeGreaterThan(0);
    expect(h.kv.stats().usedBlocks).toBe(0);
    for (const id of ['a', 'b']) expect(h.outputs.get(id)!.outputs[0]!.tokenIds).toHaveLength(120);
    expect(h.outputs.get('plain')!.outputs[0]!.tokenIds).toHaveLength(40);
  });
});
