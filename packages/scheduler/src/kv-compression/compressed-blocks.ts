// What the scheduler tracks per held block of a compressed sequence, aligned with its block
// table: accumulated attention, the original index of the block's first token, and the key
// shift still to apply. Plain typed arrays, grown geometrically and compacted in place.

/** Per-block state of one sequence under a compression policy. */
export class CompressedBlocks {
  /** Held blocks (the block table's length once synced). */
  numBlocks = 0;
  scores = new Float32Array(8);
  starts = new Int32Array(8);
  /** RoPE key shift per block still to apply (positions 'cache'); 0 for none. */
  shifts = new Int32Array(8);
  /** Attention-mass output buffer handed to the kernels (the plan row's `attentionMass`). */
  mass = new Float32Array(8);
  /** Blocks with a nonzero entry in `shifts`. */
  pendingShifts = 0;

  /** A copy for a forked sequence (same blocks, same history). */
  clone(): CompressedBlocks {
    const c = new CompressedBlocks();
    c.numBlocks = this.numBlocks;
    c.scores = this.scores.slice();
    c.starts = this.starts.slice();
    c.shifts = this.shifts.slice();
    c.mass = new Float32Array(this.mass.length);
    c.pendingShifts = this.pendingShifts;
    return c;
  }

  /** Forgets everything (recompute preemption). */
  reset(): void {
    this.numBlocks = 0;
    this.shifts.fill(0);
    this.pendingShifts = 0;
  }

  /**
   * Adopts the blocks a table grew by: `tableLen` blocks now, the cache's tokens from
   * `cacheStart` on being the sequence's tokens from `start` on.
   */
  sync(tableLen: number, start: number, cacheStart: number, blockSize: number): void {
    if (tableLen > this.scores.length) this.grow(tableLen);
    for (let j = this.numBlocks; j < tableLen; j++) {
      this.scores[j] = 0;
      this.starts[j] = start + j * blockSize - cacheStart;
      this.shifts[j] = 0;
    }
    this.numBlocks = tableLen;
  }

  /** The mass buffer, at least `blocks` long, zeroed where the kernels will write. */
  massBuffer(blocks: number): Float32Array {
    if (this.mass.length < blocks) this.mass = new Float32Array(capacity(blocks));
    this.mass.fill(0, 0, blocks);
    return this.mass;
  }

  /** Adds the kernels' mass for the first `blocks` blocks into the scores. */
  addMass(mass: Float32Array, blocks: number): void {
    const n = Math.min(blocks, this.numBlocks);
    for (let j = 0; j < n; j++) this.scores[j]! += mass[j]!;
  }

  /**
   * Removes the blocks at `sorted` (ascending) and compacts. With `shiftKeys`, every kept block
   * after the first dropped one moves back by the tokens dropped before it (a negative shift,
   * added to any still pending).
   */
  drop(sorted: readonly number[], blockSize: number, shiftKeys: boolean): void {
    let out = 0;
    let j = 0;
    for (let i = 0; i < this.numBlocks; i++) {
      if (i === sorted[j]) {
        j++;
        if (this.shifts[i] !== 0) this.pendingShifts--;
        continue;
      }
      const before = this.shifts[i]!;
      let shift = before;
      if (shiftKeys && j > 0) shift -= j * blockSize;
      if (before === 0 && shift !== 0) this.pendingShifts++;
      this.scores[out] = this.scores[i]!;
      this.starts[out] = this.starts[i]!;
      this.shifts[out] = shift;
      out++;
    }
    this.shifts.fill(0, out, this.numBlocks);
    this.numBlocks = out;
  }

  /** Logical blocks with a pending shift, ascending. */
  shiftedBlocks(): number[] {
    const out: number[] = [];
    for (let i = 0; i < this.numBlocks; i++) if (this.shifts[i] !== 0) out.push(i);
    return out;
  }

  /** Marks every pending shift applied. */
  clearShifts(): void {
    this.shifts.fill(0, 0, this.numBlocks);
    this.pendingShifts = 0;
  }

  private grow(blocks: number): void {
    const n = capacity(blocks);
    const scores = new Float32Array(n);
    scores.set(this.scores.subarray(0, this.numBlocks));
    const starts = new Int32Array(n);
    starts.set(this.starts.subarray(0, this.numBlocks));
    const shifts = new Int32Array(n);
    shifts.set(this.shifts.subarray(0, this.numBlocks));
    this.scores = scores;
    this.starts = starts;
    this.shifts = shifts;
  }
}

function capacity(blocks: number): number {
  let n = 8;
  while (n < blocks) n *= 2;
  return n;
}
