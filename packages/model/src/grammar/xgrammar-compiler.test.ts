import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jsonSchemaArbitrary, type SeededRandom, seededRandom } from '@kvasir/test-utils';
import { Ajv } from 'ajv';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import { writeRandomCheckpoint } from '../formats/random-checkpoint.js';
import { ModelTokenizer } from '../tokenizer/tokenizer.js';
import {
  bitmaskAllows,
  bitmaskWords,
  type OutputConstraint,
  type TokenMatcher,
  type TokenVocabulary,
} from './output-constraint.js';
import { tokenVocabulary } from './token-vocabulary.js';
import { XGrammarCompiler } from './xgrammar-compiler.js';
import { evaluateXGrammar } from './xgrammar-module.js';

// The random checkpoint's byte-level BPE tokenizer (Llama 3 special tokens at 256–260), in a
// logits row 8 ids wider than the tokenizer, as models pad their embeddings.
let root: string;
let tok: ModelTokenizer;
let vocab: TokenVocabulary;
let compiler: XGrammarCompiler;
const decoder = new TextDecoder('utf-8', { fatal: true });

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-xgrammar-'));
  const config = makeModelConfig({
    hiddenSize: 64,
    intermediateSize: 128,
    numLayers: 1,
    numHeads: 2,
    numKvHeads: 1,
    vocabSize: 1024,
  });
  await writeRandomCheckpoint(root, config, 3);
  tok = await ModelTokenizer.load(root);
  vocab = tokenVocabulary(tok, { size: tok.vocabSize + 8 });
  compiler = await XGrammarCompiler.create(vocab);
});
afterAll(async () => {
  compiler.dispose();
  await rm(root, { recursive: true, force: true });
});

function allowedIds(mask: Int32Array): number[] {
  const ids: number[] = [];
  for (let t = 0; t < vocab.size; t++) if (bitmaskAllows(mask, t)) ids.push(t);
  return ids;
}

/**
 * A random walk through the constraint, as a random model samples under the mask: a uniformly
 * chosen allowed token each step, the stop token half the time it is allowed.
 */
async function walk(
  matcher: TokenMatcher,
  random: SeededRandom,
  maxSteps: number,
): Promise<{ text: string; tokens: number[]; stopped: boolean }> {
  const tokens: number[] = [];
  const stop = vocab.stopTokenIds[0]!;
  for (let step = 0; step < maxSteps; step++) {
    const mask = await matcher.nextTokenBitmask();
    expect(mask).toHaveLength(bitmaskWords(vocab.size));
    const ids = allowedIds(mask);
    expect(ids.length).toBeGreaterThan(0);
    const canStop = bitmaskAllows(mask, stop);
    const token = canStop && random() < 0.5 ? stop : ids[Math.floor(random() * ids.length)]!;
    expect(matcher.accept(token)).toBe(true);
    tokens.push(token);
    if (vocab.stopTokenIds.includes(token)) {
      expect(matcher.isTerminated).toBe(true);
      return { text: textOf(tokens), tokens, stopped: true };
    }
  }
  return { text: '', tokens, stopped: false };
}

function textOf(tokens: readonly number[]): string {
  const bytes = tokens.flatMap((t) => [...(vocab.tokens[t] ?? [])]);
  return decoder.decode(Uint8Array.from(bytes));
}

