import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { ModelError } from '../errors.js';
import type { ModelTokenizer } from './tokenizer.js';

// The worker: builds the same tokenizer from the same files with the library's CommonJS build
// (resolved by the caller, so there is no worker file to locate from dist, CJS or ESM) and
// encodes one text per message, in order, answering with the ids in a transferred buffer.
const WORKER_SOURCE = `
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const { Tokenizer } = require(workerData.library);
const tok = new Tokenizer(workerData.tokenizerJson, workerData.tokenizerConfig);
parentPort.on('message', (m) => {
  try {
    const ids = Int32Array.from(tok.encode(m.text, { add_special_tokens: m.addSpecialTokens }).ids);
    parentPort.postMessage({ id: m.id, ids }, [ids.buffer]);
  } catch (e) {
    parentPort.postMessage({ id: m.id, error: String((e && e.message) || e) });
  }
});
`;

interface Job {
  resolve(ids: number[]): void;
  reject(error: unknown): void;
}

/**
 * Encodes text on a worker thread, so that a long prompt (megabytes take seconds) never blocks
 * the event loop that serves everyone else. One worker per tokenizer, started on the first
 * call; texts are encoded one at a time, in the order given, with exactly the results of
 * {@link ModelTokenizer.encode}. An idle worker does not keep the process alive.
 *
 * @example
 * ```ts
 * const thread = new TokenizerThread(tokenizer);
 * const ids = await thread.encode(longText);
 * await thread.close();
 * ```
 */
export class TokenizerThread {
  readonly #tokenizer: ModelTokenizer;
  #worker: Worker | undefined;
  readonly #jobs = new Map<number, Job>();
  #nextId = 0;
  #closed = false;

  constructor(tokenizer: ModelTokenizer) {
    this.#tokenizer = tokenizer;
  }

  /**
   * Encodes `text` as {@link ModelTokenizer.encode} does, on the worker thread.
   * @throws {@link ModelError} `TOKENIZER` when the tokenizer rejects the text or the worker
   *   fails; `INVALID_ARGUMENT` after {@link close}.
   */
  encode(text: string, options?: { addSpecialTokens?: boolean }): Promise<number[]> {
    if (this.#closed) {
      return Promise.reject(new ModelError('INVALID_ARGUMENT', 'the tokenizer thread is closed'));
    }
    const worker = this.#start();
    const id = this.#nextId++;
    return new Promise<number[]>((resolve, reject) => {
      this.#jobs.set(id, { resolve, reject });
      worker.ref();
      worker.postMessage({ id, text, addSpecialTokens: options?.addSpecialTokens ?? true });
    });
  }

  /** Stops the worker; calls in progress fail. */
  async close(): Promise<void> {
    this.#closed = true;
    const worker = this.#worker;
    this.#worker = undefined;
    this.#failAll('the tokenizer thread was closed');
    await worker?.terminate();
  }

  #start(): Worker {
    if (this.#worker) return this.#worker;
    const files = this.#tokenizer.files;
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: {
        library: createRequire(import.meta.url).resolve('@huggingface/tokenizers'),
        tokenizerJson: files.tokenizerJson,
        tokenizerConfig: files.tokenizerConfig,
      },
    });
    worker.unref();
    worker.on('message', (m: { id: number; ids?: Int32Array; error?: string }) => {
      const job = this.#jobs.get(m.id);
      if (!job) return;
      this.#jobs.delete(m.id);
      if (this.#jobs.size === 0) worker.unref();
      if (m.ids) job.resolve(Array.from(m.ids));
      else job.reject(new ModelError('TOKENIZER', m.error ?? 'the tokenizer thread failed'));
    });
    const fail = (why: string) => {
      if (this.#worker !== worker) return;
      // The next call starts a fresh worker.
      this.#worker = undefined;
      this.#failAll(why);
      void worker.terminate().catch(() => undefined);
    };
    worker.on('error', (e) => fail(`the tokenizer thread failed: ${String(e)}`));
    worker.on('exit', (code) => fail(`the tokenizer thread exited (code ${code})`));
    this.#worker = worker;
    return worker;
  }

  #failAll(why: string): void {
    const jobs = [...this.#jobs.values()];
    this.#jobs.clear();
    for (const job of jobs) job.reject(new ModelError('TOKENIZER', why));
  }
}
