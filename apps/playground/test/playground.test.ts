// The playground built by Vite, served from loopback and driven in headless Chromium like a
// person would: two chats sharing a system prompt, the KV cache drawn while they run and after,
// checked against the engine's own statistics and block tables; a screenshot of the result.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium } from '@kvasir/test-utils/chromium';
import type { WebEngine, WebKvSnapshot } from '@kvasir/web';
import type { Browser, Page } from 'playwright-core';
import { build } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StaticSite, serveStatic } from './static-site.js';

interface Playground {
  ready: Promise<void>;
  engine: WebEngine;
  refresh(): Promise<{ snapshot: WebKvSnapshot; drawn: Record<string, number> }>;
  idle(): Promise<void>;
}
declare const playground: Playground;

const app = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the screenshots go (gitignored): the test's output. */
const OUTPUT = join(app, 'test-output');
const VIEWPORT = { width: 1440, height: 960 };

let out: string;
let site: StaticSite;
let browser: Browser;
let page: Page;
const logs: string[] = [];

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'kvasir-playground-'));
  await build({ root: app, logLevel: 'error', build: { outDir: out, emptyOutDir: true } });
  site = await serveStatic(out);
  browser = await launchChromium({ webgpu: false });
  page = await browser.newPage({ viewport: VIEWPORT });
  page.on('console', (m) => logs.push(m.text()));
  page.on('pageerror', (e) => logs.push(e.message));
  await page.goto(`${site.origin}/`);
  await page.waitForFunction(() => 'playground' in globalThis);
  await page.evaluate(() => playground.ready);
  const state = await page.getAttribute('#model-status', 'data-state');
  if (state !== 'ready') {
    throw new Error(`${await page.textContent('#model-status')}\n${logs.join('\n')}`);
  }
}, 300_000);

afterAll(async () => {
  await browser?.close();
  await site?.close();
  if (out) await rm(out, { recursive: true, force: true });
});

/**
 * A fresh snapshot drawn, and what the page drew from it: the grid's counts and cells, and each
 * block table row. One evaluation: the page polls and redraws while chats run, and a redraw from
 * a later snapshot could land between a refresh and a separate read of the DOM (a worker's reply
 * is a task; the read here runs in the microtasks right after this refresh drew).
 */
function refreshAndRead(p: Page) {
  return p.evaluate(async () => {
    const { snapshot } = await playground.refresh();
    const grid = document.querySelector<HTMLElement>('#kv-grid')!;
    const cells = [...grid.querySelectorAll<HTMLElement>('.block')];
    return {
      snapshot,
      counts: {
        free: Number(grid.dataset.free),
        used: Number(grid.dataset.used),
        shared: Number(grid.dataset.shared),
        cached: Number(grid.dataset.cached),
      },
      cells: cells.map((c) => ({ state: c.dataset.state!, ref: Number(c.dataset.ref) })),
      tables: [...document.querySelectorAll<HTMLElement>('#kv-tables .table-row')].map((r) => ({
        id: r.dataset.request!,
        blocks: r.dataset.blocks ? r.dataset.blocks.split(',').map(Number) : [],
      })),
      panes: [...document.querySelectorAll<HTMLElement>('.pane')].map((p) => ({
        request: p.dataset.request,
        status: p.dataset.status,
        text: p.querySelector('.assistant')?.textContent ?? '',
      })),
      events: [...document.querySelectorAll('#kv-events li')].map((li) => li.textContent ?? ''),
    };
  });
}

