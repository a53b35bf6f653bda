// The step's rows flattened into the arrays a forward pass takes (vLLM's SchedulerOutput plus
// its input batch): tokens, positions, slots, block tables and which rows are sampled.
import type { KvCacheManager } from '@kvasir/kv-allocator';
import type { StepState } from './batch-planner.js';
import type { BatchKvGroup, BatchPlan, PlanRow } from './types.js';

/** Assembles the `BatchPlan` of a planned step, in the order its rows were planned. */
export function buildBatchPlan(
  st: StepState,
  kvCache: KvCacheManager,
  tokenBudget: number,
): BatchPlan {
  const blockSize = kvCache.blockSize;
  const entries = st.entries;
  const numRows = entries.length;
  let numTokens = 0;
  let numSamples = 0;
  let maxBlocks = 0;
  let numPrefillTokens = 0;
  for (const e of entries) {
    numTokens += e.len;
    if (e.samples) numSamples += e.samples.length;
    const nb = Math.ceil((e.cacheStart + e.len) / blockSize);
    if (nb > maxBlocks) maxBlocks = nb;
  }
  const tokenIds = new Int32Array(numTokens);
  const positions = new Int32Array(numTokens);
  const slotMapping = new Int32Array(numTokens);
  const queryStartLoc = new Int32Array(numRows + 1);
  const contextLens = new Int32Array(numRows);
  const blockTables = new Uint32Array(numRows * maxBlocks);
  const logitsIndices = new Int32Array(numSamples);
  const sampleSeqIds = new Int32Array(numSamples);
  const sampleRows = new Int32Array(numSamples);
  const sampleIndices = new Int32Array(numSamples);
  const rows: PlanRow[] = [];
  let t = 0;
  let k = 0;
  for (let r = 0; r < numRows; r++) {
    const e = entries[r]!;
    const s = e.seq;
    queryStartLoc[r] = t;
    tokenIds.set(s.tokens.subarray(e.start, e.start + e.len), t);
    slotMapping.set(e.slots, t);
    // Positions 'cache' (and every uncompressed row): a token's place in the cache.
    const first = s.group.req.kvCompression?.positions === 'original' ? e.start : e.cacheStart;
    for (let i = 0; i < e.len; i++) positions[t + i] = first + i;
    const ctxLen = e.cacheStart + e.len;
    contextLens[r] = ctxLen;
    const table = kvCache.blockTable(s.id);
    const base = r * maxBlocks;
    for (let i = 0; i < table.length; i++) blockTables[base + i] = table[i]!;
    const isPrefill = e.len > 1 || e.start < s.group.numPromptTokens;
    if (isPrefill) numPrefillTokens += e.len;
    rows.push({
      seqId: s.id,
      requestId: s.group.req.id,
      index: s.index,
      queryStart: t,
      queryLen: e.len,
      contextLen: ctxLen,
      isPrefill,
      blockTable: blockTables.subarray(base, base + table.length),
      ...(e.mass ? { attentionMass: e.mass, massQueries: e.massQueries } : {}),
    });
    t += e.len;
    if (e.samples) {
      for (const x of e.samples) {
        logitsIndices[k] = t - 1;
        sampleSeqIds[k] = x.id;
        sampleRows[k] = r;
        sampleIndices[k] = x.index;
        k++;
      }
    }
  }
  queryStartLoc[numRows] = t;
  const kvGroups = groupsOf(entries, kvCache, numTokens);
  return {
    step: st.step,
    numTokens,
    numPrefillTokens,
    numDecodeTokens: numTokens - numPrefillTokens,
    tokenIds,
    positions,
    slotMapping,
    rows,
    queryStartLoc,
    contextLens,
    blockTables,
    maxBlocksPerSeq: maxBlocks,
    logitsIndices,
    sampleSeqIds,
    sampleRows,
    sampleIndices,
    copies: st.copies,
    keyShifts: st.keyShifts,
    swapOut: st.swapOut,
    swapIn: st.swapIn,
    tokenBudget,
    ...(kvGroups ? { kvGroups } : {}),
  };
}

/** The slots and block tables of KV groups 1 and on, rows in order (none with one group). */
function groupsOf(
  entries: StepState['entries'],
  kvCache: KvCacheManager,
  numTokens: number,
): BatchKvGroup[] | undefined {
  if (kvCache.numGroups <= 1) return undefined;
  const out: BatchKvGroup[] = [];
  for (let g = 1; g < kvCache.numGroups; g++) {
    const slotMapping = new Int32Array(numTokens);
    let t = 0;
    const blockTables = entries.map((e) => {
      slotMapping.set(e.groupSlots[g] as Int32Array, t);
      t += e.len;
      return Int32Array.from(kvCache.blockTables(e.seq.id)[g] as readonly number[]);
    });
    out.push({ slotMapping, blockTables });
  }
  return out;
}
