import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  loadModel,
  type Model,
  ModelTokenizer,
  makeModelConfig,
  writeRandomCheckpoint,
} from '@kvasir/model';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EvalReport } from '../src/commands/eval.js';
import { CLI } from './harness.js';

const run = promisify(execFile);

// Head dim 32: every KV format has kernels for it.
const CONFIG = makeModelConfig({
  architecture: 'llama',
  hiddenSize: 128,
  intermediateSize: 256,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 320,
  maxPositionEmbeddings: 256,
  tieWordEmbeddings: false,
});
const CTX = 48;
const STRIDE = 20;

const TEXT = `Kvasir keeps the KV cache in blocks. ${'A scheduler batches prefills and decodes; '.repeat(6)}The end.`;

let dir: string;
let textFile: string;
let model: Model;
let tokenizer: ModelTokenizer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-eval-'));
  await writeRandomCheckpoint(join(dir, 'model'), CONFIG, 11);
  textFile = join(dir, 'text.txt');
  await writeFile(textFile, TEXT);
  tokenizer = await ModelTokenizer.load(join(dir, 'model'));
  model = await loadModel(join(dir, 'model'), { backend: 'cpu', kvFormat: 'f32', numBlocks: 16 });
});

afterAll(async () => {
  await model?.destroy();
  await rm(dir, { recursive: true, force: true });
});

async function evaluate(...args: string[]): Promise<EvalReport> {
  const { stdout } = await run(process.execPath, [
    CLI,
    'eval',
    '--model',
    join(dir, 'model'),
    '--file',
    textFile,
    '--backend',
    'cpu',
    '--json',
    ...args,
  ]);
  return JSON.parse(stdout) as EvalReport;
}

/**
 * The perplexity computed here, apart from the command: the guide's loop over windows, each
 * window one unchunked forward pass from position 0, loss on the tokens no earlier window
 * scored.
 */
async function independentPerplexity(ids: readonly number[], ctx: number, stride: number) {
  let nll = 0;
  let count = 0;
  let previousEnd = 0;
  for (let begin = 0; begin < ids.length; begin += stride) {
    const end = Math.min(begin + ctx, ids.length);
    const n = end - begin;
    const positions = Int32Array.from({ length: n }, (_, i) => i);
    const logits = await model.forward({
      tokenIds: Int32Array.from(ids.slice(begin, end)),
      positions,
      slotMapping: positions,
      rows: [{ queryStart: 0, queryLen: n, contextLen: n, blockTable: [0, 1, 2, 3] }],
      logitsIndices: positions,
    });
    const vocab = logits.length / n;
    for (let t = Math.max(previousEnd, begin + 1); t < end; t++) {
      const row = logits.subarray((t - begin - 1) * vocab, (t - begin) * vocab);
      const max = Math.max(...row);
      const logZ = max + Math.log(row.reduce((s, x) => s + Math.exp(x - max), 0));
      nll += logZ - row[ids[t]!]!;
      count++;
    }
    previousEnd = end;
    if (end === ids.length) break;
  }
  return { perplexity: Math.exp(nll / count), count };
}

describe('kvasir eval (built CLI, random model, CPU backend)', () => {
  it('gives the perplexity computed independently from the forward pass; KL 0 against itself', async () => {
    const ids = tokenizer.encode(TEXT);
    expect(ids.length).toBeGreaterThan(2 * CTX);
    const expected = await independentPerplexity(ids, CTX, STRIDE);
    // Chunks of 16 tokens: the windows go through chunked prefill over the paged cache.
    const report = await evaluate(
      '--ctx',
      String(CTX),
      '--stride',
      String(STRIDE),
      '--max-num-batched-tokens',
      '16',
      '--block-size',
      '8',
      '--reference-kv-dtype',
      'f32',
    );
    expect(report.tokens).toBe(ids.length);
    expect(report.scored_tokens).toBe(expected.count);
    expect(report.scored_tokens).toBe(ids.length - 1);
    expect(Math.abs(report.perplexity / expected.perplexity - 1)).toBeLessThan(1e-5);
    expect(report.reference).toEqual({
      source: 'run',
      kv_dtype: 'f32',
      perplexity: report.perplexity,
      mean_kl: 0,
      top1_agreement: 1,
    });
  });

  it('int4 KV diverges from the f32 reference (KL > 0), whose perplexity is the f32 one', async () => {
    const args = ['--ctx', String(CTX), '--stride', String(STRIDE), '--max-tokens', '100'];
    // An f32 run has no reference run unless asked for one.
    const f32 = await evaluate(...args);
    expect(f32.reference).toBeNull();
    const int4 = await evaluate(...args, '--kv-dtype', 'int4');
    expect(int4.tokens).toBe(100);
    expect(int4.reference!.mean_kl).toBeGreaterThan(0);
    expect(int4.reference!.top1_agreement).toBeLessThanOrEqual(1);
    expect(int4.perplexity).not.toBe(f32.perplexity);
    expect(Math.abs(int4.reference!.perplexity / f32.perplexity - 1)).toBeLessThan(1e-9);
  });

  it('compares with logits an earlier run saved exactly as with a live reference run', async () => {
    const args = ['--ctx', String(CTX), '--stride', String(STRIDE), '--max-tokens', '90'];
    const saved = join(dir, 'f32-logits.json');
    const f32 = await evaluate(...args, '--reference-kv-dtype', 'none', '--save-logits', saved);
    const header = JSON.parse(await readFile(saved, 'utf8'));
    expect(header).toMatchObject({ kv_dtype: 'f32', ctx: CTX, stride: STRIDE, tokens: 90 });
    expect(header.scored_tokens).toBe(f32.scored_tokens);
    const live = await evaluate(...args, '--kv-dtype', 'int8');
    const fromFile = await evaluate(...args, '--kv-dtype', 'int8', '--reference', saved);
    expect(fromFile.reference).toEqual({ ...live.reference!, source: saved });
    expect(fromFile.reference!.mean_kl).toBeGreaterThan(0);

    const other = await evaluate(
      '--ctx',
      String(CTX),
      '--stride',
      String(STRIDE + 1),
      '--max-tokens',
      '90',
      '--reference',
      saved,
    ).catch((error: { stderr: string }) => error.stderr);
    expect(other).toMatch(/--reference .*saved with --stride 20 \(this run: 21\)/);
  });

  it('writes the evaluated token ids for an independent check', async () => {
    const out = join(dir, 'ids.json');
    await evaluate('--ctx', '32', '--max-tokens', '40', '--tokens-out', out);
    expect(JSON.parse(await readFile(out, 'utf8'))).toEqual(tokenizer.encode(TEXT).slice(0, 40));
  });

  it('names the flag at fault: a stride past the window, a window past the context, no file', async () => {
    const fails = async (...args: string[]) => {
      try {
        await evaluate(...args);
      } catch (error) {
        return (error as { stderr: string }).stderr;
      }
      throw new Error('expected kvasir eval to fail');
    };
    expect(await fails('--ctx', '16', '--stride', '17')).toMatch(/--stride.*\[INVALID_CONFIG\]/);
    expect(await fails('--ctx', '1000')).toMatch(
      /--ctx: 1000 tokens exceed the model's context of 256/,
    );
    expect(await fails('--file', join(dir, 'missing.txt'))).toMatch(/--file: cannot read/);
  });
});
