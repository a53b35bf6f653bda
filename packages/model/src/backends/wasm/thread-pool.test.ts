import { randomFloats, seededRandom } from '@kvasir/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { rmsNormRef } from '../../kernels/reference.js';
import { f32Word, Op } from './wasm-program.js';
import { createWasmRuntime, type WasmRuntime } from './wasm-runtime.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const runtimes: WasmRuntime[] = [];
afterAll(async () => {
  for (const rt of runtimes) await rt.close();
});

async function runtime(threads: number, spin?: number): Promise<WasmRuntime> {
  const rt = await createWasmRuntime({ threads, reserveBytes: 4 << 20, spin });
  runtimes.push(rt);
  return rt;
}

/**
 * A two-op program over `rows` rows that every thread takes part in: RMSNorm of x into y, a
 * barrier, then RMSNorm of y into z (each thread reads rows another one wrote). Returns a
 * function that runs it on a fresh x and checks z against the reference.
 */
function chainedNorms(rt: WasmRuntime, rows: number, h: number) {
  const { arena } = rt;
  const weight = randomFloats(seededRandom(5), h, 1);
  const wp = arena.alloc(h * 4);
  arena.f32(wp, h).set(weight);
  const xp = arena.alloc(rows * h * 4);
  const yp = arena.alloc(rows * h * 4);
  const zp = arena.alloc(rows * h * 4);
  const p = rt.program(2);
  p.push(Op.rmsNorm, [xp, rows, h, wp, f32Word(1e-5), yp, 0]).barrier();
  p.push(Op.rmsNorm, [yp, rows, h, wp, f32Word(1e-5), zp, 0]);
  return (seed: number) => {
    const x = randomFloats(seededRandom(seed), rows * h, 2);
    arena.f32(xp, rows * h).set(x);
    rt.run(p);
    const want = rmsNormRef(rmsNormRef(x, rows, h, weight, 1e-5), rows, h, weight, 1e-5);
    const got = arena.f32(zp, rows * h);
    let worst = 0;
    for (let i = 0; i < want.length; i++) {
      worst = Math.max(worst, Math.abs((got[i] as number) - (want[i] as number)));
    }
    return worst;
  };
}

const cpuMs = (since: NodeJS.CpuUsage) => {
  const u = process.cpuUsage(since);
  return (u.user + u.system) / 1000;
};

describe('ThreadPool idling', () => {
  for (const threads of [2, 3]) {
    it(`${threads} threads: an idle pool parks its workers (no wake-up, no CPU) and wakes them for the next program`, async () => {
      const rt = await runtime(threads);
      const run = chainedNorms(rt, 24, 64);
      for (let i = 0; i < 20; i++) expect(run(i)).toBeLessThan(1e-5);
      // The workers spin for some microseconds after a program, then park; background compiles
      // of the kernels the programs ran finish meanwhile.
      await sleep(500);
      const wakeups = rt.pool.wakeups;
      const cpu = process.cpuUsage();
      await sleep(1500);
      // CPU time, not wall time: a loaded machine stretches neither. Timed waits (1 ms) would
      // wake each worker about 1,500 times here; a worker spinning would use most of a core.
      expect(rt.pool.wakeups - wakeups).toBe(0);
      expect(cpuMs(cpu)).toBeLessThan(100);
      // Woken after the idle spell, every worker takes its share again.
      expect(run(99)).toBeLessThan(1e-5);
      expect(rt.pool.wakeups).toBeGreaterThan(wakeups);
    });
  }

  it('with no spinning, every wait blocks: thousands of programs, idle gaps between some, all complete correctly on 2 and 3 threads', async () => {
    for (const threads of [2, 3]) {
      const rt = await runtime(threads, 0);
      const run = chainedNorms(rt, 7, 32);
      for (let i = 0; i < 3000; i++) {
        expect(run(i)).toBeLessThan(1e-5);
        if (i % 500 === 0) await sleep(20);
      }
      // Each program blocks every worker at least once (parked between programs).
      expect(rt.pool.wakeups).toBeGreaterThan(3000 * (threads - 1));
    }
  });
});
