import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { GenerationRequest } from '@kvasir/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeVocabularyGguf } from '../../test/harness.js';
import { parseEngineConfig } from '../config.js';
import { greedyRequest } from '../testing/greedy-request.js';
import { type BuiltEngine, buildEngine } from './bootstrap.js';

// Jump-forward on a SentencePiece model: the random model over llama.cpp's Llama 2 vocabulary
// (byte fallback, add_space_prefix), as Llama 2 and Mistral v0.1 ship it. Its tokenizer encodes
// `{"name": "` as `▁`, `{`, `"`, …; the forced text has no leading space, so the tokens
// prefilled before the first sample must be the text's own, as mid-text.
const dir = mkdtempSync(join(tmpdir(), 'kvasir-spm-jump-'));
let built: BuiltEngine;
beforeAll(async () => {
  const path = join(dir, 'spm.gguf');
  await writeVocabularyGguf(path, {
    vocab: 'llama-spm',
    chatTemplate: "{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]",
  });
  built = await buildEngine(
    parseEngineConfig({ backend: 'cpu', model: path, numGpuBlocks: 32, jumpForward: true }),
  );
}, 120_000);
afterAll(async () => {
  await built?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('jump-forward on a SentencePiece model', () => {
  it("prefills a schema's opening in its mid-text tokens and forces every key after", async () => {
    const codec = built.engine.runner.codec;
    expect(codec.encodeText!('{"').length).toBe(3); // ▁ { "
    const request: GenerationRequest = {
      ...greedyRequest('spm', codec.encode('Hello'), 80, built.engine.modelCard.id),
      ignoreEos: false,
      constraint: {
        kind: 'json_schema',
        schema: {
          type: 'object',
          properties: { name: { type: 'string', maxLength: 5 }, ok: { type: 'boolean' } },
          required: ['name', 'ok'],
          additionalProperties: false,
        },
      },
    };
    const deltas: { tokenIds: readonly number[]; text: string }[] = [];
    for await (const event of await built.engine.generate(request, new AbortController().signal)) {
      if (event.kind === 'delta' && event.tokenIds.length > 0) deltas.push(event);
    }
    expect(deltas[0]!.text).toBe('{"name": "');
    expect(deltas[0]!.tokenIds).toEqual(codec.encodeText!('\n{"name": "').slice(2));
    const text = deltas.map((d) => d.text).join('');
    expect(JSON.parse(text)).toEqual({ name: expect.any(String), ok: expect.any(Boolean) });
    // `", "ok": ` after the name's closing quote came forced too, in one delta.
    expect(deltas.some((d) => d.text.includes('"ok": ') && d.tokenIds.length > 1)).toBe(true);
  });
});
