// A deterministic stand-in for the model, used by tests and examples: it really moves "KV"
// (token ids) between a fake GPU block store and a fake host store as the plan says, and its
// next token is a hash of the context it reads back through the block table, so a wrong swap,
// copy, slot or prefix hit changes the output.
import type { BatchPlan, StepResult } from '../types';

export class FakeExecutor {
  readonly gpu = new Map<number, Int32Array>();
  readonly host = new Map<number, Int32Array>();
  constructor(
    readonly blockSize: number,
    readonly seed: number,
    readonly vocab: number,
  ) {}

  private block(map: Map<number, Int32Array>, id: number): Int32Array {
    let b = map.get(id);
    if (!b) {
      b = new Int32Array(this.blockSize).fill(-1);
      map.set(id, b);
    }
    return b;
  }

  /** Next token of a context: a hash of (seed, sample index, every context token). */
  static nextToken(seed: number, index: number, ctx: ArrayLike<number>, vocab: number): number {
    let h = (seed ^ 0x9e3779b9) >>> 0;
    h = Math.imul(h ^ index, 0x01000193);
    for (let i = 0; i < ctx.length; i++) h = Math.imul(h ^ (ctx[i]! + 7), 0x01000193);
    h ^= h >>> 15;
    h = Math.imul(h, 0x2c1b3c6d);
    h ^= h >>> 12;
    return (h >>> 0) % vocab;
  }

  run(plan: BatchPlan): StepResult & { logprobs: Float64Array } {
    const bs = this.blockSize;
    for (const t of plan.swapOut)
      this.host.set(t.hostSlot, this.block(this.gpu, t.gpuBlock).slice());
    for (const t of plan.swapIn) {
      const h = this.host.get(t.hostSlot);
      if (!h) throw new Error(`swap-in from empty host slot ${t.hostSlot}`);
      this.gpu.set(t.gpuBlock, h.slice());
    }
    for (const c of plan.copies) this.gpu.set(c.dst, this.block(this.gpu, c.src).slice());
    for (let i = 0; i < plan.numTokens; i++) {
      const slot = plan.slotMapping[i]!;
      this.block(this.gpu, Math.floor(slot / bs))[slot % bs] = plan.tokenIds[i]!;
    }
    const n = plan.logitsIndices.length;
    const tokenIds = new Int32Array(n);
    const logprobs = new Float64Array(n);
    // Two candidates per sample, for beam-search requests: the sampled token and a runner-up.
    const candTokens = new Int32Array(2 * n);
    const candLogprobs = new Float64Array(2 * n);
    for (let k = 0; k < n; k++) {
      const row = plan.rows[plan.sampleRows[k]!]!;
      const ctxLen = plan.positions[plan.logitsIndices[k]!]! + 1;
      const ctx = new Int32Array(ctxLen);
      for (let i = 0; i < ctxLen; i++) {
        const b = row.blockTable[Math.floor(i / bs)];
        ctx[i] = b === undefined ? -2 : this.block(this.gpu, b)[i % bs]!;
      }
      tokenIds[k] = FakeExecutor.nextToken(this.seed, plan.sampleIndices[k]!, ctx, this.vocab);
      logprobs[k] = -1 - (tokenIds[k]! % 3);
      candTokens[2 * k] = tokenIds[k]!;
      candTokens[2 * k + 1] = (tokenIds[k]! * 7 + 3) % this.vocab;
      candLogprobs[2 * k] = logprobs[k]!;
      candLogprobs[2 * k + 1] = logprobs[k]! - 0.5 - (ctxLen % 2);
    }
    return {
      seqIds: plan.sampleSeqIds,
      tokenIds,
      logprobs,
      beamCandidates: { k: 2, tokenIds: candTokens, logprobs: candLogprobs },
    };
  }
}

/** What a request should produce with an unlimited cache: the reference for equivalence. */
export function referenceOutput(
  seed: number,
  vocab: number,
  prompt: ArrayLike<number>,
  index: number,
  maxTokens: number,
  stop: (tok: number) => boolean,
  maxModelLen: number,
): number[] {
  const ctx = Array.from(prompt);
  const out: number[] = [];
  for (;;) {
    const tok = FakeExecutor.nextToken(seed, index, ctx, vocab);
    ctx.push(tok);
    out.push(tok);
    if (stop(tok) || out.length >= maxTokens || ctx.length >= maxModelLen) return out;
  }
}
