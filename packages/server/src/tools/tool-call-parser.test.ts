import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ToolCallFormatName } from '../inference-engine.js';
import { type ToolCallSyntax, toolCallSyntax } from './tool-call-format.js';
import { ToolCallParser } from './tool-call-parser.js';

interface Call {
  readonly name: string;
  readonly arguments: string;
}

/** The text a model writes for `calls` in a format (what its grammar allows). */
function written(syntax: ToolCallSyntax, calls: readonly Call[]): string {
  const one = (c: Call) =>
    `${syntax.callOpen}${c.name}${syntax.afterName}${c.arguments}${syntax.close}`;
  if (syntax.callSeparator === null) return calls.map(one).join(syntax.regionSeparator);
  return `${syntax.regionOpen}${calls.map(one).join(syntax.callSeparator)}${syntax.regionClose}`;
}

/** Feeds `text` in the given pieces; returns the content and each call as rebuilt from deltas. */
function parse(syntax: ToolCallSyntax, pieces: readonly string[]) {
  let n = 0;
  const parser = new ToolCallParser(syntax, () => `id${n++}`);
  let content = '';
  const calls: { id?: string; name?: string; arguments: string }[] = [];
  for (const piece of pieces) {
    const out = piece === '' ? parser.finish() : parser.push(piece);
    content += out.content;
    for (const d of out.toolCalls) {
      if (d.id !== undefined) {
        expect(d.index).toBe(calls.length);
        calls.push({ id: d.id, name: d.name!, arguments: d.arguments });
      } else {
        calls[d.index]!.arguments += d.arguments;
      }
    }
  }
  content += parser.finish().content;
  return { content, calls, parsed: parser.calls };
}

const FORMATS: ToolCallFormatName[] = ['hermes', 'llama3_json', 'mistral'];

const args = [
  '{"city": "Paris"}',
  '{"q": "a } tricky { \\" string ]", "n": [1, {"x": []}], "ok": true}',
  '{}',
];

describe.each(FORMATS)('ToolCallParser (%s)', (format) => {
  const syntax = toolCallSyntax(format);
  const calls: Call[] = syntax.parallel
    ? [
        { name: 'get_weather', arguments: args[0]! },
        { name: 'search-2', arguments: args[1]! },
      ]
    : [{ name: 'get_weather', arguments: args[1]! }];

  it('reads calls written whole, and no content', () => {
    const r = parse(syntax, [written(syntax, calls)]);
    expect(r.content).toBe('');
    expect(r.calls).toEqual(calls.map((c, i) => ({ id: `id${i}`, ...c })));
    expect(r.parsed).toEqual(r.calls);
  });

  it('gives the same calls and content however the text is split (streaming)', () => {
    const text = `Let me check. ${written(syntax, calls)}`;
    const whole = parse(syntax, [text]);
    expect(whole.content).toBe('Let me check. ');
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 1, max: text.length - 1 }), { maxLength: 12 }),
        (cuts) => {
          const at = [0, ...cuts.sort((a, b) => a - b), text.length];
          const pieces = at.slice(1).map((end, i) => text.slice(at[i], end));
          expect(parse(syntax, pieces)).toEqual(whole);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('passes plain text through, holding back only what may start a call', () => {
    const parser = new ToolCallParser(syntax, () => 'x');
    const head = syntax.trigger.slice(0, 3);
    expect(parser.push(`a reply ${head}`).content).toBe('a reply ');
    // The held text turns out not to be a call.
    expect(parser.push('!').content).toBe(`${head}!`);
    expect(parser.finish()).toEqual({ content: '', toolCalls: [] });
    expect(parser.calls).toEqual([]);
  });

  it('keeps what a cut-short call had (max_tokens inside the arguments)', () => {
    const text = written(syntax, [{ name: 'f', arguments: '{"a": [1, 2' }]);
    const cut = text.slice(0, text.indexOf('2') + 1);
    const r = parse(syntax, [cut]);
    expect(r.calls).toEqual([{ id: 'id0', name: 'f', arguments: '{"a": [1, 2' }]);
    expect(r.content).toBe('');
  });
});

describe('ToolCallParser whitespace', () => {
  it('drops whitespace between calls, keeps whitespace of a plain answer', () => {
    const hermes = toolCallSyntax('hermes');
    const r = parse(hermes, [
      written(hermes, [{ name: 'a', arguments: '{}' }]),
      '\n\n',
      written(hermes, [{ name: 'b', arguments: '{}' }]),
      '\n',
    ]);
    expect(r.content).toBe('');
    expect(r.calls.map((c) => c.name)).toEqual(['a', 'b']);
    expect(parse(hermes, ['  ', '\n']).content).toBe('  \n');
  });
});
