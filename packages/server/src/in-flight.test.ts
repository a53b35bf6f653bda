import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { EngineError } from './errors.js';
import { InFlightRequests } from './in-flight.js';

/** The part of a response the tracker watches: its `close` event and `writableFinished`. */
const response = (finished = false) =>
  Object.assign(new EventEmitter(), { writableFinished: finished }) as unknown as ServerResponse;

describe('InFlightRequests', () => {
  it('aborts a generation past its deadline with TIMEOUT', async () => {
    const inflight = new InFlightRequests(20);
    const flight = inflight.begin(response());
    await new Promise((r) => setTimeout(r, 60));
    const reason = flight.controller.signal.reason;
    expect(EngineError.isInstance(reason) && reason.code).toBe('TIMEOUT');
    flight.end();
    expect(inflight.size).toBe(0);
  });

  it('aborts when the client goes away before the response is finished, not after', () => {
    const inflight = new InFlightRequests(60_000);
    const open = response();
    const a = inflight.begin(open);
    open.emit('close');
    expect(a.controller.signal.aborted).toBe(true);
    const done = response(true);
    const b = inflight.begin(done);
    done.emit('close');
    expect(b.controller.signal.aborted).toBe(false);
    a.end();
    b.end();
    // Ended: a late close changes nothing.
    const c = inflight.begin(open);
    c.end();
    open.emit('close');
    expect(c.controller.signal.aborted).toBe(false);
  });

  it('drains: refuses new work, waits for running generations, aborts the rest at the deadline', async () => {
    const inflight = new InFlightRequests(60_000);
    const quick = inflight.begin(response());
    const slow = inflight.begin(response());
    // The slow one ends only once aborted, as a handler does.
    slow.controller.signal.addEventListener('abort', () => slow.end());
    setTimeout(() => quick.end(), 10);
    const drained = inflight.drain(80);
    expect(inflight.draining).toBe(true);
    await drained;
    expect(quick.controller.signal.aborted).toBe(false);
    const reason = slow.controller.signal.reason;
    expect(EngineError.isInstance(reason) && reason.code).toBe('DRAINING');
    expect(inflight.size).toBe(0);
  });
});
