import { describe, expect, it } from 'vitest';
import { AsyncQueue } from './async-queue.js';

describe('AsyncQueue', () => {
  it('delivers items pushed before and after the consumer waits, then ends', async () => {
    const q = new AsyncQueue<number>();
    q.push(1);
    const seen: number[] = [];
    const consumer = (async () => {
      for await (const x of q) seen.push(x);
    })();
    await Promise.resolve();
    q.push(2);
    q.push(3);
    q.end();
    q.push(4);
    await consumer;
    expect(seen).toEqual([1, 2, 3]);
  });

  it('fails a waiting consumer after the queued items', async () => {
    const q = new AsyncQueue<string>();
    q.push('a');
    q.fail(new Error('boom'));
    const it = q[Symbol.asyncIterator]();
    expect(await it.next()).toEqual({ value: 'a', done: false });
    await expect(it.next()).rejects.toThrow('boom');
  });

  it('counts unread items, and discard drops them and fails the consumer at once', async () => {
    const q = new AsyncQueue<number>();
    for (let i = 0; i < 2000; i++) q.push(i);
    expect(q.size).toBe(2000);
    const it = q[Symbol.asyncIterator]();
    for (let i = 0; i < 1500; i++) expect((await it.next()).value).toBe(i);
    expect(q.size).toBe(500);
    q.discard(new Error('stalled'));
    expect(q.size).toBe(0);
    expect(q.closed).toBe(true);
    await expect(it.next()).rejects.toThrow('stalled');
    q.push(1);
    expect(q.size).toBe(0);
  });
});
