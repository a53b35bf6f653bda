import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { type ServerProcess, startServer } from './harness.js';

let server: ServerProcess;

beforeAll(async () => {
  server = await startServer(['--backend', 'wasm', '--threads', '2']);
});

afterAll(async () => {
  expect(await server.stop()).toBe(0);
});

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** CPU seconds a process has used (all its threads): utime + stime of /proc/<pid>/stat. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name, which may hold spaces, start past its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return ticks / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
}

async function complete(): Promise<string> {
  const res = (await server.client.completions.create({
    model: RANDOM_MODEL_NAME,
    temperature: 0,
    prompt: 'An idle server',
    max_tokens: 10,
    ignore_eos: true,
  } as never)) as unknown as OpenAI.Completion;
  expect(res.usage!.completion_tokens).toBe(10);
  return res.choices[0]!.text;
}

describe('kvasir serve (built CLI, wasm backend, 2 threads) at rest', () => {
  it('uses under 5% of a core while idle (CPU time, not wall time), then serves the same text', async () => {
    const before = await complete();
    // Past the background compiles the first request set off.
    await sleep(1000);
    const pid = server.child.pid!;
    const cpu = cpuSeconds(pid);
    await sleep(3000);
    // Under 0.01 s here: the engine loop and the wasm workers sleep. A worker that woke every
    // millisecond, or spun, cost from 0.1 s to most of the 3.
    expect(cpuSeconds(pid) - cpu).toBeLessThan(0.15);
    expect(await complete()).toBe(before);
  });
});
