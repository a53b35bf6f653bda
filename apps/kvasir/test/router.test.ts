import { unpack } from 'msgpackr';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dealer } from 'zeromq';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import {
  type EventReplica,
  eventually,
  type RouterProcess,
  startEventReplica,
  startRouterProcess,
} from './harness.js';

// Two real `kvasir serve` replicas (random model, cpu backend, small pools so blocks get
// evicted) publishing KV events, and a real `kvasir router` in front, driven by the official
// openai client.

const REPLICA_ARGS = [
  '--backend',
  'cpu',
  '--max-num-seqs',
  '2',
  '--block-size',
  '16',
  '--num-gpu-blocks',
  '48',
];

let replicas: EventReplica[] = [];
let router: RouterProcess;

interface RouterIndex {
  replicas: { url: string; blocks: string[] }[];
}
interface RouterReplicas {
  replicas: {
    url: string;
    healthy: boolean;
    indexedBlocks: number;
    inFlight: number;
    events: { snapshots: number; sequence: string } | null;
  }[];
}

const getJson = async <T>(url: string): Promise<T> => (await fetch(url)).json() as Promise<T>;

/** The blocks a replica's pool really holds: its snapshot, asked on its replay socket. */
async function snapshotOf(replica: EventReplica): Promise<{ seq: bigint; blocks: string[] }> {
  const d = new Dealer({ receiveTimeout: 10_000, linger: 0 });
  d.connect(replica.replay);
  try {
    await d.send([Buffer.alloc(0), Buffer.from('snapshot')]);
    const [, seq, payload] = await d.receive();
    const [, events] = unpack(payload!) as [number, unknown[][]];
    const blocks = events
      .filter((e) => e[0] === 'BlockStored')
      .flatMap((e) => (e[1] as Uint8Array[]).map((h) => Buffer.from(h).toString('hex')));
    await d.receive(); // the −1 end marker
    // A block in the pool and in the host tier is listed once per medium.
    return { seq: seq!.readBigInt64BE(), blocks: [...new Set(blocks)].sort() };
  } finally {
    d.close();
  }
}

/** Waits until the router has applied every batch each replica published (its sequence). */
async function routerCaughtUp(r: RouterProcess): Promise<boolean> {
  return eventually(async () => {
    const state = await getJson<RouterReplicas>(`${r.url}/router/replicas`);
    for (const [i, replica] of replicas.entries()) {
      if (replica.child.exitCode !== null) continue;
      const snap = await snapshotOf(replica);
      if (state.replicas[i]!.events?.sequence !== snap.seq.toString()) return false;
    }
    return true;
  }, 400);
}

async function expectIndexEqualsReplicas(r: RouterProcess): Promise<void> {
  expect(await routerCaughtUp(r)).toBe(true);
  const index = await getJson<RouterIndex>(`${r.url}/router/index`);
  for (const [i, replica] of replicas.entries()) {
    const real = await snapshotOf(replica);
    expect(index.replicas[i]!.url).toBe(replica.url);
    expect(index.replicas[i]!.blocks).toEqual(real.blocks);
  }
}

const systemPrompt = (topic: string) =>
  `You are an assistant that answers only questions about ${topic}. `.repeat(6);

beforeAll(async () => {
  replicas = await Promise.all([startEventReplica(REPLICA_ARGS), startEventReplica(REPLICA_ARGS)]);
  router = await startRouterProcess([
    '--health-interval-ms',
    '200',
    '--unhealthy-after',
    '2',
    '--explain-routes',
    ...replicas.flatMap((r) => ['--replica', r.spec]),
  ]);
});

afterAll(async () => {
  await router?.stop();
  for (const r of replicas) if (r.child.exitCode === null) await r.stop();
});

