// The playground: loads kvasir-mini (or a dropped GGUF) into @kvasir/web's engine, runs the
// chats side by side, and redraws the KV cache from the engine's snapshots while they run.
import './style.css';
import { createEngine, type WebEngine, type WebKvSnapshot } from '@kvasir/web';
import { ChatPane, type ChatSettings } from './chat-pane.js';
import { KvView, type Owner } from './kv-view.js';

const params = new URLSearchParams(location.search);
const DEFAULT_MODEL = params.get('model') ?? 'models/kvasir-mini.gguf';
/** A small cache on purpose: a few chats fill it, and evictions show. */
const KV_CACHE_BYTES = Number(params.get('kvMiB') ?? 8) * 1024 * 1024;
const CHATS = Math.min(4, Math.max(1, Number(params.get('chats') ?? 3)));
const POLL_MS = 100;

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const status = $('model-status');
const progress = $<HTMLProgressElement>('model-progress');
const system = $<HTMLTextAreaElement>('system');
system.value =
  'You are a helpful assistant of few words. You answer plainly, you do not repeat yourself, and you keep to what was asked of you.';
const view = new KvView({
  grid: $('kv-grid'),
  tables: $('kv-tables'),
  counters: $('counters'),
  events: $('kv-events'),
});

let engine: WebEngine | undefined;
const owners = new Map<string, Owner>();
const panes: ChatPane[] = [];
const running = new Set<Promise<unknown>>();
const samples: [number, number][] = [];

function settings(): ChatSettings {
  return {
    system: system.value.trim(),
    maxTokens: Number($<HTMLInputElement>('max-tokens').value) || 96,
    temperature: Number($<HTMLInputElement>('temperature').value),
    ignoreEos: $<HTMLInputElement>('ignore-eos').checked,
  };
}

/** Tokens per second over all chats, over the last two seconds. */
function tokensPerSecond(): number {
  const now = performance.now();
  samples.push([now, panes.reduce((a, p) => a + p.tokens, 0)]);
  while (samples.length > 2 && now - samples[0]![0] > 2000) samples.shift();
  const [t0, n0] = samples[0]!;
  return now > t0 ? ((samples.at(-1)![1] - n0) * 1000) / (now - t0) : 0;
}

/** Reads a snapshot and draws it; what it drew, for the tests. */
async function refresh(): Promise<{ snapshot: WebKvSnapshot; drawn: Record<string, number> }> {
  if (!engine) throw new Error('no engine loaded');
  for (const p of panes)
    if (p.requestId) owners.set(p.requestId, { pane: p.index, label: `Chat ${p.index + 1}` });
  const snapshot = await engine.kvSnapshot();
  const drawn = view.render(snapshot, owners, {
    tokensPerSecond: tokensPerSecond(),
    modelBytes: engine.model.bytes,
    kvCacheBytes: KV_CACHE_BYTES,
  });
  return { snapshot, drawn };
}

// Redraws every POLL_MS while a chat runs, and once after the last ends: nothing when idle.
let polling = false;
async function poll(): Promise<void> {
  if (polling) return;
  polling = true;
  try {
    while (engine && running.size > 0) {
      await refresh();
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
    if (engine) await refresh();
  } finally {
    polling = false;
  }
}

function send(pane: ChatPane): Promise<unknown> {
  if (!engine || pane.busy) return Promise.resolve(undefined);
  const done = pane
    .run(engine, settings())
    .then((result) => {
      // A chat that ended between two snapshots is still told.
      if (result?.id) {
        owners.set(result.id, { pane: pane.index, label: `Chat ${pane.index + 1}` });
        view.noteAdmitted(result.id, result.cachedTokens);
        view.drawEvents(owners);
      }
    })
    .finally(() => {
      running.delete(done);
      void poll();
    });
  running.add(done);
  void poll();
  return done;
}

async function load(model: string | File): Promise<void> {
  const old = engine;
  engine = undefined;
  for (const p of panes) p.stop();
  await old?.dispose();
  status.dataset.state = 'loading';
  status.textContent = `Loading ${typeof model === 'string' ? model.split('/').pop() : model.name}…`;
  progress.hidden = false;
  try {
    engine = await createEngine({
      model,
      kvCacheBytes: KV_CACHE_BYTES,
      // Prefix blocks also go to the Origin Private File System: a reload finds them.
      opfs: params.get('opfs') !== '0',
      worker: new Worker(new URL('./engine-worker.ts', import.meta.url), { type: 'module' }),
      onProgress: (p) => {
        progress.value = p.total ? p.loaded / p.total : 0;
      },
    });
    progress.hidden = true;
    status.dataset.state = 'ready';
    status.dataset.backend = engine.backend.backend;
    status.title = engine.kvTier.reason;
    status.textContent = `${engine.model.id} on ${engine.backend.backend}${engine.backend.threads ? ` (${engine.backend.threads} threads)` : ''}: ${engine.backend.reason}`;
    owners.clear();
    await refresh();
  } catch (error) {
    status.dataset.state = 'error';
    status.textContent = `Cannot load the model: ${(error as Error).message}`;
  }
}

const panesEl = $('panes');
for (let i = 0; i < CHATS; i++) {
  const pane = new ChatPane(i, (p) => void send(p));
  panes.push(pane);
  panesEl.append(pane.root);
}
$('send-all').addEventListener('click', () => {
  for (const p of panes) void send(p);
});

const fileInput = $<HTMLInputElement>('model-file');
fileInput.addEventListener('change', () => {
  const file = fileInput.files?.[0];
  if (file) void load(file);
});
const drop = $('drop');
document.addEventListener('dragover', (e) => {
  e.preventDefault();
  drop.classList.add('over');
});
document.addEventListener('dragleave', () => drop.classList.remove('over'));
document.addEventListener('drop', (e) => {
  e.preventDefault();
  drop.classList.remove('over');
  const file = e.dataTransfer?.files[0];
  if (file) void load(file);
});

const ready = load(DEFAULT_MODEL);

/** What the tests (and a curious console) drive the page with. */
Object.assign(globalThis, {
  playground: {
    ready,
    get engine() {
      return engine;
    },
    panes,
    refresh,
    /** Sends every chat and resolves when all have ended. */
    sendAll: () => Promise.all(panes.map((p) => send(p))),
    idle: async () => {
      while (running.size > 0) await Promise.all([...running]);
      while (polling) await new Promise((r) => setTimeout(r, 10));
    },
  },
});
