import { ModelError } from '../errors.js';
import type { ForwardKvGroup, NormalizedKvGroup } from './kv-groups.js';

/** One row of a {@link ForwardPlan}: a sequence's prefill chunk or decode token. */
export interface ForwardRow {
  /** Index of the sequence's first token in the plan's flattened arrays. */
  readonly queryStart: number;
  /** Tokens of this sequence computed in this step (1 for a decode). */
  readonly queryLen: number;
  /** Tokens in the cache after this step (earlier tokens + this step's). */
  readonly contextLen: number;
  /** Physical block ids in logical order (at least `ceil(contextLen / blockSize)`). */
  readonly blockTable: ArrayLike<number>;
  /**
   * Output, optional. When present, the step fills entries [0, ceil(contextLen / blockSize)) with
   * the attention mass of each LOGICAL block of this row's block table: the sum, over all layers,
   * all query heads and the row's last `massQueries` query tokens, of the softmax probabilities
   * those queries give the keys in that block (so with massQueries = q the entries sum to
   * layers * numHeads * q, up to rounding). Overwritten each step, not accumulated.
   * Length must be >= ceil(contextLen / blockSize) (INVALID_PLAN otherwise).
   */
  readonly attentionMass?: Float32Array;
  /** How many of the row's last query tokens count in `attentionMass` (1..queryLen; default queryLen). */
  readonly massQueries?: number;
}

/** RoPE re-rotation of one physical block's keys, on every layer, before the step. */
export interface ForwardKeyShift {
  /** Physical block id. */
  readonly block: number;
  /** Positions the block's keys move by: a nonzero integer, `|delta| < maxPosition`. */
  readonly delta: number;
}

/** A block copy (copy-on-write) performed on every layer before the step. */
export interface ForwardBlockCopy {
  readonly src: number;
  readonly dst: number;
}

/**
 * One forward step over a batch of prefill chunks and decodes. `@kvasir/scheduler`'s
 * `BatchPlan` satisfies it as it is (same field names).
 */
export interface ForwardPlan {
  readonly tokenIds: Int32Array;
  readonly positions: Int32Array;
  /** Cache slot of each token (`block * blockSize + offset`), -1 to skip the write. */
  readonly slotMapping: Int32Array;
  /** The rows, in the order of their tokens. */
  readonly rows: readonly ForwardRow[];
  /** Token rows whose logits are returned, in this order (repeats allowed). */
  readonly logitsIndices: Int32Array;
  /** Block copies run on every layer before the step (none when absent). */
  readonly copies?: readonly ForwardBlockCopy[];
  /**
   * Applied after `copies`, before the layers: every layer's K of each listed physical block
   * (all KV heads, all blockSize slots) is rotated by RoPE as if its position moved by `delta`
   * (k' = R(delta) k, the model's own RoPE: theta, scaling, neox/interleaved style), and stored
   * back in the cache's KV format (decode -> rotate in f32 -> encode for quantized formats).
   * V is untouched. A block may appear at most once.
   */
  readonly keyShifts?: readonly ForwardKeyShift[];
  /**
   * With KV cache groups (`LoadModelOptions.kvGroups`): the slots and block tables of groups 1
   * and on (group 0's are `slotMapping` and the rows' `blockTable`). A sliding-window group's
   * table (group 0's too) may hold -1 for blocks wholly before the window of the row's first
   * query: they were released and are never read.
   */
  readonly kvGroups?: readonly ForwardKvGroup[];
}

/** A validated plan in the flat form kernels take. */
export interface NormalizedPlan {
  readonly numTokens: number;
  readonly numSeqs: number;
  readonly tokenIds: Int32Array;
  readonly positions: Int32Array;
  readonly slotMapping: Int32Array;
  readonly queryStarts: Uint32Array;
  readonly queryLens: Uint32Array;
  readonly contextLens: Uint32Array;
  readonly maxBlocksPerSeq: number;
  /** `[numSeqs][maxBlocksPerSeq]`, padded with 0. */
  readonly blockTables: Uint32Array;
  readonly logitsIndices: Int32Array;
  readonly copies: readonly ForwardBlockCopy[];
  /** Per row: how many of its last query tokens count in its attention mass; 0 = no mass. */
  readonly massQueries: Uint32Array;
  /** Per row: where its attention mass goes (`undefined` when `massQueries` is 0). */
  readonly massOut: readonly (Float32Array | undefined)[];
  /** Key shifts to apply after `copies` (empty when the plan has none). */
  readonly keyShifts: readonly ForwardKeyShift[];
  /** Positions the step's RoPE tables must cover: past every position and every key shift's |delta|. */
  readonly ropePositions: number;
  /** With KV cache groups: every group's slots and tables, group 0 first. */
  readonly kvGroups?: readonly NormalizedKvGroup[];
}

