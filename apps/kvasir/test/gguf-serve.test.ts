import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ModelTokenizer } from '@kvasir/model';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_KEY, type ServerProcess, startServer } from './harness.js';

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

// The newer families (Qwen3: Q/K norm; SmolLM3: NoPE layers; Gemma 3: sliding-window layers,
// a prompt several windows long; Phi-4-mini's shape: fused QKV and gate/up, partial rotary,
// LongRoPE's long factors and attention factor) as llama-quantize's Q4_K_M of the
// tiny random fixtures: tooling/ggml-fixtures/write-arch-fixtures.ts rebuilds them with the
// recorded per-tensor types (the model tests check each tensor's bytes against llama-quantize's),
// and a chat through the official client (the file's chat template, then greedy decoding)
// gives llama.cpp's prompt and greedy tokens on that file.
const FAMILIES = [
  'tiny-qwen3',
  'tiny-smollm3',
  'tiny-gemma3',
  'tiny-qwen3moe',
  'tiny-phi4-mini',
] as const;
const ARCH = join(here, '../../../tooling/ggml-fixtures/arch');

interface FamilyRecord {
  readonly messages: { role: 'system' | 'user'; content: string }[];
  readonly quantized: {
    readonly Q4_K_M: {
      readonly llama_cpp: {
        readonly quantized: { readonly prompt_tokens: number[]; readonly tokens: number[] };
      };
    };
  };
}

