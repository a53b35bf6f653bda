import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type CheckpointReader,
  makeModelConfig,
  openCheckpoint,
  writeRandomCheckpoint,
} from '@kvasir/model';
import {
  type KvCompressionPolicy,
  type KvCompressionSpec,
  parseKvCompression,
} from '@kvasir/scheduler';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EngineConfig, parseEngineConfig } from '../config.js';
import { loadModelRunner } from '../engine/load-model-runner.js';
import { streamingEval } from './streaming-eval.js';

// The engine's compressed sequence (scheduler + allocator + policy + the CPU backend's key
// shifts and attention mass) against an independent reference of the same policy: a float64
// transformer that keeps its KV as a plain list of tokens with UNROTATED keys, drops whole
// blocks of that list where the policy says, and rotates every key at attention time by its
// position (its place in the list, or its original index). Nothing is shared with the engine's
// kernels; the policy object decides which blocks go in both.

const BS = 8;
const CONTEXT = 64;
const MODEL = makeModelConfig({
  architecture: 'llama',
  hiddenSize: 64,
  intermediateSize: 128,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 320,
  maxPositionEmbeddings: CONTEXT,
  tieWordEmbeddings: false,
});

let dir: string;
let reader: CheckpointReader;
let config: EngineConfig;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-stream-eval-'));
  await writeRandomCheckpoint(join(dir, 'm'), MODEL, 21);
  reader = await openCheckpoint(join(dir, 'm'));
  config = parseEngineConfig({
    model: join(dir, 'm'),
    backend: 'cpu',
    kvDtype: 'f32',
    blockSize: BS,
    maxNumBatchedTokens: 32,
  });
});

afterAll(async () => {
  await reader.close();
  await rm(dir, { recursive: true, force: true });
});

interface Cached {
  readonly index: number;
  /** Per layer: unrotated K and V, `[kvHeads * headDim]`. */
  readonly k: Float64Array[];
  readonly v: Float64Array[];
}

/**
 * The reference: feeds `ids` one step at a time (the prompt's `promptLen` tokens as one step,
 * then one token per step, as `streamingEval` does with a prompt no longer than a chunk),
 * calling the policy after every step, and returns the logits of every position.
 */
async function referenceRun(
  ids: readonly number[],
  promptLen: number,
  spec: KvCompressionSpec | undefined,
): Promise<Float32Array[]> {
  const c = reader.config;
  const d = c.headDim;
  const hs = c.hiddenSize;
  const qd = c.numHeads * d;
  const kd = c.numKvHeads * d;
  const w = new Map<string, Float32Array>();
  for (const name of reader.tensors.keys()) w.set(name, await reader.readTensorF32(name));
  const get = (n: string) => w.get(n)!;
  const linear = (x: Float64Array, m: Float32Array, out: number) => {
    const inn = x.length;
    const y = new Float64Array(out);
    for (let o = 0; o < out; o++) {
      let s = 0;
      for (let i = 0; i < inn; i++) s += x[i]! * m[o * inn + i]!;
      y[o] = s;
    }
    return y;
  };
  const norm = (x: Float64Array, g: Float32Array) => {
    let ss = 0;
    for (const e of x) ss += e * e;
    const inv = 1 / Math.sqrt(ss / x.length + c.rmsNormEps);
    return x.map((e, i) => e * inv * g[i]!);
  };
  const rotate = (x: Float64Array, heads: number, pos: number) => {
    const y = Float64Array.from(x);
    for (let h = 0; h < heads; h++)
      for (let i = 0; i < d / 2; i++) {
        const a = pos * c.ropeTheta ** (-(2 * i) / d);
        const x0 = x[h * d + i]!;
        const x1 = x[h * d + i + d / 2]!;
        y[h * d + i] = x0 * Math.cos(a) - x1 * Math.sin(a);
        y[h * d + i + d / 2] = x1 * Math.cos(a) + x0 * Math.sin(a);
      }
    return y;
  };
  const cache: Cached[] = [];
  let scores: number[] = []; // per cached token: attention mass since it entered
  const policy: KvCompressionPolicy | undefined = spec?.policy;
  const posOf = (place: number, index: number) => (spec?.positions === 'original' ? index : place);
  const logits: Float32Array[] = [];
  // One token through every layer; its K/V join the cache before it attends (causal).
  const step = (token: number, index: number, countMass: boolean) => {
    let x = Float64Array.from(
      { length: hs },
      (_, i) => get('model.embed_tokens.weight')[token * hs + i]!,
    );
    const entry: Cached = { index, k: [], v: [] };
    cache.push(entry);
    scores.push(0);
    const place = cache.length - 1;
    for (let l = 0; l < c.numLayers; l++) {
      const p = `model.layers.${l}.`;
      const xn = norm(x, get(`${p}input_layernorm.weight`));
      const q = rotate(
        linear(xn, get(`${p}self_attn.q_proj.weight`), qd),
        c.numHeads,
        posOf(place, index),
      );
      entry.k.push(linear(xn, get(`${p}self_attn.k_proj.weight`), kd));
      entry.v.push(linear(xn, get(`${p}self_attn.v_proj.weight`), kd));
      const keys = cache.map((t, j) => rotate(t.k[l]!, c.numKvHeads, posOf(j, t.index)));
      const att = new Float64Array(qd);
      for (let h = 0; h < c.numHeads; h++) {
        const kh = Math.floor(h / (c.numHeads / c.numKvHeads));
        const s = keys.map((k) => {
          let dot = 0;
          for (let e = 0; e < d; e++) dot += q[h * d + e]! * k[kh * d + e]!;
          return dot / Math.sqrt(d);
        });
        const mx = Math.max(...s);
        const ex = s.map((e) => Math.exp(e - mx));
        const sum = ex.reduce((a, b) => a + b, 0);
        ex.forEach((e, j) => {
          if (countMass) scores[j]! += e / sum;
          for (let i = 0; i < d; i++) att[h * d + i]! += (e / sum) * cache[j]!.v[l]![kh * d + i]!;
        });
      }
      x = x.map((e, i) => e + linear(att, get(`${p}self_attn.o_proj.weight`), hs)[i]!);
      const xn2 = norm(x, get(`${p}post_attention_layernorm.weight`));
      const g = linear(xn2, get(`${p}mlp.gate_proj.weight`), c.intermediateSize);
      const u = linear(xn2, get(`${p}mlp.up_proj.weight`), c.intermediateSize);
      const act = g.map((e, i) => (e / (1 + Math.exp(-e))) * u[i]!);
      const dn = linear(act, get(`${p}mlp.down_proj.weight`), hs);
      x = x.map((e, i) => e + dn[i]!);
    }
    return Float32Array.from(
      linear(norm(x, get('model.norm.weight')), get('lm_head.weight'), c.vocabSize),
    );
  };
  const compress = (total: number, prefillDone: boolean) => {
    if (!policy) return;
    const blocks = Math.ceil(cache.length / BS);
    const blockScores = new Float32Array(blocks);
    scores.forEach((s, j) => {
      blockScores[Math.floor(j / BS)]! += s;
    });
    const drop = policy.select({
      blockSize: BS,
      numBlocks: blocks,
      numTokens: cache.length,
      totalTokens: total,
      promptTokens: promptLen,
      prefillDone,
      blockScores,
      blockStarts: Int32Array.from({ length: blocks }, (_, b) => cache[b * BS]!.index),
    });
    const gone = new Set(drop.flatMap((b) => Array.from({ length: BS }, (_, i) => b * BS + i)));
    const keep = (_: unknown, j: number) => !gone.has(j);
    const kept = cache.filter(keep);
    scores = scores.filter(keep);
    cache.length = 0;
    cache.push(...kept);
  };
  const massAt = (i: number) => {
    if (policy?.attention === 'decode') return true;
    // SnapKV: the prompt's last `observationWindow` queries, once.
    return (
      policy?.attention === 'prefill-end' &&
      i >= promptLen - (policy.observationWindow ?? 16) &&
      i < promptLen
    );
  };
  for (let i = 0; i < ids.length - 1; i++) {
    logits.push(step(ids[i]!, i, massAt(i)));
    if (i >= promptLen - 1) compress(i + 1, true);
  }
  return logits;
}