/** What a plan is checked against. */
export interface PlanLimits {
  readonly vocabSize: number;
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly maxPosition: number;
  /** With KV cache groups: each group's window (null: full attention), group 0 first. */
  readonly kvWindows?: readonly (number | null)[];
}

function bad(message: string, details?: Record<string, unknown>): never {
  throw new ModelError('INVALID_PLAN', message, details ? { details } : undefined);
}

/**
 * Checks a plan and flattens it.
 * @throws {ModelError} `INVALID_PLAN` naming the first inconsistency.
 */
export function normalizePlan(plan: ForwardPlan, limits: PlanLimits): NormalizedPlan {
  const { tokenIds, positions, slotMapping, logitsIndices } = plan;
  const rows = plan.rows;
  if (!Array.isArray(rows)) bad('plan has no rows');
  const t = tokenIds.length;
  if (t === 0) bad('plan has no tokens');
  if (positions.length !== t || slotMapping.length !== t) {
    bad(
      `tokenIds (${t}), positions (${positions.length}) and slotMapping (${slotMapping.length}) differ in length`,
    );
  }
  const maxSlot = limits.numBlocks * limits.blockSize;
  for (let i = 0; i < t; i++) {
    const id = tokenIds[i] as number;
    if (!(id >= 0 && id < limits.vocabSize))
      bad(`token ${i} has id ${id} outside the vocabulary`, { index: i });
    const p = positions[i] as number;
    if (!(p >= 0 && p < limits.maxPosition))
      bad(`token ${i} has position ${p} outside [0, ${limits.maxPosition})`);
    const s = slotMapping[i] as number;
    if (s !== -1 && !(s >= 0 && s < maxSlot))
      bad(`token ${i} has slot ${s} outside the cache (${maxSlot} slots)`);
  }
  const n = rows.length;
  const queryStarts = new Uint32Array(n);
  const queryLens = new Uint32Array(n);
  const contextLens = new Uint32Array(n);
  const massQueries = new Uint32Array(n);
  const massOut: (Float32Array | undefined)[] = new Array(n).fill(undefined);
  let maxBlocks = 1;
  for (let s = 0; s < n; s++) {
    const q = rows[s] as ForwardRow;
    if (!(q.queryLen >= 1 && q.queryStart >= 0 && q.queryStart + q.queryLen <= t)) {
      bad(
        `row ${s}: query [${q.queryStart}, ${q.queryStart + q.queryLen}) outside the ${t} tokens`,
      );
    }
    if (!(q.contextLen >= q.queryLen))
      bad(`row ${s}: contextLen ${q.contextLen} < queryLen ${q.queryLen}`);
    const need = Math.ceil(q.contextLen / limits.blockSize);
    if (q.blockTable.length < need)
      bad(`row ${s}: block table has ${q.blockTable.length} blocks, needs ${need}`);
    // With KV groups, normalizeKvGroups checks every group's tables (holes included).
    for (let b = 0; b < need && !limits.kvWindows; b++) {
      const id = q.blockTable[b] as number;
      if (!(id >= 0 && id < limits.numBlocks)) bad(`row ${s}: block ${id} outside the cache`);
    }
    if (q.attentionMass !== undefined) {
      if (!(q.attentionMass instanceof Float32Array))
        bad(`row ${s}: attentionMass is not a Float32Array`);
      if (q.attentionMass.length < need) {
        bad(`row ${s}: attentionMass has ${q.attentionMass.length} entries, needs ${need}`);
      }
      const m = q.massQueries ?? q.queryLen;
      if (!(Number.isInteger(m) && m >= 1 && m <= q.queryLen)) {
        bad(`row ${s}: massQueries ${m} outside [1, ${q.queryLen}]`);
      }
      massQueries[s] = m;
      massOut[s] = q.attentionMass;
    } else if (q.massQueries !== undefined) {
      // A count without an output is a caller mistake worth naming: the mass would go nowhere.
      bad(`row ${s}: massQueries without attentionMass`);
    }
    queryStarts[s] = q.queryStart;
    queryLens[s] = q.queryLen;
    contextLens[s] = q.contextLen;
    maxBlocks = Math.max(maxBlocks, need);
  }
  const kvGroups = limits.kvWindows
    ? normalizeKvGroups(plan, limits.kvWindows, limits, maxBlocks)
    : undefined;
  const blockTables = kvGroups?.[0]?.blockTables ?? new Uint32Array(n * maxBlocks);
  for (let s = 0; s < n && !kvGroups; s++) {
    const bt = (rows[s] as ForwardRow).blockTable;
    const need = Math.ceil((contextLens[s] as number) / limits.blockSize);
    for (let b = 0; b < need; b++) blockTables[s * maxBlocks + b] = bt[b] as number;
  }
  for (let i = 0; i < logitsIndices.length; i++) {
    const r = logitsIndices[i] as number;
    if (!(r >= 0 && r < t)) bad(`logitsIndices[${i}] = ${r} outside the ${t} tokens`);
  }
  const copies = plan.copies ?? [];
  for (const c of copies) {
    if (!(c.src >= 0 && c.src < limits.numBlocks && c.dst >= 0 && c.dst < limits.numBlocks)) {
      bad(`block copy ${c.src} -> ${c.dst} outside the cache`);
    }
  }
  const keyShifts = plan.keyShifts ?? [];
  if (keyShifts.length > 0) {
    const seen = new Set<number>();
    for (const k of keyShifts) {
      if (!(Number.isInteger(k.block) && k.block >= 0 && k.block < limits.numBlocks))
        bad(`key shift of block ${k.block} outside the cache`);
      if (!(Number.isInteger(k.delta) && k.delta !== 0 && Math.abs(k.delta) < limits.maxPosition)) {
        bad(
          `key shift of block ${k.block}: delta ${k.delta} is not a nonzero integer with |delta| < ${limits.maxPosition}`,
        );
      }
      if (seen.has(k.block)) bad(`key shift of block ${k.block} listed twice`);
      seen.add(k.block);
    }
  }
  let maxRotation = 0;
  for (const p of positions) maxRotation = Math.max(maxRotation, p);
  for (const k of keyShifts) maxRotation = Math.max(maxRotation, Math.abs(k.delta));
  return {
    numTokens: t,
    numSeqs: n,
    tokenIds,
    positions,
    slotMapping,
    queryStarts,
    queryLens,
    contextLens,
    maxBlocksPerSeq: maxBlocks,
    blockTables,
    logitsIndices,
    copies,
    massQueries,
    massOut,
    keyShifts,
    ropePositions: maxRotation + 1,
    ...(kvGroups ? { kvGroups } : {}),
  };
}