describe('XGrammarCompiler', () => {
  it('every walk that stops is JSON valid against its random schema', async () => {
    const ajv = new Ajv({ strict: false });
    let stopped = 0;
    let walks = 0;
    await fc.assert(
      fc.asyncProperty(jsonSchemaArbitrary(fc), fc.integer(), async (schema, seed) => {
        const validate = ajv.compile(schema as object);
        const compiled = await compiler.compile({ kind: 'json_schema', schema });
        const matcher = await compiled.createMatcher();
        try {
          const { text, stopped: done } = await walk(matcher, seededRandom(seed), 160);
          walks++;
          if (!done) return;
          stopped++;
          const value = JSON.parse(text) as unknown;
          expect({ text, valid: validate(value), errors: validate.errors }).toMatchObject({
            valid: true,
          });
        } finally {
          matcher.dispose();
        }
      }),
      { numRuns: 60 },
    );
    // Most walks finish: the property is not vacuous.
    expect(stopped).toBeGreaterThan(walks / 2);
  });

  describe('structural tags (tool calls)', () => {
    const args = {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 6 }, days: { enum: [1, 2, 3] } },
      required: ['city', 'days'],
      additionalProperties: false,
    };
    const validate = new Ajv({ strict: false }).compile(args);
    const call = (name: string, open = '<tool_call>\n{"name": "') => ({
      type: 'tag' as const,
      begin: `${open}${name}", "arguments": `,
      content: { type: 'json_schema' as const, json_schema: args },
      end: open.startsWith('<') ? '}\n</tool_call>' : '}',
    });
    const HERMES = /<tool_call>\n\{"name": "(a|b)", "arguments": (\{.*?\})\}\n<\/tool_call>/gs;

    function expectCalls(text: string, pattern: RegExp, min: number) {
      const found = [...text.matchAll(pattern)];
      expect(found.length).toBeGreaterThanOrEqual(min);
      for (const m of found) {
        const value = JSON.parse(m[2]!) as unknown;
        expect({ text, valid: validate(value) }).toMatchObject({ valid: true });
      }
      return found;
    }

    it('forced: nothing but calls of the declared tools, arguments valid and compact', async () => {
      const compiled = await compiler.compile({
        kind: 'structural_tag',
        format: {
          type: 'tags_with_separator',
          tags: [call('a'), call('b')],
          separator: '\n',
          at_least_one: true,
          stop_after_first: false,
        },
      });
      let complete = 0;
      for (let seed = 0; seed < 6; seed++) {
        const matcher = await compiled.createMatcher();
        const { text, stopped } = await walk(matcher, seededRandom(seed), 200);
        matcher.dispose();
        if (!stopped) continue;
        complete++;
        const calls = expectCalls(text, HERMES, 1);
        expect(calls.map((m) => m[0]).join('\n')).toBe(text);
      }
      expect(complete).toBeGreaterThan(3);
    });

    it('auto: free text until the trigger, then the call is enforced to its end', async () => {
      const compiled = await compiler.compile({
        kind: 'structural_tag',
        format: {
          type: 'triggered_tags',
          triggers: ['<tool_call>'],
          tags: [call('a'), call('b')],
          stop_after_first: true,
        },
      });
      const matcher = await compiled.createMatcher();
      // Text is free; the model writes the trigger on its own.
      for (const t of tok.encode('Sure. <tool_call>', { addSpecialTokens: false })) {
        expect(matcher.accept(t)).toBe(true);
      }
      expect(matcher.forcedText()).toBe('\n{"name": "');
      const rest = await walk(matcher, seededRandom(4), 200);
      matcher.dispose();
      expect(rest.stopped).toBe(true);
      expectCalls(`Sure. <tool_call>${rest.text}`, HERMES, 1);
    });

    it('a region holding several calls ([TOOL_CALLS][…, …])', async () => {
      const compiled = await compiler.compile({
        kind: 'structural_tag',
        format: {
          type: 'tag',
          begin: '[TOOL_CALLS][',
          content: {
            type: 'tags_with_separator',
            tags: [call('a', '{"name": "'), call('b', '{"name": "')],
            separator: ', ',
            at_least_one: true,
          },
          end: ']',
        },
      });
      const matcher = await compiled.createMatcher();
      const { text, stopped } = await walk(matcher, seededRandom(2), 300);
      matcher.dispose();
      expect(stopped).toBe(true);
      const list = JSON.parse(text.slice('[TOOL_CALLS]'.length)) as {
        name: string;
        arguments: unknown;
      }[];
      expect(list.length).toBeGreaterThan(0);
      for (const c of list) {
        expect(['a', 'b']).toContain(c.name);
        expect(validate(c.arguments)).toBe(true);
      }
    });
  });

  it('rolling back or resetting and replaying gives the same masks', async () => {
    const compiled = await compiler.compile({
      kind: 'json_schema',
      schema: {
        type: 'object',
        properties: {
          name: { type: 'string', maxLength: 6 },
          tags: { type: 'array', items: { enum: ['x', 'yz'] } },
        },
        required: ['name', 'tags'],
      },
    });
    await fc.assert(
      fc.asyncProperty(fc.integer(), fc.integer({ min: 0, max: 40 }), async (seed, back) => {
        const matcher = await compiled.createMatcher();
        try {
          const random = seededRandom(seed);
          const masks: Int32Array[] = [];
          const tokens: number[] = [];
          // masks[i]: the mask after i tokens.
          masks.push(await matcher.nextTokenBitmask());
          for (let i = 0; i < 30; i++) {
            const ids = allowedIds(masks[i]!).filter((t) => !vocab.stopTokenIds.includes(t));
            if (ids.length === 0) break;
            const t = ids[Math.floor(random() * ids.length)]!;
            expect(matcher.accept(t)).toBe(true);
            tokens.push(t);
            masks.push(await matcher.nextTokenBitmask());
          }
          expect(matcher.length).toBe(tokens.length);
          const k = Math.min(back, tokens.length);
          matcher.rollback(k);
          expect(matcher.length).toBe(tokens.length - k);
          expect(await matcher.nextTokenBitmask()).toEqual(masks[tokens.length - k]);
          // Recompute after preemption: reset, accept the same tokens, same state.
          matcher.reset();
          expect(matcher.length).toBe(0);
          for (let i = 0; i < tokens.length; i++) {
            expect(await matcher.nextTokenBitmask()).toEqual(masks[i]);
            expect(matcher.accept(tokens[i]!)).toBe(true);
          }
          expect(await matcher.nextTokenBitmask()).toEqual(masks[tokens.length]);
          expect(() => matcher.rollback(tokens.length + 1)).toThrow(ModelError);
        } finally {
          matcher.dispose();
        }
      }),
      { numRuns: 25 },
    );
  });

  it('never allows control tokens, padding rows or a stop before the output is complete', async () => {
    const compiled = await compiler.compile({ kind: 'json_object' });
    const matcher = await compiled.createMatcher();
    const mask = await matcher.nextTokenBitmask();
    for (const id of vocab.stopTokenIds) expect(bitmaskAllows(mask, id)).toBe(false);
    for (let t = tok.vocabSize; t < vocab.size; t++) expect(bitmaskAllows(mask, t)).toBe(false);
    for (const id of tok.specialTokenIds) expect(bitmaskAllows(mask, id)).toBe(false);
    expect(allowedIds(mask).map((t) => textOf([t]).trimStart()[0] ?? '')).not.toContain('a');
    for (const t of tok.encode('{"k": [1, {"n": null}]}', { addSpecialTokens: false })) {
      expect(matcher.accept(t)).toBe(true);
    }
    const done = await matcher.nextTokenBitmask();
    expect(allowedIds(done)).toEqual(vocab.stopTokenIds);
    expect(matcher.accept(tok.encode('x', { addSpecialTokens: false })[0]!)).toBe(false);
    expect(() => matcher.accept(vocab.size)).toThrow(ModelError);
    matcher.dispose();
    expect(() => matcher.accept(0)).toThrow(/after dispose/);
  });

  it.each<[string, OutputConstraint, string[], string[]]>([
    [
      'a llama.cpp GBNF grammar',
      {
        kind: 'grammar',
        grammar: 'root ::= answer " " number\nanswer ::= "yes" | "no"\nnumber ::= [0-9]+',
      },
      ['yes 42', 'no 7'],
      ['maybe 1', 'yes x'],
    ],
    ['a regex', { kind: 'regex', pattern: '[a-c]{2}-[0-9]+' }, ['ab-12', 'cc-0'], ['ad-1', 'ab12']],
  ])('%s: accepts what it matches and stops only there', async (_, constraint, good, bad) => {
    const compiled = await compiler.compile(constraint);
    const stop = vocab.stopTokenIds[0]!;
    const accepts = async (text: string) => {
      const matcher = await compiled.createMatcher();
      try {
        for (const t of tok.encode(text, { addSpecialTokens: false })) {
          if (!matcher.accept(t)) return false;
        }
        return bitmaskAllows(await matcher.nextTokenBitmask(), stop) && matcher.accept(stop);
      } finally {
        matcher.dispose();
      }
    };
    for (const text of good) expect({ text, ok: await accepts(text) }).toEqual({ text, ok: true });
    for (const text of bad) expect({ text, ok: await accepts(text) }).toEqual({ text, ok: false });
  });

  it('tells what is forced next (jump-forward)', async () => {
    const compiled = await compiler.compile({
      kind: 'grammar',
      grammar: 'root ::= "{\\"name\\": \\"" [a-z]+ "\\", \\"ok\\": true}"',
    });
    const matcher = await compiled.createMatcher();
    expect(matcher.forcedText()).toBe('{"name": "');
    for (const t of tok.encode('{"name": "ab', { addSpecialTokens: false })) {
      expect(matcher.accept(t)).toBe(true);
    }
    expect(matcher.forcedText()).toBe('');
    for (const t of tok.encode('"', { addSpecialTokens: false })) matcher.accept(t);
    expect(matcher.forcedText()).toBe(', "ok": true}');
    matcher.dispose();
  });

  it("evaluates the bundle's text as a Web Worker does (location, no require) and masks as the Node load does", async () => {
    const require = createRequire(import.meta.url);
    const text = await readFile(require.resolve('@mlc-ai/web-xgrammar'), 'utf8');
    // Where neither `document` nor `location` exists the bundle asks for Node's 'url' module:
    // the worker's host refuses by name.
    expect(() => evaluateXGrammar(text)).toThrow(/asked for 'url', which needs Node/);
    expect(() => evaluateXGrammar('module.exports = {}')).toThrow(
      expect.objectContaining({
        code: 'BACKEND',
        message: expect.stringMatching(/GrammarCompiler/),
      }),
    );
    const scope = globalThis as { location?: { href: string } };
    scope.location = { href: 'http://localhost/worker.js' };
    let inWorker: XGrammarCompiler;
    try {
      inWorker = await XGrammarCompiler.create(vocab, { load: () => evaluateXGrammar(text) });
    } finally {
      delete scope.location;
    }
    try {
      const constraint: OutputConstraint = {
        kind: 'json_schema',
        schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
      };
      const [a, b] = await Promise.all(
        [inWorker, compiler].map(async (c) => (await c.compile(constraint)).createMatcher()),
      );
      for (const t of tok.encode('{"n": 4', { addSpecialTokens: false })) {
        expect(allowedIds(await a!.nextTokenBitmask())).toEqual(
          allowedIds(await b!.nextTokenBitmask()),
        );
        expect(a!.accept(t)).toBe(true);
        expect(b!.accept(t)).toBe(true);
      }
      a!.dispose();
      b!.dispose();
    } finally {
      inWorker.dispose();
    }
  });

  it('keeps the output valid UTF-8: no overlong forms, surrogates or code points past U+10FFFF', async () => {
    const compiled = await compiler.compile({ kind: 'json_schema', schema: { type: 'string' } });
    const byteToken = (b: number) => vocab.tokens.findIndex((t) => t?.length === 1 && t[0] === b);
    const singleBytesAfter = async (prefix: number[]) => {
      const matcher = await compiled.createMatcher();
      for (const t of [...tok.encode('"', { addSpecialTokens: false }), ...prefix]) {
        expect(matcher.accept(t)).toBe(true);
      }
      const mask = await matcher.nextTokenBitmask();
      const bytes = allowedIds(mask)
        .filter((t) => vocab.tokens[t]?.length === 1 && vocab.tokens[t]![0]! >= 0x80)
        .map((t) => vocab.tokens[t]![0]!);
      // A token the mask refuses is refused by accept too.
      if (prefix.length === 1) expect(matcher.accept(byteToken(0x80))).toBe(bytes.includes(0x80));
      matcher.dispose();
      return bytes;
    };
    const range = (lo: number, hi: number) => Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);
    expect(await singleBytesAfter([])).toEqual(range(0xc2, 0xf4));
    expect(await singleBytesAfter([byteToken(0xe0)])).toEqual(range(0xa0, 0xbf));
    expect(await singleBytesAfter([byteToken(0xed)])).toEqual(range(0x80, 0x9f));
    expect(await singleBytesAfter([byteToken(0xf0)])).toEqual(range(0x90, 0xbf));
    expect(await singleBytesAfter([byteToken(0xf4)])).toEqual(range(0x80, 0x8f));
    expect(await singleBytesAfter([byteToken(0xc3)])).toEqual(range(0x80, 0xbf));
  });

  it('keeps control characters out of strings with length bounds (they would not parse)', async () => {
    const compiled = await compiler.compile({
      kind: 'json_schema',
      schema: {
        type: 'object',
        properties: { s: { type: 'string', maxLength: 4 } },
        required: ['s'],
      },
    });
    const matcher = await compiled.createMatcher();
    for (const t of tok.encode('{"s": "', { addSpecialTokens: false })) {
      expect(matcher.accept(t)).toBe(true);
    }
    const inString = allowedIds(await matcher.nextTokenBitmask());
    const controls = inString.filter((t) => (vocab.tokens[t] ?? []).some((b) => b < 0x20));
    expect(controls).toEqual([]);
    expect(inString.length).toBeGreaterThan(200);
    matcher.dispose();
  });

  it('caches compilations by key, least recently used out first', async () => {
    const small = await XGrammarCompiler.create(vocab, { cacheSize: 2 });
    try {
      const schema = (n: number) => ({ kind: 'json_schema' as const, schema: { const: n } });
      const a = await small.compile(schema(1));
      expect(await small.compile(schema(1))).toBe(a);
      await small.compile(schema(2));
      await small.compile(schema(1));
      await small.compile(schema(3));
      expect(small.cachedCount).toBe(2);
      expect(await small.compile(schema(1))).toBe(a);
      expect(await small.compile(schema(2))).not.toBe(a);
      // An evicted compilation's matchers keep working.
      const m = await a.createMatcher();
      for (let i = 0; i < 5; i++) await small.compile(schema(10 + i));
      expect(m.accept(tok.encode('1', { addSpecialTokens: false })[0]!)).toBe(true);
      m.dispose();
    } finally {
      small.dispose();
    }
  });

  it.each<[OutputConstraint, RegExp]>([
    [{ kind: 'json_schema', schema: { type: 'nonsense' } }, /json_schema: .*nonsense/],
    [{ kind: 'json_schema', schema: { $ref: '#/$defs/missing' } }, /json_schema: .*missing/i],
    [{ kind: 'grammar', grammar: 'root ::= undefined_rule' }, /grammar: .*undefined_rule/],
    [{ kind: 'grammar', grammar: 'root ::= "a" |' }, /grammar: .*(line 1|column)/],
    [{ kind: 'regex', pattern: '[a-' }, /regex: /],
    [{ kind: 'json_schema', schema: 'not an object' }, /json_schema: the schema must be/],
    [{ kind: 'grammar', grammar: ' ' }, /grammar: the grammar must be/],
    [{ kind: 'ebnf' } as unknown as OutputConstraint, /unknown constraint kind/],
  ])('rejects %j with INVALID_CONSTRAINT naming the reason', async (constraint, message) => {
    const error = await compiler.compile(constraint).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(ModelError.isInstance(error) && error.code).toBe('INVALID_CONSTRAINT');
    expect((error as Error).message).toMatch(message);
  });

  it('survives dozens of rejected inputs (an unreplaced instance breaks after about 30): a WebAssembly instance that aborted is replaced', async () => {
    const own = await XGrammarCompiler.create(vocab);
    try {
      const good = await own.compile({ kind: 'json_schema', schema: { enum: ['ok'] } });
      const inFlight = await good.createMatcher();
      const before = own.instances;
      for (let i = 0; i < 40; i++) {
        await expect(
          own.compile({
            kind: 'json_schema',
            schema: { type: `nonsense${i}`, description: 'x'.repeat(2000) },
          }),
        ).rejects.toThrow(/nonsense/);
      }
      // A fresh instance for each compilation after an abort: one that aborted is never reused.
      expect(own.instances).toBe(before + 39);
      const after = await own.compile({ kind: 'json_schema', schema: { enum: ['ok'] } });
      expect(own.instances).toBe(before + 40);
      const m = await after.createMatcher();
      expect(textOf(allowedIds(await m.nextTokenBitmask()))).toContain('"');
      m.dispose();
      // A matcher created before the aborts still works in its old instance.
      for (const t of tok.encode('"ok"', { addSpecialTokens: false }))
        expect(inFlight.accept(t)).toBe(true);
      expect(bitmaskAllows(await inFlight.nextTokenBitmask(), vocab.stopTokenIds[0]!)).toBe(true);
      inFlight.dispose();
    } finally {
      own.dispose();
    }
  });
});
