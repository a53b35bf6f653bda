import { execFile, execFileSync } from 'node:child_process';
import { mkdtemp, open, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ggufPath } from '@kvasir/mini-model';
import { makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';
import {
  convertToGguf,
  type GgufTensorToWrite,
  readGgufHeader,
  writeGguf,
} from '@kvasir/model/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, startServer } from './harness.js';

interface Run {
  readonly code: number | null;
  readonly stderr: string;
}

/** `kvasir info --backend cpu --model <model>`, to its end (killed if still running after 2 min). */
function info(model: string): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, 'info', '--backend', 'cpu', '--model', model],
      { timeout: 120_000, killSignal: 'SIGKILL', env: { ...process.env, KVASIR_API_KEY: '' } },
      (error, _stdout, stderr) => {
        const killed = (error as { killed?: boolean } | null)?.killed === true;
        resolve({
          code: killed ? null : error ? ((error as { code?: number }).code ?? 1) : 0,
          stderr: killed ? `${stderr}[still running after 2 min: killed]` : stderr,
        });
      },
    );
  });
}

const config = makeModelConfig({
  hiddenSize: 64,
  intermediateSize: 128,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 320,
  maxPositionEmbeddings: 256,
});

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-model-files-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** A random checkpoint directory with its safetensors file edited by `edit`. */
async function checkpoint(name: string, edit?: (file: Buffer) => Buffer): Promise<string> {
  const dir = join(root, name);
  await writeRandomCheckpoint(dir, config, 4);
  if (edit) {
    const file = join(dir, 'model.safetensors');
    await writeFile(file, edit(await readFile(file)));
  }
  return dir;
}

/** The safetensors header of `file` and where its data starts. */
function header(file: Buffer): {
  json: Record<string, { data_offsets: [number, number] }>;
  dataStart: number;
} {
  const n = Number(file.readBigUInt64LE(0));
  return { json: JSON.parse(file.subarray(8, 8 + n).toString('utf8')), dataStart: 8 + n };
}

describe('kvasir info refuses a hostile model file with one line, at once (built CLI)', () => {
  const cases: [string, () => Promise<string>, RegExp][] = [
    [
      'a GGUF block_count of 2^31',
      async () => {
        const path = join(root, 'layers.gguf');
        const buf = await readFile(ggufPath);
        const key = Buffer.from('llama.block_count', 'utf8');
        buf.writeUInt32LE(2 ** 31, buf.indexOf(key) + key.byteLength + 4);
        await writeFile(path, buf);
        return path;
      },
      /"llama\.block_count" is 2147483648; numLayers must be a positive integer up to 4096/,
    ],
    [
      'config.json with num_hidden_layers 1e9',
      async () => {
        const dir = await checkpoint('layers-1e9');
        const json = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8'));
        await writeFile(
          join(dir, 'config.json'),
          JSON.stringify({ ...json, num_hidden_layers: 1e9 }),
        );
        return dir;
      },
      /"num_hidden_layers" is 1000000000, above the limit of 4096/,
    ],
    [
      'a GGUF metadata array of 2^28 items (a sparse 1 GiB file)',
      async () => {
        const path = join(root, 'array.gguf');
        const b = Buffer.alloc(4 + 4 + 8 + 8 + 8 + 9 + 4 + 4 + 8);
        let at = b.writeUInt32LE(0x46554747, 0);
        at = b.writeUInt32LE(3, at);
        at = b.writeBigUInt64LE(0n, at);
        at = b.writeBigUInt64LE(1n, at);
        at = b.writeBigUInt64LE(9n, at);
        at += b.write('big.array', at);
        at = b.writeUInt32LE(9, at); // array
        at = b.writeUInt32LE(4, at); // of u32
        b.writeBigUInt64LE(2n ** 28n, at);
        await writeFile(path, b);
        await truncate(path, b.byteLength + 2 ** 30);
        return path;
      },
      /metadata "big\.array" \(268435456 items\) takes the header past its limit of 256 MiB/,
    ],
    [
      'a safetensors header length one byte short',
      () =>
        checkpoint('short-header', (file) => {
          const { json, dataStart } = header(file);
          const text = Buffer.from(`${JSON.stringify(json)}        `);
          const length = Buffer.alloc(8);
          length.writeBigUInt64LE(BigInt(text.byteLength - 1));
          return Buffer.concat([length, text, file.subarray(dataStart)]);
        }),
      /the last 1 bytes of the file belong to no tensor/,
    ],
    [
      'a FIFO',
      async () => {
        const path = join(root, 'fifo.gguf');
        execFileSync('mkfifo', [path]);
        return path;
      },
      /fifo\.gguf is a FIFO, not a regular file/,
    ],
  ];

  it.each(cases)('%s', async (_name, make, message) => {
    const run = await info(await make());
    expect(run.code, run.stderr).toBe(1);
    expect(run.stderr).toMatch(message);
    // One line: the error, with its code, and no stack trace.
    expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(run.stderr).toMatch(/\[(MODEL_LOAD|INVALID_CONFIG)\]$/m);
  });
});