/**
 * The groups after the first of `plan`, checked and flattened like the first (`maxBlocks`
 * blocks per row). A hole is accepted only before the window of the row's first query.
 * @throws {ModelError} `INVALID_PLAN` naming the first inconsistency.
 */
export function normalizeKvGroups(
  plan: ForwardPlan,
  windows: readonly (number | null)[],
  limits: { readonly numBlocks: number; readonly blockSize: number },
  maxBlocks: number,
): NormalizedKvGroup[] {
  const badPlan = (m: string): never => {
    throw new ModelError('INVALID_PLAN', m);
  };
  const extra = plan.kvGroups ?? [];
  if (extra.length !== windows.length - 1) {
    badPlan(`plan has ${extra.length + 1} KV groups, the cache ${windows.length}`);
  }
  const bs = limits.blockSize;
  const maxSlot = limits.numBlocks * bs;
  const own: ForwardKvGroup = {
    slotMapping: plan.slotMapping,
    blockTables: plan.rows.map((r) => r.blockTable),
  };
  return [own, ...extra].map((g, gi) => {
    if (
      g.slotMapping.length !== plan.tokenIds.length ||
      g.blockTables.length !== plan.rows.length
    ) {
      badPlan(`KV group ${gi}: slotMapping or blockTables do not match the plan's tokens and rows`);
    }
    for (const s of g.slotMapping) {
      if (s !== -1 && !(s >= 0 && s < maxSlot))
        badPlan(`KV group ${gi}: slot ${s} outside the cache`);
    }
    const w = windows[gi] as number | null;
    const tables = new Uint32Array(plan.rows.length * maxBlocks);
    plan.rows.forEach((row, r) => {
      const need = Math.ceil(row.contextLen / bs);
      const first = row.contextLen - row.queryLen;
      const holes = w === null ? 0 : Math.max(0, Math.floor((first + 1 - w) / bs));
      const bt = g.blockTables[r] as ArrayLike<number>;
      if (bt.length < need)
        badPlan(`KV group ${gi} row ${r}: block table has ${bt.length} blocks, needs ${need}`);
      for (let b = 0; b < need; b++) {
        const id = bt[b] as number;
        // -1 as a Uint32Array stores it (the scheduler's flat tables) is a hole too.
        if ((id === -1 || id === 0xffffffff) && b < holes) {
          tables[r * maxBlocks + b] = 0xffffffff;
          continue;
        }
        if (!(Number.isInteger(id) && id >= 0 && id < limits.numBlocks)) {
          badPlan(
            `KV group ${gi} row ${r}: block ${id} at ${b} is outside the cache${id === -1 ? ' (a hole inside the window)' : ''}`,
          );
        }
        tables[r * maxBlocks + b] = id;
      }
    });
    return { slotMapping: g.slotMapping, blockTables: tables };
  });
}

/** `plan` as layer group `g` sees it: the group's slots and block tables. */
export function planForGroup(plan: NormalizedPlan, g: number): NormalizedPlan {
  const group = plan.kvGroups?.[g];
  if (group === undefined || g === 0) return plan;
  // The rows' attention mass is per logical block, the same in every group.
  return { ...plan, slotMapping: group.slotMapping, blockTables: group.blockTables };
}