describe('kvasir router in front of two kvasir serve replicas', () => {
  it('shows its health threshold in the banner', () => {
    expect(router.output()).toMatch(/out after 2 failed checks in a row/);
  });

  it('sends a request to the replica that has its system prompt cached', async () => {
    // Each replica learns one system prompt directly, not through the router.
    const topics = ['astronomy and the planets', 'cooking with rice and beans'];
    for (const [i, replica] of replicas.entries()) {
      await replica.client.chat.completions.create({
        model: RANDOM_MODEL_NAME,
        messages: [
          { role: 'system', content: systemPrompt(topics[i]!) },
          { role: 'user', content: 'warm up' },
        ],
        max_tokens: 1,
      });
    }
    expect(await routerCaughtUp(router)).toBe(true);
    for (let round = 0; round < 3; round++) {
      for (const i of [1, 0]) {
        const { data, response } = await router.client.chat.completions
          .create({
            model: RANDOM_MODEL_NAME,
            messages: [
              { role: 'system', content: systemPrompt(topics[i]!) },
              { role: 'user', content: `question ${round}` },
            ],
            max_tokens: 4,
          })
          .withResponse();
        expect(response.headers.get('x-kvasir-replica')).toBe(replicas[i]!.url);
        // What the router's index said the replica held is what the replica reports it reused.
        const route = JSON.parse(response.headers.get('x-kvasir-route')!) as {
          chosen: number;
          candidates: number[][];
        };
        expect(route.chosen).toBe(i);
        const cached = route.candidates.find((c) => c[0] === i)![1]!;
        expect(cached).toBeGreaterThan(0);
        expect(Math.floor((data.usage?.prompt_tokens_details?.cached_tokens ?? 0) / 16)).toBe(
          cached,
        );
      }
    }
    // Completions prompts are matched too (the tokenizer's encode, not the chat template).
    const { response } = await router.client.completions
      .create({
        model: RANDOM_MODEL_NAME,
        prompt: `${systemPrompt('anything')} hello`,
        max_tokens: 2,
      })
      .withResponse();
    const first = response.headers.get('x-kvasir-replica');
    expect(await routerCaughtUp(router)).toBe(true);
    const { response: again } = await router.client.completions
      .create({
        model: RANDOM_MODEL_NAME,
        prompt: `${systemPrompt('anything')} again`,
        max_tokens: 2,
      })
      .withResponse();
    expect(again.headers.get('x-kvasir-replica')).toBe(first);
  });

  it('keeps an index equal to the replicas’ real block sets through random traffic with evictions, and rebuilds it after a router restart', async () => {
    let state = 11;
    const rand = (n: number) => {
      state = (state * 1103515245 + 12345) % 2 ** 31;
      return state % n;
    };
    const prefixes = [
      'alpha beta gamma ',
      'the quick brown fox ',
      'lorem ipsum dolor ',
      'one two three four ',
    ];
    const traffic = async (rounds: number) => {
      for (let round = 0; round < rounds; round++) {
        await Promise.all(
          Array.from({ length: 4 }, (_, i) =>
            router.client.completions.create({
              model: RANDOM_MODEL_NAME,
              prompt: `${prefixes[rand(4)]!.repeat(3 + rand(8))} q${round}-${i}-${rand(1000)}`,
              max_tokens: 4 + rand(20),
              temperature: 0,
            }),
          ),
        );
      }
    };
    const evictions = async () => {
      let n = 0;
      for (const r of replicas)
        n += (await r.metrics()).get('kvasir_kv_cache_evictions_total') ?? 0;
      return n;
    };
    const before = await evictions();
    await traffic(6);
    expect(await evictions()).toBeGreaterThan(before); // 48-block pools did evict
    await expectIndexEqualsReplicas(router);

    // A new router process starts from the replicas' snapshots, then follows their streams.
    expect(await router.stop()).toBe(0);
    router = await startRouterProcess([
      '--health-interval-ms',
      '200',
      ...replicas.flatMap((r) => ['--replica', r.spec]),
    ]);
    await expectIndexEqualsReplicas(router);
    const state0 = await getJson<RouterReplicas>(`${router.url}/router/replicas`);
    expect(state0.replicas.every((r) => r.events!.snapshots >= 1)).toBe(true);
    await traffic(3);
    await expectIndexEqualsReplicas(router);
  });

  it('under load, a killed replica ends its started streams with a clean error and nothing else fails', async () => {
    const N = 8;
    const victim = replicas[1]!;
    const started = new Set<string>();
    const results = Array.from({ length: N }, async (_, i) => {
      const { data: stream, response } = await router.client.completions
        .create({
          model: RANDOM_MODEL_NAME,
          prompt: `stream number ${i} `.repeat(4),
          max_tokens: 160,
          stream: true,
          // Kvasir's extension: generate past EOS, so every stream runs long.
          ignore_eos: true,
        } as OpenAI.CompletionCreateParamsStreaming)
        .withResponse();
      const from = response.headers.get('x-kvasir-replica')!;
      started.add(from);
      let chunks = 0;
      let finish: string | null = null;
      try {
        for await (const chunk of stream) {
          chunks++;
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
        return { from, ok: true as const, chunks, finish };
      } catch (error) {
        return { from, ok: false as const, chunks, error };
      }
    });
    // Kill the victim once streams from both replicas are under way.
    expect(await eventually(async () => started.size === 2, 600)).toBe(true);
    victim.child.kill('SIGKILL');
    const outcomes = await Promise.all(results);
    const failed = outcomes.filter((o) => !o.ok);
    // Only streams the victim had started fail, each with the OpenAI error event the router sends.
    expect(failed.length).toBeGreaterThan(0);
    for (const f of failed) {
      expect(f.from).toBe(victim.url);
      expect(f.error).toBeInstanceOf(OpenAI.APIError);
      expect((f.error as InstanceType<typeof OpenAI.APIError>).code).toBe('replica_failed');
    }
    // Everything else completed: the survivor's streams, and those queued on the victim that
    // had not started (the router moved them).
    for (const o of outcomes.filter((x) => x.ok)) expect(o.finish).toBe('length');
    expect(failed.length).toBeLessThanOrEqual(2 + 2); // at most the victim's running + preempted
    const metrics = await (await fetch(`${router.url}/metrics`)).text();
    expect(Number(/kvasir_router_retries_total (\d+)/.exec(metrics)![1])).toBeGreaterThan(0);
    // Later requests all go to the survivor.
    for (let i = 0; i < 3; i++) {
      const { response } = await router.client.completions
        .create({ model: RANDOM_MODEL_NAME, prompt: `after ${i}`, max_tokens: 2 })
        .withResponse();
      expect(response.headers.get('x-kvasir-replica')).toBe(replicas[0]!.url);
    }
    const state = await getJson<RouterReplicas>(`${router.url}/router/replicas`);
    expect(state.replicas[1]!.healthy).toBe(false);
    expect(state.replicas.every((r) => r.inFlight === 0)).toBe(true);
  });
});
