import { createServer, type Server } from 'node:http';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KvasirAppError } from '../errors.js';
import { loadWithProgress } from './bench.js';

/** A terminal-like stream: cli-progress draws only on a TTY. */
class FakeTerminal extends Writable {
  readonly isTTY = true;
  readonly columns = 200;
  text = '';
  override _write(chunk: Buffer, _enc: string, done: () => void): void {
    this.text += chunk.toString();
    done();
  }
  cursorTo(_x: number, _y?: number, cb?: () => void): boolean {
    cb?.();
    return true;
  }
  moveCursor(_dx: number, _dy: number, cb?: () => void): boolean {
    cb?.();
    return true;
  }
  clearLine(_dir: number, cb?: () => void): boolean {
    cb?.();
    return true;
  }
  /** Each frame the bar drew, escape sequences removed. */
  frames(): string[] {
    return (
      this.text
        // biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI escapes
        .replace(/\x1b(?:\[[0-9;?]*[A-Za-z]|[78])/g, '\n')
        .split(/[\r\n]+/)
        .map((f) => f.trim())
        .filter((f) => f.length > 0)
    );
  }
}

// An OpenAI-style streaming completion server that answers each request at once.
let server: Server;
let url: string;
beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, text: 'x' }] })}\n\n`);
      res.write(
        `data: ${JSON.stringify({ choices: [], usage: { completion_tokens: 1, prompt_tokens: 2 } })}\n\n`,
      );
      res.end('data: [DONE]\n\n');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const base = {
  mode: 'closed' as const,
  concurrency: 2,
  prompts: ['hello'],
  maxTokens: 1,
};

describe('kvasir bench progress bar', () => {
  it('counts requests toward --max-requests: empty at the start, full at the end', async () => {
    const term = new FakeTerminal();
    const report = await loadWithProgress(
      'concurrency 2',
      { ...base, url, durationSec: 60, maxRequests: 6 },
      true,
      term,
    );
    expect(report.completed).toBe(6);
    const frames = term.frames();
    expect(frames[0]).toMatch(/^concurrency 2 \[░+\] 0\/6 requests, 0 failed, 0s \(at most 60s\)$/);
    expect(frames.at(-1)).toMatch(/\[█+\] 6\/6 requests, 0 failed/);
  });

  it('without --max-requests, fills with elapsed seconds of the duration (not elapsed/elapsed)', async () => {
    const term = new FakeTerminal();
    await loadWithProgress('concurrency 2', { ...base, url, durationSec: 1 }, true, term);
    const frames = term.frames();
    expect(frames[0]).toMatch(/^concurrency 2 \[░+\] 0s\/1s, 0 done, 0 failed$/);
    expect(frames.at(-1)).toMatch(/\[█+\] 1s\/1s, \d+ done, 0 failed$/);
  });

  it('refuses a load that would send nothing or never end', async () => {
    for (const bad of [
      { concurrency: 0 },
      { concurrency: 1.5 },
      { durationSec: 0 },
      { maxRequests: 0 },
      { prompts: [] },
      { mode: 'rate' as const, ratePerSec: -1 },
    ]) {
      const error = await loadWithProgress(
        'x',
        { ...base, url, durationSec: 1, ...bad },
        false,
      ).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(KvasirAppError.isInstance(error), JSON.stringify(bad)).toBe(true);
      expect((error as KvasirAppError).code).toBe('INVALID_CONFIG');
    }
  });
});
