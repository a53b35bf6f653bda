import { mkdtemp, open, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectedTensors, makeModelConfig } from '../config.js';
import { expectModelError } from '../testing/checkpoint.js';
import { f16BitsToF32, f32ToF16Bits } from './dtype.js';
import { openCheckpoint } from './open-checkpoint.js';
import { randomTensors, writeRandomCheckpoint } from './random-checkpoint.js';
import { writeSafetensors } from './safetensors.js';

const config = makeModelConfig({
  hiddenSize: 32,
  intermediateSize: 48,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 320,
});

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-st-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('safetensors checkpoints', () => {
  it('reads back exactly the random weights it wrote (F32)', async () => {
    const dir = join(root, 'f32');
    const { config: written } = await writeRandomCheckpoint(dir, config, 7);
    const r = await openCheckpoint(dir);
    try {
      expect(r.format).toBe('safetensors');
      expect(r.config).toEqual(written);
      expect([...r.tensors.keys()].sort()).toEqual(
        expectedTensors(written)
          .map((t) => t.name)
          .sort(),
      );
      for (const t of randomTensors(written, 7)) {
        const info = r.tensor(t.name);
        expect(info.dtype).toBe('F32');
        expect(info.shape).toEqual(t.shape);
        expect(info.byteLength).toBe(t.values.length * 4);
        expect(await r.readTensorF32(t.name)).toEqual(t.values);
      }
      let total = 0;
      for (const t of r.tensors.values()) total += t.byteLength;
      expect(r.totalBytes).toBe(total);
    } finally {
      await r.close();
    }
  });

  it('stores F16 weights rounded to nearest', async () => {
    const dir = join(root, 'f16');
    await writeRandomCheckpoint(dir, config, 7, { dtype: 'F16' });
    const r = await openCheckpoint(dir);
    try {
      const t = randomTensors(r.config, 7).next().value!;
      const got = await r.readTensorF32(t.name);
      expect(r.tensor(t.name).dtype).toBe('F16');
      for (let i = 0; i < got.length; i++)
        expect(got[i]).toBe(f16BitsToF32(f32ToF16Bits(t.values[i]!)));
    } finally {
      await r.close();
    }
  });

  it('streams chunks that are bounded, 4-byte aligned and concatenate to the tensor', async () => {
    const dir = join(root, 'f32');
    const r = await openCheckpoint(dir);
    try {
      const name = 'model.embed_tokens.weight';
      const whole = await r.readTensorBytes(name);
      const parts: Uint8Array[] = [];
      for await (const c of r.readChunks(name, { maxChunkBytes: 1001 })) {
        expect(c.byteLength).toBeLessThanOrEqual(1001);
        parts.push(c);
      }
      for (const p of parts.slice(0, -1)) expect(p.byteLength % 4).toBe(0);
      expect(Buffer.concat(parts).equals(Buffer.from(whole))).toBe(true);
      const target = new Uint8Array(whole.byteLength + 12);
      await r.readInto(name, target, 12);
      expect(Buffer.from(target.subarray(12)).equals(Buffer.from(whole))).toBe(true);
      await expectModelError(r.readInto(name, new Uint8Array(10)), 'INVALID_ARGUMENT');
      await expectModelError(r.readTensorF32('nope.weight'), 'MISSING_TENSOR', 'nope.weight');
    } finally {
      await r.close();
    }
  });

  it('reads a sharded checkpoint through its index, equal to the single file', async () => {
    const dir = join(root, 'sharded');
    await writeRandomCheckpoint(dir, config, 7, { shards: 3 });
    const index = JSON.parse(await readFile(join(dir, 'model.safetensors.index.json'), 'utf8'));
    expect(new Set(Object.values(index.weight_map)).size).toBe(3);
    const a = await openCheckpoint(dir);
    const b = await openCheckpoint(join(root, 'f32'));
    try {
      for (const name of b.tensors.keys())
        expect(await a.readTensorF32(name)).toEqual(await b.readTensorF32(name));
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('is deterministic by seed', async () => {
    await writeRandomCheckpoint(join(root, 's1'), config, 11);
    await writeRandomCheckpoint(join(root, 's2'), config, 11);
    await writeRandomCheckpoint(join(root, 's3'), config, 12);
    for (const f of [
      'model.safetensors',
      'tokenizer.json',
      'tokenizer_config.json',
      'config.json',
    ]) {
      expect(
        (await readFile(join(root, 's1', f))).equals(await readFile(join(root, 's2', f))),
      ).toBe(true);
    }
    expect(
      (await readFile(join(root, 's1', 'model.safetensors'))).equals(
        await readFile(join(root, 's3', 'model.safetensors')),
      ),
    ).toBe(false);
  });

  it('writes a header an independent parser reads (8-byte aligned, offsets contiguous)', async () => {
    const p = join(root, 'plain.safetensors');
    await writeSafetensors(
      p,
      [
        { name: 'a', dtype: 'F32', shape: [2, 3], data: new Float32Array([1, 2, 3, 4, 5, 6]) },
        { name: 'b', dtype: 'BF16', shape: [3], data: new Float32Array([1, -2, 0.5]) },
      ],
      { format: 'pt' },
    );
    const buf = await readFile(p);
    const n = Number(buf.readBigUInt64LE(0));
    expect((8 + n) % 8).toBe(0);
    const h = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
    expect(h.__metadata__).toEqual({ format: 'pt' });
    expect(h.a).toEqual({ dtype: 'F32', shape: [2, 3], data_offsets: [0, 24] });
    expect(h.b).toEqual({ dtype: 'BF16', shape: [3], data_offsets: [24, 30] });
    expect(buf.readFloatLE(8 + n + 20)).toBe(6);
    // bf16 of -2 is 0xc000.
    expect(buf.readUInt16LE(8 + n + 26)).toBe(0xc000);
    expect(buf.length).toBe(8 + n + 30);
  });
});

type Entry = { dtype: string; shape: number[]; data_offsets: number[] };

describe('malformed safetensors', () => {
  async function corrupt(name: string, edit: (file: string) => Promise<void>): Promise<string> {
    const dir = join(root, name);
    await writeRandomCheckpoint(dir, config, 3);
    await edit(join(dir, 'model.safetensors'));
    return dir;
  }

  async function rewriteHeader(file: string, f: (h: Record<string, Entry>) => void): Promise<void> {
    const buf = await readFile(file);
    const n = Number(buf.readBigUInt64LE(0));
    const h = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
    f(h);
    let json = JSON.stringify(h);
    while (json.length < n) json += ' ';
    expect(json.length).toBe(n);
    buf.write(json, 8, 'utf8');
    await writeFile(file, buf);
  }

  it('a truncated file names the tensor that runs past the end', async () => {
    const dir = await corrupt('trunc', async (f) => {
      const fh = await open(f, 'r');
      const size = (await fh.stat()).size;
      await fh.close();
      await truncate(f, size - 10);
    });
    await expectModelError(openCheckpoint(dir), 'TRUNCATED_FILE', 'lm_head.weight');
  });

  it('a header length beyond the file is TRUNCATED_FILE; an absurd one MALFORMED_FILE', async () => {
    const dir1 = await corrupt('hdr1', async (f) => {
      const buf = await readFile(f);
      buf.writeBigUInt64LE(BigInt(buf.length), 0);
      await writeFile(f, buf);
    });
    await expectModelError(openCheckpoint(dir1), 'TRUNCATED_FILE', 'header length');
    const dir2 = await corrupt('hdr2', async (f) => {
      const buf = await readFile(f);
      buf.writeBigUInt64LE(1n << 60n, 0);
      await writeFile(f, buf);
    });
    await expectModelError(openCheckpoint(dir2), 'MALFORMED_FILE', 'bad header length');
    const dir3 = await corrupt('hdr3', async (f) => writeFile(f, Buffer.from([1, 2, 3])));
    await expectModelError(openCheckpoint(dir3), 'TRUNCATED_FILE');
  });

  it('an unknown dtype, a wrong shape, overlapping data or a missing tensor name the tensor', async () => {
    const d1 = await corrupt('dtype', (f) =>
      rewriteHeader(f, (h) => {
        h['model.norm.weight']!.dtype = 'I8';
      }),
    );
    await expectModelError(openCheckpoint(d1), 'UNSUPPORTED_DTYPE', 'model.norm.weight');
    const d2 = await corrupt('shape', (f) =>
      rewriteHeader(f, (h) => {
        h['model.layers.1.mlp.up_proj.weight']!.shape = [32, 48];
      }),
    );
    await expectModelError(
      openCheckpoint(d2),
      'SHAPE_MISMATCH',
      'model.layers.1.mlp.up_proj.weight',
    );
    const d3 = await corrupt('missing', (f) =>
      rewriteHeader(f, (h) => {
        h['model.layers.0.self_attn.k_proj.weighs'] = h['model.layers.0.self_attn.k_proj.weight']!;
        delete h['model.layers.0.self_attn.k_proj.weight'];
      }),
    );
    await expectModelError(
      openCheckpoint(d3),
      'MISSING_TENSOR',
      'model.layers.0.self_attn.k_proj.weight',
    );
    const d4 = await corrupt('overlap', (f) =>
      rewriteHeader(f, (h) => {
        h['model.norm.weight']!.data_offsets = [0, 128];
      }),
    );
    await expectModelError(openCheckpoint(d4), 'MALFORMED_FILE', 'overlap');
    const d5 = await corrupt('json', async (f) => {
      const buf = await readFile(f);
      buf[9] = 0x7b;
      buf[10] = 0x7b;
      await writeFile(f, buf);
    });
    await expectModelError(openCheckpoint(d5), 'MALFORMED_FILE', 'JSON');
  });

  it('a header length one byte short is refused, not loaded with every tensor shifted a byte', async () => {
    const dir = await corrupt('short-header', async (f) => {
      const buf = await readFile(f);
      const n = Number(buf.readBigUInt64LE(0));
      // Pad the JSON with spaces so that one byte less still parses, as a real file's would.
      const json = Buffer.from(
        `${buf
          .subarray(8, 8 + n)
          .toString('utf8')
          .trimEnd()}        `,
      );
      const length = Buffer.alloc(8);
      length.writeBigUInt64LE(BigInt(json.byteLength - 1));
      await writeFile(f, Buffer.concat([length, json, buf.subarray(8 + n)]));
    });
    await expectModelError(
      openCheckpoint(dir),
      'MALFORMED_FILE',
      'the last 1 bytes of the file belong to no tensor (is the header length right?)',
    );
  });

  it('data that no tensor covers (a gap, trailing bytes) is MALFORMED_FILE', async () => {
    const gap = await corrupt('gap', (f) =>
      rewriteHeader(f, (h) => {
        delete h['model.layers.0.input_layernorm.weight'];
      }),
    );
    await expectModelError(openCheckpoint(gap), 'MALFORMED_FILE', 'belong to no tensor');
    const trailing = await corrupt('trailing', async (f) => {
      await writeFile(f, Buffer.concat([await readFile(f), Buffer.alloc(64)]));
    });
    await expectModelError(
      openCheckpoint(trailing),
      'MALFORMED_FILE',
      'the last 64 bytes of the file belong to no tensor',
    );
  });

  it('a layer count beyond the tensors present (num_hidden_layers: 1e9) is INVALID_CONFIG at once', async () => {
    for (const layers of [1e9, 4000]) {
      const dir = join(root, `layers-${layers}`);
      await writeRandomCheckpoint(dir, config, 3);
      const json = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8'));
      await writeFile(
        join(dir, 'config.json'),
        JSON.stringify({ ...json, num_hidden_layers: layers }),
      );
      await expectModelError(
        openCheckpoint(dir),
        'INVALID_CONFIG',
        layers === 1e9
          ? '"num_hidden_layers" is 1000000000, above the limit of 4096'
          : 'the config has 4000 layers but the checkpoint holds only 21 tensors',
      );
    }
  });

  it('a missing model file or config is IO', async () => {
    const dir = await corrupt('nofile', (f) => rm(f));
    await expectModelError(openCheckpoint(dir), 'IO', 'model.safetensors');
    await expectModelError(openCheckpoint(join(root, 'does-not-exist')), 'IO');
  });
});
