// The OPFS KV tier in headless chromium: prefix blocks written behind the cache survive a
// reload and reach another tab; a corrupt entry, or one of another model, is a miss with the
// same output.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type * as Kvasir from '../src/index.js';
import { launchChromium, startSite, type TestSite, writeTinyGguf } from './browser-harness.js';

declare const kvasir: typeof Kvasir;
declare const engine: Kvasir.WebEngine;
declare const encodeFrame: typeof import('@kvasir/offload/portable').encodeFrame;

const SYSTEM =
  'You are the assistant of a small library. Answer in one short sentence, name the shelf, ' +
  'and never invent a book that the catalogue does not list. Opening hours are nine to five.';

let root: string;
let site: TestSite;
let browser: Browser;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-opfs-'));
  const [tiny, other] = await Promise.all([
    writeTinyGguf(join(root, 'a'), 31),
    writeTinyGguf(join(root, 'b'), 32),
  ]);
  expect(other.byteLength).toBe(tiny.byteLength);
  site = await startSite(tiny, { '/other.gguf': other });
  browser = await launchChromium({ webgpu: false });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await site?.close();
  await rm(root, { recursive: true, force: true });
});

interface Answer {
  content: string;
  usage: Kvasir.Usage;
  stats: Kvasir.WebEngineStats;
}

/** Loads `model` in `page` (navigated there first unless `reload` is false), OPFS tier on. */
async function load(page: Page, options: Record<string, unknown> = {}, navigate = true) {
  if (navigate) await page.goto(`${site.origin}/coi/`);
  await page.waitForFunction(() => 'kvasir' in globalThis);
  return page.evaluate(async (o) => {
    const e = await kvasir.createEngine({
      model: 'tiny.gguf',
      worker: 'worker.js',
      threads: 2,
      opfs: true,
      ...o,
    });
    (globalThis as unknown as { engine: Kvasir.WebEngine }).engine = e;
    return { kvTier: e.kvTier, blockSize: e.model.blockSize };
  }, options);
}

/** The library chat (greedy), then the engine's statistics; `dispose` waits for OPFS writes. */
function ask(page: Page, dispose = true): Promise<Answer> {
  return page.evaluate(
    async ({ system, dispose }) => {
      const r = await engine.chat.completions.create({
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: 'Where are the atlases?' },
        ],
        max_tokens: 12,
        temperature: 0,
        ignore_eos: true,
      });
      // The blocks are written behind the steps that filled them: wait for the prompt's.
      const promptBlocks = Math.floor((r.usage.prompt_tokens - 1) / engine.model.blockSize);
      let stats = await engine.stats();
      for (let i = 0; i < 200 && (stats.opfs?.prefix.storedBlocks ?? 0) < promptBlocks; i++) {
        await new Promise((done) => setTimeout(done, 25));
        stats = await engine.stats();
      }
      if (dispose) await engine.dispose();
      return { content: r.choices[0]!.message.content ?? '', usage: r.usage, stats };
    },
    { system: SYSTEM, dispose },
  );
}

/** The block files of every namespace folder: `{ namespace: { name: size } }`. */
function opfsFiles(page: Page): Promise<Record<string, Record<string, number>>> {
  return page.evaluate(async () => {
    type Dir = FileSystemDirectoryHandle & {
      entries(): AsyncIterable<[string, FileSystemHandle]>;
    };
    const out: Record<string, Record<string, number>> = {};
    const base = (await (
      await navigator.storage.getDirectory()
    ).getDirectoryHandle('kvasir-kv')) as Dir;
    for await (const [ns, dir] of base.entries()) {
      out[ns] = {};
      for await (const [name, file] of (dir as Dir).entries()) {
        out[ns]![name] = (await (file as FileSystemFileHandle).getFile()).size;
      }
    }
    return out;
  });
}

const fullBlocks = (a: Answer, blockSize: number) =>
  Math.floor((a.usage.prompt_tokens - 1) / blockSize) * blockSize;

