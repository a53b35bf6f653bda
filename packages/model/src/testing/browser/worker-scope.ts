// What the browser-side test workers share: the worker's global scope, typed as far as they use
// it, a count of the Web Workers started inside (the one way to see from outside how many threads
// a wasm backend really runs), and a message handler that reports a failure to the page instead
// of leaving it waiting.

/** A dedicated worker's global scope, as much of it as the test workers touch. */
export interface WorkerScope<TData> {
  onmessage: ((e: { data: TData }) => void) | null;
  postMessage(data: unknown): void;
  Worker: new (...args: unknown[]) => object;
  fetch(url: string): Promise<{ ok: boolean; status: number; arrayBuffer(): Promise<ArrayBuffer> }>;
}

/**
 * Takes the worker's scope, counts every Web Worker started in it from now on, and answers each
 * message with `handle`'s result (`{ ok: true, ...result }`) or its error (`{ ok: false, error }`).
 */
export function serveTestWorker<TData>(
  handle: (data: TData, workersStarted: () => number) => Promise<Record<string, unknown>>,
): void {
  const scope = globalThis as unknown as WorkerScope<TData>;
  let started = 0;
  const BaseWorker = scope.Worker;
  scope.Worker = class extends BaseWorker {
    constructor(...args: unknown[]) {
      super(...args);
      started++;
    }
  };
  scope.onmessage = async (e) => {
    try {
      scope.postMessage({ ok: true, ...(await handle(e.data, () => started)) });
    } catch (err) {
      scope.postMessage({ ok: false, error: String((err as Error)?.stack ?? err) });
    }
  };
}

/** Fetches `url` from the worker, failing with the HTTP status. */
export async function fetchBytes(url: string): Promise<ArrayBuffer> {
  const response = await (globalThis as unknown as Pick<WorkerScope<unknown>, 'fetch'>).fetch(url);
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
  return response.arrayBuffer();
}