/** A GGUF file's metadata and tensors (stored bytes), as `writeGguf` takes them. */
async function ggufTensors(path: string): Promise<{
  metadata: Map<string, unknown>;
  tensors: GgufTensorToWrite[];
  byName(name: string): GgufTensorToWrite;
}> {
  const fh = await open(path, 'r');
  try {
    const h = await readGgufHeader(fh, path);
    const tensors: GgufTensorToWrite[] = [];
    for (const t of h.tensors) {
      const data = new Uint8Array(t.byteLength);
      await fh.read(data, 0, t.byteLength, t.offset);
      tensors.push({ name: t.name, dtype: t.dtype, shape: [...t.dims].reverse(), data });
    }
    const metadata = new Map(h.metadata);
    metadata.delete('general.alignment');
    return { metadata, tensors, byName: (name) => tensors.find((t) => t.name === name)! };
  } finally {
    await fh.close();
  }
}

describe('a model whose output is not finite fails its own requests only (built CLI, serve)', () => {
  // f32 safetensors on both backends, and a Q8_0 GGUF on wasm, whose matmuls multiply 8-bit
  // activations: their codes of a NaN are finite, so only the scale can carry it to the logits.
  it.each([
    ['cpu', 'F32'],
    ['wasm', 'F32'],
    ['wasm', 'Q8_0'],
  ] as const)(
    '%s, %s weights: a 500 for a prompt that reaches non-finite weights; other requests, during and after, complete',
    async (backend, dtype) => {
      // <|end_header_id|>: a special token, never in the tokens of plain text.
      const poisoned = 259;
      const dir = await checkpoint(`nan-${backend}-${dtype}`, (file) => {
        const { json, dataStart } = header(file);
        const [begin] = json['model.embed_tokens.weight']!.data_offsets;
        const row = dataStart + begin + poisoned * config.hiddenSize * 4;
        if (dtype === 'Q8_0') {
          // One infinity: every RMSNorm of the row then gives NaN at its place and zeros
          // elsewhere, a block the 8-bit codes alone would have made finite.
          file.writeFloatLE(Number.POSITIVE_INFINITY, row + 4 * 5);
        } else {
          for (let i = 0; i < config.hiddenSize; i++) file.writeFloatLE(Number.NaN, row + 4 * i);
        }
        return file;
      });
      let model = dir;
      if (dtype === 'Q8_0') {
        // Q8_0 matrices with the embedding kept F32: a block's f16 scale cannot hold the infinity
        // (the wasm kernels read scales as finite halves), an f32 row can.
        const q8 = join(dir, 'q8.gguf');
        const f32 = join(dir, 'f32.gguf');
        await convertToGguf(dir, q8, { dtype });
        await convertToGguf(dir, f32);
        const [q, f] = await Promise.all([ggufTensors(q8), ggufTensors(f32)]);
        model = join(dir, 'model.gguf');
        await writeGguf(
          model,
          q.metadata,
          q.tensors.map((t) => (t.name === 'token_embd.weight' ? f.byName(t.name) : t)),
        );
        expect(q.tensors.find((t) => t.name === 'blk.0.ffn_down.weight')?.dtype).toBe('Q8_0');
      }
      // Few blocks, so that later requests reuse the blocks the failed one wrote NaN into.
      const server = await startServer([
        '--model',
        model,
        '--backend',
        backend,
        '--num-gpu-blocks',
        '6',
        '--block-size',
        '8',
      ]);
      try {
        const id = (await server.client.models.list()).data[0]!.id;
        // One token each: a token the model generates is never fed back, so none of these can
        // reach the poisoned embedding row by drawing it.
        const complete = (prompt: number[] | string) =>
          fetch(`${server.url}/v1/completions`, {
            method: 'POST',
            headers: {
              'content-type': 'application/json',
              authorization: 'Bearer sk-kvasir-e2e',
            },
            body: JSON.stringify({
              model: id,
              prompt,
              max_tokens: 1,
              temperature: 0,
              logprobs: 1,
            }),
          });
        const [bad, good] = await Promise.all([
          complete([1, 2, poisoned, 3, 4, 5, 6, 7, 8, 9, 10, 11]),
          complete('Hello there, how are you today?'),
        ]);
        expect(bad.status).toBe(500);
        const error = (await bad.json()) as { error: { message: string } };
        // A clean 500: the server keeps the internal cause out of the response.
        expect(error.error.message).toBe('internal server error');
        expect(good.status).toBe(200);
        for (let i = 0; i < 6; i++) {
          const after = await complete(Array.from({ length: 11 }, (_, j) => 10 + 7 * i + j));
          expect(after.status, server.output()).toBe(200);
          const body = (await after.json()) as {
            choices: { logprobs: { token_logprobs: number[] } }[];
          };
          const logprobs = body.choices[0]!.logprobs.token_logprobs;
          expect(logprobs).toHaveLength(1);
          for (const lp of logprobs) expect(Number.isFinite(lp)).toBe(true);
        }
        expect((await fetch(`${server.url}/health`)).status).toBe(200);
      } finally {
        await server.stop();
      }
      // The log says why, in one line for the request: no crash, no stack trace.
      expect(server.output()).toMatch(/sampling request \S+ failed .*logit \d+ of the row is NaN/);
      expect(server.output()).not.toMatch(/^ {4}at /m);
    },
  );
});