describe('the OPFS KV tier in chromium', () => {
  let context: BrowserContext;
  let cold: Answer;
  let blockSize: number;

  beforeAll(async () => {
    context = await browser.newContext();
  });
  afterAll(async () => {
    await context?.close();
  });

  it('writes a chat’s full prompt blocks behind the cache; a reload and a new tab find them (cached_tokens > 0, the same tokens)', async () => {
    const page = await context.newPage();
    const first = await load(page);
    blockSize = first.blockSize;
    expect(first.kvTier).toMatchObject({ opfs: true, maxBytes: 256 * 1024 * 1024 });
    expect(first.kvTier.reason).toMatch(/\(0 there for this model now\)/);
    cold = await ask(page);
    const blocks = fullBlocks(cold, blockSize) / blockSize;
    expect(blocks).toBeGreaterThanOrEqual(3);
    expect(cold.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(cold.stats.opfs!.prefix.storedBlocks).toBeGreaterThanOrEqual(blocks);
    const files = Object.values(await opfsFiles(page));
    expect(files).toHaveLength(1);
    expect(Object.keys(files[0]!).length).toBeGreaterThanOrEqual(blocks);

    await page.reload();
    const again = await load(page, {}, false);
    expect(again.kvTier.reason).toMatch(/[1-9]\d* there for this model now/);
    const warm = await ask(page);
    expect(warm.usage.prompt_tokens_details.cached_tokens).toBe(fullBlocks(cold, blockSize));
    expect(warm.content).toBe(cold.content);
    expect(warm.usage.completion_tokens).toBe(cold.usage.completion_tokens);
    expect(warm.stats.opfs!.prefix.importedBlocks).toBe(blocks);
    expect(warm.stats.opfs!.store).toMatchObject({ corrupt: 0, foreign: 0 });

    const tab = await context.newPage();
    await load(tab);
    const other = await ask(tab);
    expect(other.usage.prompt_tokens_details.cached_tokens).toBe(fullBlocks(cold, blockSize));
    expect(other.content).toBe(cold.content);
    await tab.close();
    await page.close();
  }, 240_000);

  it('a corrupt entry is a miss with the same output, and is written again whole', async () => {
    const page = await context.newPage();
    await page.goto(`${site.origin}/coi/`);
    // Flip one payload byte of every block file (the header stays valid).
    const flipped = await page.evaluate(async () => {
      type Dir = FileSystemDirectoryHandle & {
        entries(): AsyncIterable<[string, FileSystemHandle]>;
      };
      const base = (await (
        await navigator.storage.getDirectory()
      ).getDirectoryHandle('kvasir-kv')) as Dir;
      let n = 0;
      for await (const [, dir] of base.entries()) {
        for await (const [, handle] of (dir as Dir).entries()) {
          const file = handle as FileSystemFileHandle;
          const bytes = new Uint8Array(await (await file.getFile()).arrayBuffer());
          bytes[64 + 100] = (bytes[64 + 100] as number) ^ 0x40;
          const w = await file.createWritable();
          await w.write(bytes);
          await w.close();
          n++;
        }
      }
      return n;
    });
    expect(flipped).toBeGreaterThanOrEqual(3);
    await load(page, {}, false);
    const after = await ask(page);
    expect(after.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(after.content).toBe(cold.content);
    expect(after.stats.opfs!.store.corrupt).toBeGreaterThanOrEqual(1);
    expect(after.stats.opfs!.prefix.importedBlocks).toBe(0);
    // The blocks were computed again and written over the corrupt files: the next load finds them.
    await page.reload();
    await load(page, {}, false);
    const healed = await ask(page);
    expect(healed.usage.prompt_tokens_details.cached_tokens).toBe(fullBlocks(cold, blockSize));
    expect(healed.content).toBe(cold.content);
    await page.close();
  }, 240_000);

  it("another model's block under this model's name is a miss (foreign), with the same output", async () => {
    const fresh = await browser.newContext();
    try {
      const page = await fresh.newPage();
      await load(page);
      expect((await ask(page)).content).toBe(cold.content);
      const [ours] = Object.keys(await opfsFiles(page));
      await page.reload();
      await load(page, { model: 'other.gguf' }, false);
      const theirs = await ask(page);
      expect(theirs.content).not.toBe(cold.content);
      // The other model's blocks, each re-framed (valid header and checksum, its own namespace)
      // under the key of one of this model's blocks, written over that block's file.
      const swapped = await page.evaluate(async (ours) => {
        type Dir = FileSystemDirectoryHandle & {
          entries(): AsyncIterable<[string, FileSystemHandle]>;
        };
        const base = (await (
          await navigator.storage.getDirectory()
        ).getDirectoryHandle('kvasir-kv')) as Dir;
        const dst = (await base.getDirectoryHandle(ours)) as Dir;
        const mine: string[] = [];
        for await (const [name] of dst.entries()) mine.push(name);
        const theirs: { ns: string; payload: Uint8Array }[] = [];
        for await (const [ns, src] of base.entries()) {
          if (ns === ours) continue;
          for await (const [, handle] of (src as Dir).entries()) {
            const bytes = new Uint8Array(
              await (await (handle as FileSystemFileHandle).getFile()).arrayBuffer(),
            );
            theirs.push({ ns, payload: bytes.subarray(64) });
          }
        }
        for (const [i, name] of mine.entries()) {
          const t = theirs[i % theirs.length]!;
          const frame = encodeFrame(t.ns, name.replace('.kvb', ''), t.payload);
          const w = await (await dst.getFileHandle(name)).createWritable();
          await w.write(frame as Uint8Array<ArrayBuffer>);
          await w.close();
        }
        return mine.length;
      }, ours!);
      expect(swapped).toBeGreaterThanOrEqual(3);
      await page.reload();
      await load(page, {}, false);
      const after = await ask(page);
      expect(after.content).toBe(cold.content);
      expect(after.stats.opfs!.store.foreign).toBeGreaterThanOrEqual(1);
      expect(after.usage.prompt_tokens_details.cached_tokens).toBe(0);
    } finally {
      await fresh.close();
    }
  }, 240_000);

  it('keeps within maxBytes (evicting), and refuses a bad budget naming it', async () => {
    const fresh = await browser.newContext();
    try {
      const page = await fresh.newPage();
      const maxBytes = 2 * (64 + 2 * 2 * 2 * 16 * 16 * 4) + 10;
      await load(page, { opfs: { maxBytes } });
      const answer = await ask(page);
      expect(answer.stats.opfs!.store.evictions).toBeGreaterThan(0);
      const files = Object.values(await opfsFiles(page))[0]!;
      const sizes = Object.values(files);
      expect(sizes.length).toBe(2);
      expect(sizes.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(maxBytes);
      const refused = await page.evaluate(() =>
        kvasir
          .createEngine({ model: 'tiny.gguf', worker: 'worker.js', opfs: { maxBytes: -1 } })
          .then(
            () => 'loaded',
            (e: Kvasir.WebEngineError) => `${e.code} ${String(e.details?.param)}: ${e.message}`,
          ),
      );
      expect(refused).toMatch(/^INVALID_REQUEST opfs\.maxBytes: opfs\.maxBytes must be a positive/);
    } finally {
      await fresh.close();
    }
  }, 240_000);
});
