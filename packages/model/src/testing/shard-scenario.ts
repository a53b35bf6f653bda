// Test-only: one fixed run over a model that touches everything sharding must keep working
// (batched prefill, a prefix hit, a copy-on-write fork, swap-out and swap-in through
// readBlocks/writeBlocks, a key shift, attention mass), and how to compare two runs.
import { expect } from 'vitest';
import type { ForwardPlan, ForwardRow } from '../execution/forward-plan.js';
import type { Model } from '../model/model.js';
import { maxRelDiff } from './compare.js';
import { mergePlans, seqPlan } from './model.js';

/** What {@link runShardScenario} saw. */
export interface ShardScenarioRun {
  /** Each step's logits. */
  readonly logits: Float32Array[];
  /** Each step's attention mass of its first row. */
  readonly mass: Float32Array[];
  /** The bytes swapped out mid-run (two blocks). */
  readonly swapped: Uint8Array;
  /** Every block's bytes at the end. */
  readonly blocks: Uint8Array;
}

/** Blocks the scenario needs (`numBlocks` of the models it runs on, block size 8). */
export const SCENARIO_BLOCKS = 24;
/** The scenario's block size. */
export const SCENARIO_BLOCK_SIZE = 8;

function withMass(plan: ForwardPlan, blocks: number): { plan: ForwardPlan; mass: Float32Array } {
  const mass = new Float32Array(blocks);
  const rows = plan.rows.map((r, i): ForwardRow => (i === 0 ? { ...r, attentionMass: mass } : r));
  return { plan: { ...plan, rows }, mass };
}

/** Runs the scenario's steps on `model` (block size 8, at least 24 blocks, vocab ≥ 64). */
export async function runShardScenario(model: Model): Promise<ShardScenarioRun> {
  const bs = SCENARIO_BLOCK_SIZE;
  const vocab = model.config.vocabSize;
  const tok = (n: number, salt: number) =>
    Array.from({ length: n }, (_, i) => (i * 37 + salt * 11 + 5) % vocab);
  const logits: Float32Array[] = [];
  const masses: Float32Array[] = [];
  const step = async (plan: ForwardPlan, massBlocks: number) => {
    const { plan: p, mass } = withMass(plan, massBlocks);
    logits.push(await model.forward(p));
    masses.push(mass);
  };
  const seq0 = tok(13, 0);
  // Two prompts prefilled together, seq 0 over blocks 3 and 7.
  await step(
    mergePlans([seqPlan(seq0, 0, [3, 7], bs), seqPlan(tok(5, 1), 0, [10], bs, 'last')]),
    2,
  );
  // A prefix hit: seq 2 reuses seq 0's full first block and computes only its own tail.
  const tail = tok(5, 2);
  await step(seqPlan(tail, 8, [3, 12], bs), 2);
  // A fork of seq 0 (copy-on-write of its partial block 7 into 14), both decoding one token.
  await step(
    {
      ...mergePlans([seqPlan([7], 13, [3, 7], bs, 'last'), seqPlan([9], 13, [3, 14], bs, 'last')]),
      copies: [{ src: 7, dst: 14 }],
    },
    2,
  );
  // Swap-out of seq 0's blocks, swap-in elsewhere, then decoding from the new place.
  const swapped = await model.readBlocks([3, 7]);
  await model.writeBlocks([20, 21], swapped);
  await step(seqPlan([11], 14, [20, 21], bs, 'last'), 2);
  // Token compression: seq 2's tail block keys moved 3 positions back, then a decode there.
  await step(
    { ...seqPlan([13], 13, [3, 12], bs, 'last'), keyShifts: [{ block: 12, delta: -3 }] },
    2,
  );
  const blocks = await model.readBlocks(Array.from({ length: SCENARIO_BLOCKS }, (_, i) => i));
  return { logits, mass: masses, swapped, blocks };
}

function sameBits(a: ArrayBufferView, b: ArrayBufferView, what: string): void {
  const x = Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  const y = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  expect(x.equals(y), `${what}: bytes differ`).toBe(true);
}

/**
 * Compares a sharded run with the unsharded one: bit for bit when `tolerance` is 0 (the shards
 * run the unsharded model's kernels), else logits within `tolerance` (relative). Attention mass
 * is a sum over layers whose grouping changes with the split, so it is compared within 1e-5 of
 * its total (or `tolerance`, when larger).
 */
export function expectSameRun(
  got: ShardScenarioRun,
  want: ShardScenarioRun,
  tolerance: number,
): void {
  expect(got.logits.length).toBe(want.logits.length);
  for (const [i, l] of got.logits.entries()) {
    const w = want.logits[i] as Float32Array;
    if (tolerance === 0) sameBits(l, w, `step ${i} logits`);
    else expect(maxRelDiff(l, w), `step ${i} logits`).toBeLessThan(tolerance);
  }
  for (const [i, m] of got.mass.entries()) {
    const w = want.mass[i] as Float32Array;
    const total = w.reduce((a, b) => a + b, 0);
    expect(total, `step ${i} mass`).toBeGreaterThan(0);
    for (let b = 0; b < m.length; b++) {
      expect(
        Math.abs((m[b] as number) - (w[b] as number)),
        `step ${i} mass of block ${b}`,
      ).toBeLessThan(Math.max(1e-5, tolerance) * total);
    }
  }
  if (tolerance === 0) {
    sameBits(got.swapped, want.swapped, 'swapped-out blocks');
    sameBits(got.blocks, want.blocks, 'every block at the end');
  }
}
