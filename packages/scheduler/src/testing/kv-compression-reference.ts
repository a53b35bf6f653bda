// Independent references of the built-in compression policies, for tests: which cached blocks
// each keeps, written as plainly as possible (brute-force ranking, no shared code with
// `kv-compression/builtins.ts`), and a whole generation under a policy with the fake model.
import type { KvCompressionView } from '../kv-compression/policy.js';
import { FakeExecutor } from './fake-executor.js';

/** A built-in by name with its parameters in tokens (h2o's `recent` a share). */
export type ReferencePolicy =
  | { name: 'window'; window: number }
  | { name: 'sinks'; sinks: number; window: number }
  | { name: 'h2o'; budget: number; recent?: number }
  | { name: 'snapkv'; budget: number; observation?: number };

/** Whether `i` ranks in the top `k` of `candidates` by score (ties: the later block wins). */
function inTop(i: number, candidates: number[], scores: ArrayLike<number>, k: number): boolean {
  let better = 0;
  for (const j of candidates) {
    if (scores[j]! > scores[i]! || (scores[j] === scores[i] && j > i)) better++;
  }
  return better < k;
}

/** The logical blocks `policy` keeps of `v` (the last block always). */
export function referenceKept(policy: ReferencePolicy, v: KvCompressionView): Set<number> {
  const bs = v.blockSize;
  const n = v.numBlocks;
  const blocks = (t: number) => Math.ceil(t / bs);
  const kept = new Set<number>();
  for (let i = 0; i < n; i++) {
    const fromEnd = n - 1 - i; // 0 for the last block
    if (policy.name === 'window') {
      if (fromEnd < blocks(policy.window)) kept.add(i);
    } else if (policy.name === 'sinks') {
      // A sink block is one of the sequence's first tokens (never dropped, so still first).
      if (v.blockStarts[i]! < blocks(policy.sinks) * bs || fromEnd < blocks(policy.window)) {
        kept.add(i);
      }
    } else if (policy.name === 'h2o') {
      const total = blocks(policy.budget);
      const recent = Math.min(total, Math.max(1, Math.round((policy.recent ?? 0.5) * total)));
      if (n <= total || fromEnd < recent) kept.add(i);
      else {
        const older = [...Array(n - recent).keys()];
        if (inTop(i, older, v.blockScores, total - recent)) kept.add(i);
      }
    } else {
      const total = blocks(policy.budget);
      if (!v.prefillDone || n <= total) {
        kept.add(i);
        continue;
      }
      const w = Math.min(policy.observation ?? 16, v.promptTokens);
      // Prompt blocks wholly before the observation window compete on score; the window's
      // blocks and the generated ones form a window over the tail.
      const isOlder = (j: number) => j < n - 1 && v.blockStarts[j]! + bs <= v.promptTokens - w;
      const older = [...Array(n).keys()].filter(isOlder);
      const firstWindowBlock = Math.floor((v.promptTokens - w) / bs);
      const lastWindowBlock = Math.floor((v.promptTokens - 1) / bs);
      const slots = Math.max(0, total - (lastWindowBlock - firstWindowBlock + 1));
      const keptOlder = Math.min(older.length, slots);
      if (isOlder(i)) {
        if (inTop(i, older, v.blockScores, slots)) kept.add(i);
      } else {
        const newer = [...Array(n).keys()].filter((j) => !isOlder(j));
        if (newer.indexOf(i) >= newer.length - (total - keptOlder)) kept.add(i);
      }
    }
  }
  return kept;
}

/** Attention a policy asks of the fake model: 'none', every step, or the prompt's end. */
const attentionOf = (p: ReferencePolicy) =>
  p.name === 'h2o' ? 'decode' : p.name === 'snapkv' ? 'prefill-end' : 'none';

/**
 * What a request generates under `policy` with the fake model when its prompt is computed in
 * one step: each step writes a token, the model samples from exactly the tokens kept so far
 * (scoring blocks with `FakeExecutor.blockWeight`), then the policy drops blocks. Also returns
 * the most blocks held after any step and the tokens kept at the end.
 */
export function referenceCompressedGeneration(
  policy: ReferencePolicy,
  opts: {
    seed: number;
    vocab: number;
    blockSize: number;
    prompt: readonly number[];
    maxTokens: number;
  },
): { output: number[]; maxHeld: number; keptTokens: number[] } {
  const bs = opts.blockSize;
  const P = opts.prompt.length;
  const cache: { start: number; tokens: number[]; score: number }[] = [];
  let total = 0;
  let maxHeld = 0;
  const write = (tok: number) => {
    const last = cache[cache.length - 1];
    if (!last || last.tokens.length === bs) cache.push({ start: total, tokens: [tok], score: 0 });
    else last.tokens.push(tok);
    total++;
  };
  const output: number[] = [];
  let pending = [...opts.prompt];
  const attention = attentionOf(policy);
  while (output.length < opts.maxTokens) {
    for (const t of pending) write(t);
    let q = 0;
    if (attention === 'decode') q = pending.length;
    else if (attention === 'prefill-end' && total === P) {
      q = Math.min(policy.name === 'snapkv' ? (policy.observation ?? 16) : 16, pending.length);
    }
    for (const b of cache) b.score += q * FakeExecutor.blockWeight(b.tokens);
    const ctx = cache.flatMap((b) => b.tokens);
    const tok = FakeExecutor.nextToken(opts.seed, 0, ctx, opts.vocab);
    output.push(tok);
    pending = [tok];
    const view: KvCompressionView = {
      blockSize: bs,
      numBlocks: cache.length,
      numTokens: ctx.length,
      totalTokens: total,
      promptTokens: P,
      prefillDone: total >= P,
      blockScores: Float32Array.from(cache.map((b) => b.score)),
      blockStarts: Int32Array.from(cache.map((b) => b.start)),
    };
    const kept = referenceKept(policy, view);
    const next = cache.filter((_, i) => kept.has(i));
    cache.length = 0;
    cache.push(...next);
    maxHeld = Math.max(maxHeld, cache.length);
  }
  return { output, maxHeld, keptTokens: cache.flatMap((b) => b.tokens) };
}
