import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import { writeRandomCheckpoint } from '../formats/random-checkpoint.js';
import { ModelTokenizer } from './tokenizer.js';
import { TokenizerThread } from './tokenizer-thread.js';

let root: string;
let tok: ModelTokenizer;
let thread: TokenizerThread;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-tok-thread-'));
  const config = makeModelConfig({
    hiddenSize: 16,
    intermediateSize: 32,
    numLayers: 1,
    numHeads: 2,
    vocabSize: 600,
  });
  await writeRandomCheckpoint(root, config, 1);
  tok = await ModelTokenizer.load(root, [257]);
  thread = new TokenizerThread(tok);
});
afterAll(async () => {
  await thread.close();
  await rm(root, { recursive: true, force: true });
});

const text = fc
  .array(
    fc.oneof(
      fc.constantFrom('the', ' cache', '  ', '\n', 'é', '日本', '🙂', '<|begin_of_text|>', '42'),
      fc.string({ unit: 'grapheme', maxLength: 6 }),
    ),
    { maxLength: 20 },
  )
  .map((parts) => parts.join(''));

describe('TokenizerThread', () => {
  it('encodes exactly as the tokenizer does, with and without special tokens', async () => {
    await fc.assert(
      fc.asyncProperty(text, fc.boolean(), async (t, addSpecialTokens) => {
        expect(await thread.encode(t, { addSpecialTokens })).toEqual(
          tok.encode(t, { addSpecialTokens }),
        );
      }),
      { numRuns: 60 },
    );
  });

  it('answers texts in the order given', async () => {
    const texts = ['a', 'bb bb', 'ccc ccc ccc', '日本語'];
    expect(await Promise.all(texts.map((t) => thread.encode(t)))).toEqual(
      texts.map((t) => tok.encode(t)),
    );
  });

  it('keeps the event loop free while it encodes a long text', async () => {
    const long = 'the paged cache keeps blocks of tokens. '.repeat(40_000);
    // The longest the loop goes without running a timer, while the worker encodes.
    let worst = 0;
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      worst = Math.max(worst, now - last);
      last = now;
    }, 5);
    const started = performance.now();
    const ids = await thread.encode(long);
    const took = performance.now() - started;
    clearInterval(timer);
    expect(ids.length).toBeGreaterThan(100_000);
    // The same text on this thread blocks for all of `took`; the worker leaves timers running
    // (the bound is loose for a loaded machine, the encode takes far longer).
    expect(took).toBeGreaterThan(4 * Math.min(worst, 250));
    expect(worst).toBeLessThan(250);
  });

  it('fails calls after close with a typed error', async () => {
    const own = new TokenizerThread(tok);
    expect(await own.encode('hi')).toEqual(tok.encode('hi'));
    await own.close();
    await expect(own.encode('hi')).rejects.toBeInstanceOf(ModelError);
  });
});
