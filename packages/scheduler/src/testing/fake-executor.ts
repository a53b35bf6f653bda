// A deterministic stand-in for the model, used by tests and examples: it really moves "KV"
// (token ids) between a fake GPU block store and a fake host store as the plan says, and its
// next token is a hash of the context it reads back through the block table, so a wrong swap,
// copy, slot or prefix hit changes the output. Each slot also keeps its key's RoPE position
// (the token's plan position, moved by key shifts), and rows asking for attention mass get a
// deterministic mass per block computed from the block's tokens (`FakeExecutor.blockWeight`).
import type { BatchPlan, StepResult } from '../types.js';

export class FakeExecutor {
  readonly gpu = new Map<number, Int32Array>();
  readonly host = new Map<number, Int32Array>();
  /** Key position per slot, by physical block (the host copies in `hostPos`). */
  readonly keyPos = new Map<number, Int32Array>();
  readonly hostPos = new Map<number, Int32Array>();
  /** Every key shift run so far, in order. */
  readonly shifts: { block: number; delta: number; step: number }[] = [];
  /**
   * Rows (by request id) whose i-th context token must have key position i, else `run` throws:
   * positions 'cache', where kept keys move back exactly as far as tokens before them dropped.
   */
  checkCachePositions: (requestId: string) => boolean = () => false;
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

  /** Attention weight the fake model gives a block: from its tokens, 1..5. */
  static blockWeight(tokens: ArrayLike<number>): number {
    let sum = 0;
    for (let i = 0; i < tokens.length; i++) sum += tokens[i]!;
    return 1 + (sum % 5);
  }

  run(plan: BatchPlan): StepResult & { logprobs: Float64Array } {
    const bs = this.blockSize;
    for (const t of plan.swapOut) {
      this.host.set(t.hostSlot, this.block(this.gpu, t.gpuBlock).slice());
      this.hostPos.set(t.hostSlot, this.block(this.keyPos, t.gpuBlock).slice());
    }
    for (const t of plan.swapIn) {
      const h = this.host.get(t.hostSlot);
      if (!h) throw new Error(`swap-in from empty host slot ${t.hostSlot}`);
      this.gpu.set(t.gpuBlock, h.slice());
      this.keyPos.set(t.gpuBlock, this.block(this.hostPos, t.hostSlot).slice());
    }
    for (const c of plan.copies) {
      this.gpu.set(c.dst, this.block(this.gpu, c.src).slice());
      this.keyPos.set(c.dst, this.block(this.keyPos, c.src).slice());
    }
    const shifted = new Set<number>();
    for (const k of plan.keyShifts) {
      if (shifted.has(k.block)) throw new Error(`block ${k.block} shifted twice in one plan`);
      if (!Number.isInteger(k.delta) || k.delta === 0) throw new Error(`bad delta ${k.delta}`);
      shifted.add(k.block);
      const pos = this.block(this.keyPos, k.block);
      for (let i = 0; i < bs; i++) pos[i]! += k.delta;
      this.shifts.push({ ...k, step: plan.step });
    }
    for (let i = 0; i < plan.numTokens; i++) {
      const slot = plan.slotMapping[i]!;
      this.block(this.gpu, Math.floor(slot / bs))[slot % bs] = plan.tokenIds[i]!;
      this.block(this.keyPos, Math.floor(slot / bs))[slot % bs] = plan.positions[i]!;
    }
    for (const row of plan.rows) this.checkRow(plan, row);
    const n = plan.logitsIndices.length;
    const tokenIds = new Int32Array(n);
    const logprobs = new Float64Array(n);
    // Two candidates per sample, for beam-search requests: the sampled token and a runner-up.
    const candTokens = new Int32Array(2 * n);
    const candLogprobs = new Float64Array(2 * n);
    for (let k = 0; k < n; k++) {
      const row = plan.rows[plan.sampleRows[k]!]!;
      const ctxLen = row.contextLen;
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

  /** Checks a row's key positions and fills its attention mass. */
  private checkRow(plan: BatchPlan, row: BatchPlan['rows'][number]): void {
    const bs = this.blockSize;
    const nb = Math.ceil(row.contextLen / bs);
    if (row.blockTable.length < nb) throw new Error(`row ${row.requestId}: block table too short`);
    if (this.checkCachePositions(row.requestId)) {
      for (let i = 0; i < row.contextLen; i++) {
        const p = this.block(this.keyPos, row.blockTable[Math.floor(i / bs)]!)[i % bs]!;
        if (p !== i) {
          throw new Error(
            `step ${plan.step}, request ${row.requestId}: cached token ${i} has key position ${p}`,
          );
        }
      }
    }
    const mass = row.attentionMass;
    if (!mass) return;
    const q = row.massQueries ?? row.queryLen;
    if (!(q >= 1 && q <= row.queryLen)) throw new Error(`bad massQueries ${q}`);
    if (mass.length < nb) throw new Error('attentionMass too short');
    for (let j = 0; j < nb; j++) {
      const b = this.block(this.gpu, row.blockTable[j]!);
      mass[j] = q * FakeExecutor.blockWeight(b.subarray(0, Math.min(bs, row.contextLen - j * bs)));
    }
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
