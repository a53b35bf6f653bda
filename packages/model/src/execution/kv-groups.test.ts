import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LoadModelOptions, loadModel, type Model } from '../model/model.js';
import { GEMMA3_FIXTURE } from '../testing/arch-fixtures.js';
import { tempCheckpoint } from '../testing/model.js';
import type { ForwardPlan } from './forward-plan.js';
import type { KvFormatName } from './kv-cache.js';
import type { KvGroups } from './kv-groups.js';

// tiny-gemma3: layers 0-4 slide (window 20), layer 5 is global. One layer per page (the
// global kind has one layer): group 0 = layer 5, groups 1-5 = layers 0-4, one shared buffer.
// A small random vocabulary: the fixture takes its own from the tokenizer.
const config = { ...GEMMA3_FIXTURE.config, vocabSize: 272 };
const WINDOW = 20;
const BS = 4;
const GROUPS: KvGroups = {
  layersPerGroup: 1,
  layerGroup: [1, 2, 3, 4, 5, 0],
  layerSlot: [0, 0, 0, 0, 0, 0],
  windows: [null, WINDOW, WINDOW, WINDOW, WINDOW, WINDOW],
};
const NUM_GROUPS = GROUPS.windows.length;

/** A seeded token stream (xorshift), ids inside the vocabulary. */
function tokenStream(seed: number, n: number): number[] {
  let x = seed;
  return Array.from({ length: n }, () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % config.vocabSize;
  });
}

/**
 * The test's page allocator for the grouped model: per sequence one table per group; before a
 * step a sliding group releases the pages wholly before the first query's window (a -1 hole),
 * pages are reference counted (a fork shares them), a page whose count reaches 0 is poisoned with
 * NaN on the device and goes on top of the free stack, so the next allocation reuses it at
 * once, written by another group's layer.
 */
class Pages {
  readonly free: number[];
  readonly refs: number[];
  readonly tables = new Map<string, number[][]>();
  readonly released: number[] = [];
  constructor(numPages: number) {
    this.free = Array.from({ length: numPages }, (_, i) => numPages - 1 - i);
    this.refs = new Array(numPages).fill(0);
  }
  fork(parent: string, child: string): void {
    const t = this.tables.get(parent) as number[][];
    for (const g of t) for (const p of g) if (p >= 0) this.refs[p]!++;
    this.tables.set(
      child,
      t.map((g) => [...g]),
    );
  }
  /** Releases out-of-window pages, grows every table to `len` tokens; the pages released. */
  step(seq: string, first: number, len: number): void {
    const t = this.tables.get(seq) ?? Array.from({ length: NUM_GROUPS }, () => [] as number[]);
    this.tables.set(seq, t);
    t.forEach((table, g) => {
      const w = GROUPS.windows[g];
      const out = w === null ? 0 : Math.max(0, Math.floor((first + 1 - (w as number)) / BS));
      for (let i = 0; i < Math.min(out, table.length); i++) {
        const p = table[i] as number;
        if (p < 0) continue;
        table[i] = -1;
        if (--this.refs[p]! === 0) {
          this.free.push(p);
          this.released.push(p);
        }
      }
      while (table.length * BS < len) {
        const p = this.free.pop();
        if (p === undefined) throw new Error('test pages exhausted');
        this.refs[p] = 1;
        table.push(p);
      }
    });
  }
}

interface Row {
  readonly seq: string;
  readonly tokens: readonly number[];
  readonly start: number;
}

/** The plan of `rows` over per-row tables: one table per group (grouped) or one (whole). */
function plan(rows: readonly Row[], tablesOf: (seq: string) => number[][]): ForwardPlan {
  const tokenIds: number[] = [];
  const positions: number[] = [];
  const slots: number[][] = tablesOf(rows[0]!.seq).map(() => []);
  const out: ForwardPlan['rows'][number][] = [];
  const logits: number[] = [];
  for (const r of rows) {
    const tables = tablesOf(r.seq);
    out.push({
      queryStart: tokenIds.length,
      queryLen: r.tokens.length,
      contextLen: r.start + r.tokens.length,
      blockTable: tables[0] as number[],
    });
    r.tokens.forEach((tok, i) => {
      const p = r.start + i;
      tokenIds.push(tok);
      positions.push(p);
      tables.forEach((t, g) => {
        slots[g]!.push((t[Math.floor(p / BS)] as number) * BS + (p % BS));
      });
    });
    logits.push(tokenIds.length - 1);
  }
  return {
    tokenIds: Int32Array.from(tokenIds),
    positions: Int32Array.from(positions),
    slotMapping: Int32Array.from(slots[0] as number[]),
    rows: out,
    logitsIndices: Int32Array.from(logits),
    ...(slots.length > 1
      ? {
          kvGroups: slots.slice(1).map((s, i) => ({
            slotMapping: Int32Array.from(s),
            blockTables: rows.map((r) => tablesOf(r.seq)[i + 1] as number[]),
          })),
        }
      : {}),
  };
}

