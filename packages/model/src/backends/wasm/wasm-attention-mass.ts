import type { NormalizedPlan } from '../../execution/forward-plan.js';
import type { WasmArena } from './wasm-arena.js';

/** The attention op's mass arguments: buffer, per-row offsets, per-row query counts (0: off). */
export type MassArgs = readonly [mass: number, offsets: number, queries: number];

const OFF: MassArgs = [0, 0, 0];

/**
 * Token-level KV compression's attention mass on the wasm backend: the attention kernel adds each counted query's
 * probabilities per logical block into a slot of its own, one per (counted query, query head) of
 * a row, over every layer (c/attention.c); after the step the slots of a row are added up in a
 * fixed order into its `attentionMass`. So the result does not depend on the thread count, and a
 * step with no row asking costs nothing (the kernel sees a null buffer).
 */
export class AttentionMass {
  readonly #arena: WasmArena;
  readonly #numHeads: number;
  readonly #blockSize: number;
  #floats = 0;
  #ptr = 0;
  #rows = 0;
  #offsets = 0;
  #queries = 0;
  /** Float offset of each row's slots (-1: none), from the last {@link prepare}. */
  #rowOffsets = new Int32Array(0);

  constructor(arena: WasmArena, numHeads: number, blockSize: number) {
    this.#arena = arena;
    this.#numHeads = numHeads;
    this.#blockSize = blockSize;
  }

  /** Lays out and zeroes the slots of `plan`'s asking rows; the attention op's arguments. */
  prepare(plan: NormalizedPlan): MassArgs {
    if (!plan.massOut.some((m) => m !== undefined)) return OFF;
    const n = plan.numSeqs;
    const offsets = new Int32Array(n).fill(-1);
    let total = 0;
    for (let s = 0; s < n; s++) {
      if (plan.massOut[s] === undefined) continue;
      offsets[s] = total;
      total += (plan.massQueries[s] as number) * this.#numHeads * this.#blocks(plan, s);
    }
    // Grow-only, like the other step buffers (the arena never frees).
    if (total > this.#floats) {
      this.#floats = Math.max(total, 2 * this.#floats);
      this.#ptr = this.#arena.alloc(this.#floats * 4, 'attention mass');
    }
    if (n > this.#rows) {
      this.#rows = Math.max(n, 2 * this.#rows);
      this.#offsets = this.#arena.alloc(this.#rows * 4, 'attention mass');
      this.#queries = this.#arena.alloc(this.#rows * 4, 'attention mass');
    }
    this.#arena.f32(this.#ptr, total).fill(0);
    this.#arena.i32(this.#offsets, n).set(offsets);
    this.#arena.u32(this.#queries, n).set(plan.massQueries);
    this.#rowOffsets = offsets;
    return [this.#ptr, this.#offsets, this.#queries];
  }

  /** After the step: each asking row's slots, summed, into its `attentionMass`. */
  collect(plan: NormalizedPlan): void {
    for (let s = 0; s < plan.numSeqs; s++) {
      const out = plan.massOut[s];
      const off = this.#rowOffsets[s] as number;
      if (out === undefined || off < 0) continue;
      const blocks = this.#blocks(plan, s);
      const slots = (plan.massQueries[s] as number) * this.#numHeads;
      const m = this.#arena.f32(this.#ptr + off * 4, slots * blocks);
      for (let b = 0; b < blocks; b++) {
        let sum = 0;
        for (let k = 0; k < slots; k++) sum += m[k * blocks + b] as number;
        out[b] = sum;
      }
    }
    this.#rowOffsets = new Int32Array(0);
  }

  #blocks(plan: NormalizedPlan, s: number): number {
    return Math.ceil((plan.contextLens[s] as number) / this.#blockSize);
  }
}