async function engineRun(
  backend: 'cpu' | 'wasm' | 'webgpu',
  ids: readonly number[],
  promptLen: number,
  spec: KvCompressionSpec,
) {
  const model = await loadModelRunner(join(dir, 'm'), { ...config, backend, swaFull: true });
  const runner = await model.allocate(24);
  try {
    const out: Float32Array[] = [];
    const stats = await streamingEval(
      runner,
      config,
      ids,
      spec,
      { promptTokens: promptLen, chunk: 32 },
      (p, row) => {
        out[p] = Float32Array.from(row);
      },
    );
    return { logits: out, stats };
  } finally {
    await runner.dispose();
  }
}

function maxDiff(a: readonly Float32Array[], b: readonly Float32Array[]): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  a.forEach((row, p) => {
    row.forEach((e, i) => {
      worst = Math.max(worst, Math.abs(e - b[p]![i]!));
    });
  });
  return worst;
}

const ids = Array.from({ length: 150 }, (_, i) => (i * 97 + 13) % 320);

describe.each(['cpu', 'wasm', 'webgpu'] as const)(
  'a compressed sequence on the %s backend against an independent float64 reference of its policy',
  (backend) => {
    for (const [text, promptLen, length] of [
      ['window:window=24', 8, 150],
      ['sinks:sinks=8,window=16', 8, 150],
      ['sinks:sinks=8,window=16,positions=original', 8, 63],
      ['h2o:budget=32', 8, 150],
      ['snapkv:budget=24,observation=8', 40, 150],
    ] as const) {
      // On the (slow) software adapter: the policies that need its key shifts and mass pass.
      if (backend === 'webgpu' && (text.startsWith('window') || text.includes('original')))
        continue;
      it(`${text}: same logits at every position (${length} tokens, context ${CONTEXT})`, async () => {
        const spec = parseKvCompression(text, { blockSize: BS });
        const seq = ids.slice(0, length);
        const engine = await engineRun(backend, seq, promptLen, spec);
        const reference = await referenceRun(seq, promptLen, spec);
        expect(engine.stats.tokensDropped).toBeGreaterThan(0);
        // SnapKV holds its whole prompt until the prompt ends; then the policy's bound holds.
        const bound = Math.max(spec.policy.maxBlocks(BS), Math.ceil(promptLen / BS));
        expect(engine.stats.maxBlocksHeld).toBeLessThanOrEqual(bound + 1);
        expect(maxDiff(engine.logits, reference)).toBeLessThan(2e-3);
        // The comparison can tell a compressed cache from the full one (within the context,
        // where the full cache can run): dropping blocks changes the logits.
        const full = await referenceRun(seq.slice(0, CONTEXT), promptLen, undefined);
        const within = Math.min(seq.length, CONTEXT) - 1;
        expect(maxDiff(full.slice(0, within), reference.slice(0, within))).toBeGreaterThan(1e-2);
      }, 120_000);
    }
  },
);