describe('kvasir serve the qwen3, smollm3, gemma3, qwen3moe and phi3 Q4_K_M fixtures', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kvasir-families-'));
    await promisify(execFile)(
      join(here, '../node_modules/.bin/tsx'),
      [join(here, '../../../tooling/ggml-fixtures/write-arch-fixtures.ts'), dir, 'Q4_K_M'],
      { cwd: join(here, '../../../packages/model') },
    );
  }, 120_000);
  afterAll(() => rm(dir, { recursive: true, force: true }));

  describe.each(
    FAMILIES.flatMap((name) => (['cpu', 'wasm', 'webgpu'] as const).map((b) => [name, b] as const)),
  )('%s on %s', (name, backend) => {
    let server: ServerProcess;
    let record: FamilyRecord;
    let tok: ModelTokenizer;
    beforeAll(async () => {
      const file = join(dir, `${name}-Q4_K_M.gguf`);
      record = JSON.parse(await readFile(join(ARCH, `${name}.json`), 'utf8')) as FamilyRecord;
      tok = await ModelTokenizer.load(file);
      server = await startServer(['--model', file, '--backend', backend, '--kv-dtype', 'f32']);
    }, 120_000);
    afterAll(async () => {
      expect(await server.stop()).toBe(0);
    });

    it("a chat gives llama.cpp's prompt and greedy tokens", async () => {
      const run = record.quantized.Q4_K_M.llama_cpp.quantized;
      const res = await server.client.chat.completions.create({
        model: `${name}-Q4_K_M`,
        messages: record.messages,
        max_tokens: run.tokens.length,
        temperature: 0,
        logprobs: true,
        ignore_eos: true,
      } as OpenAI.ChatCompletionCreateParamsNonStreaming);
      expect(res.usage!.prompt_tokens).toBe(run.prompt_tokens.length);
      expect(res.usage!.completion_tokens).toBe(run.tokens.length);
      const content = res.choices[0]!.logprobs!.content!;
      expect(content.map((c) => c.token)).toEqual(run.tokens.map((t) => tok.decode([t])));
    }, 120_000);

    it('KV compression the sliding-window layers cannot run is refused with a 400, the rest runs', async () => {
      const ask = async (kv: object) => {
        const res = await fetch(`${server.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
          body: JSON.stringify({
            model: `${name}-Q4_K_M`,
            prompt: 'one two',
            max_tokens: 3,
            kv_compression: kv,
          }),
        });
        return { status: res.status, body: (await res.json()) as { error?: { message: string } } };
      };
      const sliding = name === 'tiny-gemma3';
      if (sliding && backend !== 'webgpu') {
        // cpu and wasm hold only the window on the sliding layers (KV cache groups): no policy
        // can drop blocks of one table there, and the refusal names the flag that allows it.
        for (const kv of [
          { policy: 'window', window: 32, positions: 'original' },
          { policy: 'h2o', budget: 32 },
          { policy: 'sinks', sinks: 4, window: 28 },
        ]) {
          const r = await ask(kv);
          expect(r.status, JSON.stringify(r.body)).toBe(400);
          expect(r.body.error?.message).toMatch(/--swa-full/);
        }
        return;
      }
      const original = await ask({ policy: 'window', window: 32, positions: 'original' });
      expect(original.status, JSON.stringify(original.body)).toBe(sliding ? 400 : 200);
      if (sliding)
        expect(original.body.error?.message).toMatch(
          /positions 'original' is not supported with gemma3's sliding-window layers/,
        );
      const h2o = await ask({ policy: 'h2o', budget: 32 });
      expect(h2o.status, JSON.stringify(h2o.body)).toBe(
        sliding && backend === 'webgpu' ? 400 : 200,
      );
      if (h2o.status === 400)
        expect(h2o.body.error?.message).toMatch(
          /^kv_compression: h2o: policies that read attention mass/,
        );
      expect((await ask({ policy: 'sinks', sinks: 4, window: 28 })).status).toBe(200);
    }, 120_000);
  });
});

// gpt-oss as it ships: its experts in MXFP4 (the rest F32 here), attention sinks, a sliding
// window of 16 the 32-token prompt runs past, YaRN. The file tooling/ggml-fixtures recorded
// llama.cpp on (write-arch-fixtures.ts rebuilds it bit for bit; the model tests check its
// SHA-256), served on every backend, where a chat through the official client gives llama.cpp's
// prompt and greedy tokens.
interface GptOssRecord {
  readonly messages: { role: 'system' | 'user'; content: string }[];
  readonly llama_cpp: { readonly prompt_tokens: number[]; readonly tokens: number[] };
}

describe('kvasir serve tiny-gptoss (MXFP4 experts, attention sinks)', () => {
  let dir: string;
  let file: string;
  let record: GptOssRecord;
  let tok: ModelTokenizer;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kvasir-gptoss-'));
    await promisify(execFile)(
      join(here, '../node_modules/.bin/tsx'),
      [
        join(here, '../../../tooling/ggml-fixtures/write-arch-fixtures.ts'),
        dir,
        '--only=tiny-gptoss',
      ],
      { cwd: join(here, '../../../packages/model') },
    );
    file = join(dir, 'tiny-gptoss.gguf');
    record = JSON.parse(await readFile(join(ARCH, 'tiny-gptoss.json'), 'utf8')) as GptOssRecord;
    tok = await ModelTokenizer.load(file);
  }, 120_000);
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it.each(['cpu', 'wasm', 'webgpu'] as const)(
    "%s: a chat gives llama.cpp's prompt and greedy tokens",
    async (backend) => {
      const server = await startServer([
        '--model',
        file,
        '--backend',
        backend,
        '--kv-dtype',
        'f32',
      ]);
      try {
        expect(server.output()).toMatch(new RegExp(`backend +${backend}`));
        const run = record.llama_cpp;
        const res = await server.client.chat.completions.create({
          model: 'tiny-gptoss',
          messages: record.messages,
          max_tokens: run.tokens.length,
          temperature: 0,
          logprobs: true,
          ignore_eos: true,
        } as OpenAI.ChatCompletionCreateParamsNonStreaming);
        expect(res.usage!.prompt_tokens).toBe(run.prompt_tokens.length);
        expect(res.usage!.completion_tokens).toBe(run.tokens.length);
        const content = res.choices[0]!.logprobs!.content!;
        expect(content.map((c) => c.token)).toEqual(run.tokens.map((t) => tok.decode([t])));
      } finally {
        expect(await server.stop()).toBe(0);
      }
    },
    120_000,
  );
});
