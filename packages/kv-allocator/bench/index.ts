// Benchmark of @kvasir/kv-allocator. `pnpm --filter @kvasir/kv-allocator bench --json` prints one
// JSON object. Every figure is a ratio or a count from one deterministic run, except
// decode_step_us (a median of wall-clock samples, reported with its spread).
import { KvCacheManager } from '../src/index.js';
import { type BenchRequest, rng, shareGptLike } from './workload.js';

const BLOCK_SIZE = 16;
const MAX_LEN = 2048;
const json = process.argv.includes('--json');

/** Continuous batching over the requests; samples memory utilization after every step. */
function utilization(requests: BenchRequest[]) {
  const maxRunning = 128;
  const m = new KvCacheManager({
    numBlocks: (maxRunning * MAX_LEN) / BLOCK_SIZE,
    blockSize: BLOCK_SIZE,
  });
  const running: { id: number; left: number; tokens: number }[] = [];
  let next = 0;
  let pagedSum = 0;
  let contiguousSum = 0;
  let samples = 0;
  while (next < requests.length || running.length > 0) {
    while (running.length < maxRunning && next < requests.length) {
      const r = requests[next]!;
      const res = m.allocateSlots(next, r.prompt);
      if (!res.ok) break;
      running.push({ id: next, left: r.outputLen, tokens: r.prompt.length });
      next++;
    }
    for (let i = running.length - 1; i >= 0; i--) {
      const s = running[i]!;
      if (s.left === 0) {
        m.free(s.id);
        running.splice(i, 1);
        continue;
      }
      const res = m.allocateSlots(s.id, [s.left % 32000]);
      if (!res.ok) throw new Error('pool sized for the maximum: cannot run out');
      s.left--;
      s.tokens++;
    }
    if (running.length === 0) continue;
    let tokens = 0;
    for (const s of running) tokens += s.tokens;
    pagedSum += tokens / (m.blocks.numUsed * BLOCK_SIZE);
    // The baseline reserves each request's maximum length contiguously at admission.
    contiguousSum += tokens / (running.length * MAX_LEN);
    samples++;
  }
  return { paged: pagedSum / samples, contiguous: contiguousSum / samples, steps: samples };
}

/** Memory saved by sharing blocks under parallel sampling (n = 4) or beam search (width 4). */
function sharingSaving(requests: BenchRequest[], mode: 'parallel' | 'beam') {
  const width = 4;
  const rand = rng(7);
  let sharedSum = 0;
  let unsharedSum = 0;
  const m = new KvCacheManager({ numBlocks: 65536, blockSize: BLOCK_SIZE });
  let nextId = 0;
  for (const r of requests) {
    const parent = nextId++;
    m.allocateSlots(parent, r.prompt);
    let beams: { id: number; tokens: number }[] = [];
    for (let i = 0; i < width; i++) {
      const id = nextId++;
      m.fork(parent, id);
      beams.push({ id, tokens: r.prompt.length });
    }
    m.free(parent);
    const steps = Math.min(r.outputLen, 256);
    for (let step = 0; step < steps; step++) {
      if (mode === 'beam') {
        // Each new beam extends a surviving beam; the best beams tend to be kept.
        const next: { id: number; tokens: number }[] = [];
        for (let i = 0; i < width; i++) {
          const from = beams[Math.floor(rand() * rand() * width)]!;
          const id = nextId++;
          m.fork(from.id, id);
          next.push({ id, tokens: from.tokens });
        }
        for (const b of beams) m.free(b.id);
        beams = next;
      }
      for (const b of beams) {
        const res = m.allocateSlots(b.id, [Math.floor(rand() * 32000)]);
        if (!res.ok) throw new Error('benchmark pool too small');
        b.tokens++;
      }
      let unshared = 0;
      for (const b of beams) unshared += Math.ceil(b.tokens / BLOCK_SIZE);
      sharedSum += m.blocks.numUsed;
      unsharedSum += unshared;
    }
    for (const b of beams) m.free(b.id);
  }
  return 1 - sharedSum / unsharedSum;
}

/** 100 requests sharing a 1,024-token system prompt: fraction of shared tokens served from cache. */
function prefixHitRate() {
  const rand = rng(11);
  const system = Array.from({ length: 1024 }, () => Math.floor(rand() * 32000));
  const m = new KvCacheManager({ numBlocks: 4096, blockSize: BLOCK_SIZE });
  let hits = 0;
  for (let i = 0; i < 100; i++) {
    const prompt = [...system, ...Array.from({ length: 64 }, () => Math.floor(rand() * 32000))];
    const prefix = m.findCachedPrefix(prompt);
    if (i > 0) hits += Math.min(prefix.numTokens, system.length);
    m.allocateSlots(i, prompt.slice(prefix.numTokens), { prefix });
    for (let t = 0; t < 32; t++) m.allocateSlots(i, [t]);
    m.free(i);
  }
  return hits / (99 * system.length);
}

/** Median wall-clock microseconds of one decode step (256 × allocateSlots of one token). */
function decodeStepMicros() {
  const seqs = 256;
  const m = new KvCacheManager({ numBlocks: seqs * 160, blockSize: BLOCK_SIZE });
  const rand = rng(3);
  for (let s = 0; s < seqs; s++) {
    m.allocateSlots(
      s,
      Array.from({ length: 100 + Math.floor(rand() * 900) }, (_, i) => i),
    );
  }
  const token = [0];
  const samples: number[] = [];
  for (let step = 0; step < 600; step++) {
    const t0 = process.hrtime.bigint();
    for (let s = 0; s < seqs; s++) {
      token[0] = step;
      m.allocateSlots(s, token);
    }
    samples.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  const warm = samples.slice(100).sort((a, b) => a - b);
  const q = (p: number) => warm[Math.floor(p * (warm.length - 1))]!;
  return { median: q(0.5), p10: q(0.1), p90: q(0.9) };
}

const requests = shareGptLike(1000, MAX_LEN, 1);
const util = utilization(requests);
const sharingRequests = requests.slice(0, 200);
const result = {
  block_size: BLOCK_SIZE,
  max_seq_len: MAX_LEN,
  requests: requests.length,
  mean_prompt_len: requests.reduce((a, r) => a + r.prompt.length, 0) / requests.length,
  mean_output_len: requests.reduce((a, r) => a + r.outputLen, 0) / requests.length,
  paged_utilization: util.paged,
  contiguous_utilization: util.contiguous,
  beam_sharing_saving: sharingSaving(sharingRequests, 'beam'),
  parallel_sampling_saving: sharingSaving(sharingRequests, 'parallel'),
  prefix_hit_rate: prefixHitRate(),
  ...(() => {
    const d = decodeStepMicros();
    return { decode_step_us: d.median, decode_step_us_p10: d.p10, decode_step_us_p90: d.p90 };
  })(),
  decode_step_seqs: 256,
};

if (json) {
  console.log(JSON.stringify(result));
} else {
  for (const [k, v] of Object.entries(result)) {
    console.log(`${k.padEnd(26)} ${typeof v === 'number' ? Number(v.toFixed(4)) : v}`);
  }
}
