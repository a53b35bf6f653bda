import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelError } from '../../errors.js';
import { loadModel, type Model } from '../../model/model.js';
import { seqPlan, tempCheckpoint, tinyConfig } from '../../testing/model.js';
import { KERNELS_RELAXED_WASM_BASE64, KERNELS_WASM_BASE64 } from './kernels-wasm.generated.js';
import { type WasmMemory, wasmApi } from './wasm-api.js';
import { wasmFeatures } from './wasm-module.js';
import { createWasmRuntime } from './wasm-runtime.js';
import { unsharedMemoryImport } from './wasm-unshared.js';

const wasm = wasmApi() as NonNullable<ReturnType<typeof wasmApi>>;
const bytes = (b64: string) => new Uint8Array(Buffer.from(b64, 'base64'));
const memory = (shared: boolean) => new wasm.Memory({ initial: 32, maximum: 65536, shared });
/** The name of what instantiating `module` over `memory` throws, or 'linked'. */
function link(module: Uint8Array, memory: WasmMemory): string {
  try {
    new wasm.Instance(new wasm.Module(module), { env: { memory } });
    return 'linked';
  } catch (e) {
    return (e as Error).name;
  }
}
const builds: [string, string][] = [
  ['plain', KERNELS_WASM_BASE64],
  ...(wasmFeatures().relaxedSimd
    ? [['relaxed', KERNELS_RELAXED_WASM_BASE64] as [string, string]]
    : []),
];

/** Unsigned LEB128. */
function leb(n: number): number[] {
  const out: number[] = [];
  do {
    out.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0));
    n >>>= 7;
  } while (n > 0);
  return out;
}

/** A module of `imports` (before it, one function type) ending in `(import "env" "memory" …)`. */
function moduleWith(imports: readonly number[][], memoryFlag: number): Uint8Array {
  const str = (s: string) => [s.length, ...Buffer.from(s)];
  const body = [
    ...leb(imports.length + 1),
    ...imports.flat(),
    ...str('env'),
    ...str('memory'),
    2,
    memoryFlag,
    1,
    ...(memoryFlag & 1 ? [2] : []),
  ];
  return Uint8Array.from([
    ...[0, 0x61, 0x73, 0x6d, 1, 0, 0, 0],
    ...[1, 4, 1, 0x60, 0, 0], // type section: () -> ()
    ...[2, ...leb(body.length), ...body],
  ]);
}

const name = fc.string({ minLength: 0, maxLength: 12, unit: fc.constantFrom('a', 'b', 'x', '_') });
const anImport = fc.oneof(
  fc
    .tuple(name, name)
    .map(([m, f]) => [m.length, ...Buffer.from(m), f.length, ...Buffer.from(f), 0, 0]),
  fc
    .tuple(name, name)
    .map(([m, f]) => [m.length, ...Buffer.from(m), f.length, ...Buffer.from(f), 3, 0x7f, 0]),
  fc
    .tuple(name, name, fc.integer({ min: 0, max: 100 }))
    .map(([m, f, min]) => [
      m.length,
      ...Buffer.from(m),
      f.length,
      ...Buffer.from(f),
      1,
      0x70,
      0,
      min,
    ]),
);

describe('the kernels over an unshared memory (one thread, no cross-origin isolation)', () => {
  it.each(builds)(
    'the %s build links only with a shared memory; unshared, only with an unshared one',
    (_, b64) => {
      const unshared = unsharedMemoryImport(bytes(b64));
      expect(link(bytes(b64), memory(false))).toBe('LinkError');
      expect(link(bytes(b64), memory(true))).toBe('linked');
      expect(link(unshared, memory(true))).toBe('LinkError');
      expect(link(unshared, memory(false))).toBe('linked');
    },
  );

  it('changes one byte, the memory import flag, whatever imports come before it', () => {
    fc.assert(
      fc.property(fc.array(anImport, { maxLength: 12 }), (imports) => {
        const shared = moduleWith(imports, 3);
        const out = unsharedMemoryImport(shared);
        expect(wasm.validate(out)).toBe(true);
        const changed = [...out.keys()].filter((i) => out[i] !== shared[i]);
        expect(changed).toEqual([out.length - 3]);
        expect([shared[out.length - 3], out[out.length - 3]]).toEqual([3, 1]);
        // The input is left as it was.
        expect(shared).toEqual(moduleWith(imports, 3));
      }),
      { numRuns: 100 },
    );
  }, 60_000);

  it('refuses a module without a shared memory import, naming why', () => {
    for (const m of [moduleWith([], 1), moduleWith([], 0)]) {
      let error: unknown;
      try {
        unsharedMemoryImport(m);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ModelError);
      expect(error).toMatchObject({ code: 'BACKEND', message: /imports no shared memory/ });
    }
  });

  it('a one-thread runtime runs over an unshared memory, threads over a shared one', async () => {
    const one = await createWasmRuntime({ threads: 1, reserveBytes: 1 << 20 });
    const two = await createWasmRuntime({ threads: 2, reserveBytes: 1 << 20 });
    try {
      expect(one.memory).toBe('unshared');
      expect(Object.prototype.toString.call(one.arena.memory.buffer)).toBe('[object ArrayBuffer]');
      expect(two.memory).toBe('shared');
      expect(Object.prototype.toString.call(two.arena.memory.buffer)).toBe(
        '[object SharedArrayBuffer]',
      );
    } finally {
      await one.close();
      await two.close();
    }
  });
});

describe('one unshared thread against two shared ones, across memory growth', () => {
  const BLOCK = 16;
  // Past the step buffers the runtime reserves (64 tokens): the memory grows mid-run, which
  // detaches an unshared memory's views (the KV cache's, the program's).
  const PROMPT = Array.from({ length: 150 }, (_, i) => (i * 37 + 11) % 272);
  const TABLE = Array.from({ length: 12 }, (_, i) => 20 - i);
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  const models: Model[] = [];
  beforeAll(async () => {
    ckpt = await tempCheckpoint(tinyConfig(), 77);
  });
  afterAll(async () => {
    for (const m of models) await m.destroy();
    await ckpt?.cleanup();
  });

  async function run(threads: number) {
    const m = await loadModel(ckpt.dir, {
      backend: 'wasm',
      threads,
      numBlocks: 24,
      blockSize: BLOCK,
      kvFormat: 'f32',
      weightDtype: 'f32',
    });
    models.push(m);
    const logits = [await m.forward(seqPlan(PROMPT, 0, TABLE, BLOCK, 'all'))];
    for (let s = 0; s < 8; s++) {
      logits.push(await m.forward(seqPlan([s + 3], PROMPT.length + s, TABLE, BLOCK, 'last')));
    }
    const blocks = await m.readBlocks(TABLE.slice(0, 10));
    // A block written back through the cache's views lands where the kernels read it.
    await m.writeBlocks([3], blocks.subarray(0, m.kvBlockBytes));
    const again = await m.readBlocks([3]);
    return { logits, blocks, again };
  }

  it('gives bit-identical logits and KV blocks', async () => {
    const one = await run(1);
    const two = await run(2);
    expect(one.logits).toEqual(two.logits);
    expect(one.blocks).toEqual(two.blocks);
    expect(one.again).toEqual(one.blocks.subarray(0, one.again.length));
    expect(one.blocks.some((b) => b !== 0)).toBe(true);
  }, 120_000);
});
