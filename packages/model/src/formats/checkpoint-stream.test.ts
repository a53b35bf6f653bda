import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import {
  createLoadProgress,
  type LoadProgressEvent,
  streamCheckpoint,
} from './checkpoint-stream.js';
import { openCheckpoint } from './open-checkpoint.js';
import { writeRandomCheckpoint } from './random-checkpoint.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-progress-'));
  await writeRandomCheckpoint(
    dir,
    makeModelConfig({
      hiddenSize: 32,
      intermediateSize: 64,
      numLayers: 2,
      numHeads: 4,
      numKvHeads: 1,
      vocabSize: 300,
    }),
    2,
  );
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('streamCheckpoint', () => {
  it('streams every tensor in bounded chunks and reports monotone progress to the callback', async () => {
    const r = await openCheckpoint(dir);
    const events: LoadProgressEvent[] = [];
    const stream = new PassThrough() as unknown as NodeJS.WriteStream;
    try {
      const seen = new Map<string, Uint8Array[]>();
      for await (const c of streamCheckpoint(r, {
        maxChunkBytes: 4096,
        progress: createLoadProgress({ onProgress: (e) => events.push(e), stream, bar: false }),
      })) {
        expect(c.bytes.byteLength).toBeLessThanOrEqual(4096);
        const parts = seen.get(c.info.name) ?? [];
        expect(c.offset).toBe(parts.reduce((a, p) => a + p.byteLength, 0));
        parts.push(c.bytes);
        seen.set(c.info.name, parts);
      }
      expect(seen.size).toBe(r.tensors.size);
      for (const [name, parts] of seen) {
        expect(Buffer.concat(parts).equals(Buffer.from(await r.readTensorBytes(name)))).toBe(true);
      }
      for (let i = 1; i < events.length; i++)
        expect(events[i]!.loadedBytes).toBeGreaterThan(events[i - 1]!.loadedBytes);
      const last = events.at(-1)!;
      expect(last.loadedBytes).toBe(r.totalBytes);
      expect(last.totalBytes).toBe(r.totalBytes);
      expect(last.tensorsDone).toBe(r.tensors.size);
    } finally {
      await r.close();
    }
  });
});

describe('createLoadProgress', () => {
  it('draws a cli-progress bar on the given stream when asked', () => {
    const out: string[] = [];
    const stream = new PassThrough();
    stream.on('data', (d: Buffer) => out.push(d.toString()));
    Object.assign(stream, {
      columns: 120,
      cursorTo: () => true,
      clearLine: () => true,
      moveCursor: () => true,
    });
    const p = createLoadProgress({
      stream: stream as unknown as NodeJS.WriteStream,
      bar: true,
      label: 'weights',
    });
    p.start(2 * 1048576, 2);
    p.advance('a', 1048576, true);
    p.advance('b', 1048576, true);
    p.stop();
    stream.end();
    expect(out.join('')).toContain('weights');
  });
});
