import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ModelTokenizer } from '@kvasir/model';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServerProcess, startServer } from './harness.js';

// A GGUF as people download it: llama.cpp's own llama-quantize output in its default preset,
// Q4_K_M (Q4_K with Q6_K tensors), served by `kvasir serve --model file.gguf` on every backend
// and decoding llama.cpp's greedy tokens on that same file.
const here = dirname(fileURLToPath(import.meta.url));
const GGUF = join(here, '../../../tooling/ggml-fixtures/models/tiny-llama-Q4_K_M.gguf');

interface Fixture {
  readonly llama_cpp: {
    readonly quantized: { readonly prompt_tokens: number[]; readonly tokens: number[] };
  };
}

let fixture: Fixture;
let tokenizer: ModelTokenizer;

beforeAll(async () => {
  fixture = JSON.parse(await readFile(GGUF.replace(/\.gguf$/, '.json'), 'utf8')) as Fixture;
  tokenizer = await ModelTokenizer.load(GGUF);
});

describe.each(['cpu', 'wasm', 'webgpu'] as const)('kvasir serve a Q4_K_M GGUF (%s)', (backend) => {
  let server: ServerProcess;
  beforeAll(async () => {
    server = await startServer(['--model', GGUF, '--backend', backend, '--kv-dtype', 'f32']);
  }, 120_000);
  afterAll(async () => {
    expect(await server.stop()).toBe(0);
  });

  it("greedy completion is llama.cpp's on the same file", async () => {
    expect(server.output()).toMatch(new RegExp(`backend +${backend}`));
    const { prompt_tokens: prompt, tokens } = fixture.llama_cpp.quantized;
    const res = await server.client.completions.create({
      model: 'tiny-llama-Q4_K_M',
      prompt,
      max_tokens: tokens.length,
      temperature: 0,
      ignore_eos: true,
      logprobs: 0,
    } as OpenAI.CompletionCreateParamsNonStreaming);
    const choice = res.choices[0]!;
    expect(res.usage!.completion_tokens).toBe(tokens.length);
    // Token by token: the text of each generated token is the text of llama.cpp's token.
    expect(choice.logprobs!.tokens).toEqual(tokens.map((t) => tokenizer.decode([t])));
  }, 120_000);
});