const CASES: ['cpu' | 'wasm', KvFormatName][] = [
  ['cpu', 'f32'],
  ['cpu', 'f16'],
  ['cpu', 'int8'],
  ['cpu', 'int8-h8'],
  ['cpu', 'fp8-e4m3'],
  ['cpu', 'fp8-e5m2'],
  ['cpu', 'int4-g32'],
  ['cpu', 'int4-g32-h32'],
  ['wasm', 'f32'],
  ['wasm', 'f16'],
  ['wasm', 'int8'],
  ['wasm', 'fp8-e4m3'],
  ['wasm', 'int4-g32'],
];

describe.each(CASES)('KV cache groups on %s, %s KV', (backend, kvFormat) => {
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  const models: Model[] = [];
  const load = async (opts: Partial<LoadModelOptions>) => {
    const m = await loadModel(ckpt.dir, {
      backend,
      kvFormat,
      blockSize: BS,
      numBlocks: 64,
      ...opts,
    });
    models.push(m);
    return m;
  };
  beforeAll(async () => {
    ckpt = await tempCheckpoint(config, 86);
  });
  afterAll(async () => {
    for (const m of models) await m.destroy();
    await ckpt?.cleanup();
  });

  it('gives the whole-cache logits bit for bit over five windows, with a fork, reusing poisoned released pages', async () => {
    const whole = await load({});
    // 6 groups × at most 7 pages of a row's window or its chunk, plus the global group's 25 ×2.
    const grouped = await load({ kvGroups: GROUPS, numBlocks: 120 });
    const pages = new Pages(120);
    const wholeTables = new Map<string, number[]>([['a', Array.from({ length: 25 }, (_, i) => i)]]);
    const a = tokenStream(7, 100);
    const b = tokenStream(11, 100);
    const nanPage = new Uint8Array(
      new Float32Array(grouped.kvBlockBytes / 4).fill(Number.NaN).buffer,
    );
    const run = async (rows: Row[]) => {
      for (const r of rows) pages.step(r.seq, r.start, r.start + r.tokens.length);
      // Every page released for this step is poisoned, also one reused at once by another
      // group (this step writes only its new tokens' slots there; the rest stays NaN).
      const stale = pages.released.splice(0);
      for (const p of stale) await grouped.writeBlocks([p], nanPage);
      const want = await whole.forward(plan(rows, (s) => [wholeTables.get(s) as number[]]));
      const got = await grouped.forward(plan(rows, (s) => pages.tables.get(s) as number[][]));
      expect(got.every(Number.isFinite)).toBe(true);
      expect(Array.from(got)).toEqual(Array.from(want));
      return stale.length;
    };
    // Prefill in chunks (30, then 7s), then decode: 100 tokens = five windows.
    let released = 0;
    released += await run([{ seq: 'a', tokens: a.slice(0, 30), start: 0 }]);
    for (let p = 30; p < 40; p += 5)
      released += await run([{ seq: 'a', tokens: a.slice(p, p + 5), start: p }]);
    // Fork at a block boundary: b shares a's pages (holes included) in every group.
    pages.fork('a', 'b');
    wholeTables.set('b', [
      ...wholeTables.get('a')!.slice(0, 10),
      ...Array.from({ length: 15 }, (_, i) => 30 + i),
    ]);
    for (let p = 40; p < 100; p++) {
      released += await run([
        { seq: 'a', tokens: [a[p] as number], start: p },
        { seq: 'b', tokens: [b[p] as number], start: p },
      ]);
    }
    // Sliding groups hold at most ceil(19 / 4) + 1 = 6 pages of a sequence; the rest went back.
    for (const seq of ['a', 'b']) {
      const t = pages.tables.get(seq) as number[][];
      expect(t[0]!.every((p) => p >= 0)).toBe(true);
      for (const g of t.slice(1)) expect(g.filter((p) => p >= 0).length).toBeLessThanOrEqual(6);
    }
    expect(released).toBeGreaterThan(50);
  });

  it('refuses a hole inside the window and a layout that does not match the layers', async () => {
    const grouped = await load({ kvGroups: GROUPS, numBlocks: 64 });
    const tables = Array.from({ length: NUM_GROUPS }, (_, g) =>
      Array.from({ length: 8 }, (_, i) => (g > 0 && i === 6 ? -1 : g * 8 + i)),
    );
    const bad = plan([{ seq: 'x', tokens: [1], start: 30 }], () => tables);
    await expect(grouped.forward(bad)).rejects.toMatchObject({
      code: 'INVALID_PLAN',
      message: expect.stringContaining('a hole inside the window'),
    });
    await expect(
      load({ kvGroups: { ...GROUPS, windows: [WINDOW, ...GROUPS.windows.slice(1)] } }),
    ).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringContaining('layer 5 attends over the whole context'),
    });
  });
});
