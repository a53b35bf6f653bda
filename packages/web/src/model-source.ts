import { WebEngineError } from './errors.js';
import type { ModelSourceData } from './protocol.js';

/** The Cache Storage cache models are kept in. */
export const MODEL_CACHE = 'kvasir-models';
/** Header of a cached model: its full size, so a truncated entry is detected and fetched again. */
const SIZE_HEADER = 'x-kvasir-bytes';

/** Progress of a download, in bytes (`total` when the server sends Content-Length). */
export type DownloadProgress = (loaded: number, total: number | undefined) => void;

/** What a model's bytes are, and whether the network was needed. */
export interface ModelBytes {
  readonly bytes: Uint8Array;
  readonly name: string;
  readonly fromCache: boolean;
}

/** The browser APIs this module uses (the worker's globals; a test passes its own). */
export interface ModelSourceEnv {
  readonly fetch: typeof fetch;
  readonly caches?: CacheStorage;
  readonly storage?: { estimate(): Promise<{ quota?: number; usage?: number }> };
}

async function download(
  env: ModelSourceEnv,
  url: string,
  progress: DownloadProgress,
): Promise<Uint8Array> {
  let response: Response;
  try {
    response = await env.fetch(url);
  } catch (error) {
    throw new WebEngineError(
      'MODEL_LOAD',
      `cannot fetch the model ${url}: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  if (!response.ok || !response.body) {
    throw new WebEngineError(
      'MODEL_LOAD',
      `cannot fetch the model ${url}: HTTP ${response.status}`,
    );
  }
  const length = Number(response.headers.get('content-length'));
  const total = Number.isFinite(length) && length > 0 ? length : undefined;
  const chunks: Uint8Array[] = [];
  let loaded = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    loaded += value.byteLength;
    progress(loaded, total);
  }
  if (total !== undefined && loaded !== total) {
    throw new WebEngineError(
      'MODEL_LOAD',
      `the model ${url} ended after ${loaded} of its ${total} bytes (connection cut?): load it again`,
    );
  }
  const bytes = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.byteLength;
  }
  return bytes;
}

/**
 * Checks that `bytes` more fit what the browser grants this origin.
 * @throws WebEngineError `QUOTA` naming both sizes and the way out.
 */
async function checkQuota(env: ModelSourceEnv, url: string, bytes: number): Promise<void> {
  const estimate = await env.storage?.estimate();
  if (estimate?.quota === undefined) return;
  const free = estimate.quota - (estimate.usage ?? 0);
  if (bytes > free) {
    throw new WebEngineError(
      'QUOTA',
      `the model ${url} (${bytes} bytes) does not fit the ${free} bytes of storage this browser grants the page: free some, or load it with cache: false`,
      { details: { bytes, free } },
    );
  }
}

/**
 * The model's bytes: a `File` or bytes as given; a URL from Cache Storage when it holds all of
 * it (a truncated entry is deleted and fetched again), else downloaded with `progress` and, with
 * `cache`, kept there after checking the browser's quota.
 * @throws WebEngineError `MODEL_LOAD` when the download fails; `QUOTA` when it cannot be kept.
 */
export async function modelBytes(
  source: ModelSourceData,
  cache: boolean,
  progress: DownloadProgress,
  env: ModelSourceEnv,
): Promise<ModelBytes> {
  if (source.kind === 'bytes') {
    return { bytes: new Uint8Array(source.bytes), name: source.name, fromCache: false };
  }
  if (source.kind === 'file') {
    const bytes = new Uint8Array(await source.file.arrayBuffer());
    progress(bytes.byteLength, bytes.byteLength);
    return { bytes, name: source.name, fromCache: false };
  }
  const name = new URL(source.url, 'http://x/').pathname.split('/').pop() || source.url;
  const store = cache && env.caches ? await env.caches.open(MODEL_CACHE) : undefined;
  const hit = await store?.match(source.url);
  if (hit) {
    const expected = Number(hit.headers.get(SIZE_HEADER));
    const bytes = new Uint8Array(await hit.arrayBuffer());
    if (bytes.byteLength === expected && expected > 0) {
      progress(bytes.byteLength, bytes.byteLength);
      return { bytes, name, fromCache: true };
    }
    await store?.delete(source.url);
  }
  const bytes = await download(env, source.url, progress);
  if (store) {
    await checkQuota(env, source.url, bytes.byteLength);
    await store.put(
      source.url,
      new Response(bytes as Uint8Array<ArrayBuffer>, {
        headers: {
          'content-type': 'application/octet-stream',
          [SIZE_HEADER]: String(bytes.byteLength),
        },
      }),
    );
  }
  return { bytes, name, fromCache: false };
}