describe('apps/playground in chromium', () => {
  it('loads kvasir-mini and draws an empty pool as the engine counts it', async () => {
    const drawn = await refreshAndRead(page);
    const { snapshot } = drawn;
    expect(snapshot.refCounts.length).toBeGreaterThan(8);
    expect(drawn.cells.length).toBe(snapshot.refCounts.length);
    expect(drawn.counts).toEqual({
      free: snapshot.stats.blocks.total,
      used: 0,
      shared: 0,
      cached: 0,
    });
    expect(await page.getAttribute('#model-status', 'data-backend')).toBe('wasm');
  });

  it("two chats: the drawn pool and block tables are the engine's, live and after; a screenshot", async () => {
    await page.fill('#max-tokens', '320');
    await page.fill('#temperature', '0');
    await page.check('#ignore-eos');
    // The first chat computes the system prompt; the second, sent while it runs, reuses it.
    await page.click('.pane[data-pane="0"] footer button');
    await page.waitForSelector('.pane[data-pane="0"][data-request]');
    await page.click('.pane[data-pane="1"] footer button');
    await page.waitForSelector('.pane[data-pane="1"][data-request]');
    const during = await refreshAndRead(page);
    const live = during.snapshot;
    await mkdir(OUTPUT, { recursive: true });
    await writeFile(join(OUTPUT, 'playground-live.png'), await page.screenshot());
    const [a, b] = during.panes;
    // Drawn from the same snapshot the engine's stats were read with: counts agree.
    expect(during.counts.used).toBe(live.stats.blocks.used);
    expect(during.counts.cached).toBe(live.stats.blocks.cached);
    expect(during.counts.free).toBe(live.stats.blocks.free);
    expect(during.cells.map((c) => c.ref)).toEqual(live.refCounts);
    // Each live chat's row is its request's block table, the system prompt's blocks shared.
    const tableOf = (id: string) => during.tables.find((t) => t.id === id)?.blocks;
    const engineTable = (id: string) => live.requests.find((r) => r.id === id)?.seqs[0]?.blocks;
    const liveIds = live.requests.map((r) => r.id).sort();
    expect(during.tables.map((t) => t.id).sort()).toEqual(liveIds);
    for (const id of liveIds) expect(tableOf(id)).toEqual(engineTable(id));
    // Both run to 320 tokens (seconds): both are live, the system prompt's blocks in both tables.
    expect(liveIds).toEqual([a!.request!, b!.request!].sort());
    const shared = tableOf(a!.request!)!.filter((x) => tableOf(b!.request!)!.includes(x));
    expect(shared.length).toBeGreaterThan(0);
    for (const x of shared) expect(during.cells[x]!.state).toBe('shared');
    expect(during.counts.shared).toBe(shared.length);
    expect(during.events.some((e) => /Chat 2: prefix hit, \d+ prompt tokens reused/.test(e))).toBe(
      true,
    );

    await page.evaluate(() => playground.idle());
    const after = await refreshAndRead(page);
    const ended = after.snapshot;
    const stats = await page.evaluate(() => playground.engine.stats());
    // Nothing runs any more: the engine's counts now are the ones drawn.
    expect(ended.stats.blocks).toEqual(stats.blocks);
    expect(after.panes.slice(0, 2).map((p) => p.status)).toEqual(['done', 'done']);
    for (const p of after.panes.slice(0, 2)) expect(p.text.length).toBeGreaterThan(0);
    expect(after.tables).toEqual([]);
    expect(after.counts).toEqual({
      free: stats.blocks.free,
      used: stats.blocks.used,
      shared: 0,
      cached: stats.blocks.cached,
    });
    expect(stats.blocks.used).toBe(0);
    expect(stats.blocks.cached).toBeGreaterThan(0);

    const shot = await page.screenshot({ animations: 'disabled' });
    await writeFile(join(OUTPUT, 'playground-two-chats.png'), shot);
    // PNG's IHDR: the viewport's size. Non-blank: the page itself counts the shot's colours.
    expect(shot.readUInt32BE(16)).toBe(VIEWPORT.width);
    expect(shot.readUInt32BE(20)).toBe(VIEWPORT.height);
    const colours = await page.evaluate(async (b64) => {
      const img = await createImageBitmap(
        await (await fetch(`data:image/png;base64,${b64}`)).blob(),
      );
      const canvas = new OffscreenCanvas(img.width, img.height);
      const ctx = canvas.getContext('2d')!;
      ctx.drawImage(img, 0, 0);
      const data = ctx.getImageData(0, 0, img.width, img.height).data;
      const seen = new Set<number>();
      for (let i = 0; i < data.length; i += 4 * 7)
        seen.add((data[i]! << 16) | (data[i + 1]! << 8) | data[i + 2]!);
      return seen.size;
    }, shot.toString('base64'));
    expect(colours).toBeGreaterThan(50);
    // Stable dimensions on a second shot (pixels may differ by antialiasing: no golden).
    const again = await page.screenshot({ animations: 'disabled' });
    expect([again.readUInt32BE(16), again.readUInt32BE(20)]).toEqual([
      VIEWPORT.width,
      VIEWPORT.height,
    ]);
  }, 300_000);

  it('after a reload, the system prompt comes back from the OPFS tier and the page says so', async () => {
    // The blocks are written behind the steps that filled them: wait until they are there.
    await page.waitForFunction(
      async () => ((await playground.engine.stats()).opfs?.store.entries ?? 0) > 0,
    );
    await page.reload();
    await page.waitForFunction(() => 'playground' in globalThis);
    await page.evaluate(() => playground.ready);
    await page.click('.pane[data-pane="0"] footer button');
    await page.waitForSelector('.pane[data-pane="0"][data-status="done"]');
    await page.evaluate(() => playground.idle());
    const { snapshot } = await page.evaluate(() => playground.refresh());
    const imported = snapshot.stats.opfs!.prefix.importedBlocks;
    expect(imported).toBeGreaterThan(0);
    expect(await page.textContent('[data-counter="imported"] b')).toBe(String(imported));
    expect(await page.textContent('.pane[data-pane="0"] .stats')).toMatch(
      /[1-9]\d* prompt tokens from cache/,
    );
    const events = await page.$$eval('#kv-events li', (lis) => lis.map((li) => li.textContent));
    expect(events.some((e) => /read back from OPFS/.test(e ?? ''))).toBe(true);
    expect(events.some((e) => /Chat 1: prefix hit/.test(e ?? ''))).toBe(true);
  }, 300_000);
});
