import cliProgress from 'cli-progress';
import type { CheckpointReader, ReadChunksOptions, TensorInfo } from './checkpoint-reader.js';

/** One progress update while a checkpoint is read. */
export interface LoadProgressEvent {
  /** Tensor being read. */
  readonly tensor: string;
  /** Bytes read so far over the whole checkpoint. */
  readonly loadedBytes: number;
  /** Bytes to read in all. */
  readonly totalBytes: number;
  /** Tensors finished so far. */
  readonly tensorsDone: number;
  /** Tensors to read in all. */
  readonly tensorsTotal: number;
}

/** Receives {@link LoadProgressEvent}s. */
export type LoadProgressCallback = (event: LoadProgressEvent) => void;

/** Counts bytes as a loader reads them and shows them (see {@link createLoadProgress}). */
export interface LoadProgress {
  /** Starts a run over `totalBytes` in `tensorsTotal` tensors. */
  start(totalBytes: number, tensorsTotal: number): void;
  /** Adds `bytes` read from `tensor`; `tensorDone` when its last chunk was read. */
  advance(tensor: string, bytes: number, tensorDone: boolean): void;
  /** Ends the run (clears the bar). */
  stop(): void;
}

/** Options of {@link createLoadProgress}. */
export interface LoadProgressOptions {
  /** Called on every update (TTY or not). */
  readonly onProgress?: LoadProgressCallback;
  /** Where a bar is drawn (default `process.stderr`); drawn only when it is a TTY. */
  readonly stream?: NodeJS.WriteStream;
  /** Force the bar on or off (default: the stream's `isTTY`). */
  readonly bar?: boolean;
  /** Label in front of the bar. Default `loading`. */
  readonly label?: string;
}

/**
 * A progress reporter for weight loading: a `cli-progress` bar when the output is a terminal,
 * and/or a callback (for logs, UIs, tests) otherwise.
 */
export function createLoadProgress(options?: LoadProgressOptions): LoadProgress {
  const stream = options?.stream ?? process.stderr;
  const useBar = options?.bar ?? Boolean(stream.isTTY);
  let bar: cliProgress.SingleBar | undefined;
  let loaded = 0;
  let total = 0;
  let done = 0;
  let tensors = 0;
  const mib = (b: number) => (b / 1048576).toFixed(1);
  return {
    start(totalBytes, tensorsTotal) {
      loaded = 0;
      done = 0;
      total = totalBytes;
      tensors = tensorsTotal;
      if (useBar) {
        bar = new cliProgress.SingleBar(
          {
            stream,
            format: `${options?.label ?? 'loading'} [{bar}] {percentage}% | {mib}/{totalMib} MiB | {tensor}`,
            hideCursor: true,
            clearOnComplete: true,
            noTTYOutput: true,
          },
          cliProgress.Presets.shades_classic,
        );
        bar.start(totalBytes, 0, { mib: '0.0', totalMib: mib(totalBytes), tensor: '' });
      }
    },
    advance(tensor, bytes, tensorDone) {
      loaded += bytes;
      if (tensorDone) done++;
      bar?.update(loaded, { mib: mib(loaded), totalMib: mib(total), tensor });
      options?.onProgress?.({
        tensor,
        loadedBytes: loaded,
        totalBytes: total,
        tensorsDone: done,
        tensorsTotal: tensors,
      });
    },
    stop() {
      bar?.stop();
      bar = undefined;
    },
  };
}

/** A chunk of one tensor, from {@link streamCheckpoint}. */
export interface TensorChunk {
  /** The tensor the chunk belongs to. */
  readonly info: TensorInfo;
  /** Byte offset of the chunk within the tensor. */
  readonly offset: number;
  /** The bytes (canonical HF layout). */
  readonly bytes: Uint8Array;
}

/**
 * Streams every tensor of a checkpoint (or the named ones) chunk by chunk, reporting progress:
 * the loop a loader runs to upload weights without ever holding a whole file.
 *
 * @example
 * ```ts
 * for await (const { info, offset, bytes } of streamCheckpoint(reader, { progress: createLoadProgress() })) {
 *   device.queue.writeBuffer(buffers.get(info.name)!, offset, bytes);
 * }
 * ```
 */
export async function* streamCheckpoint(
  reader: CheckpointReader,
  options?: ReadChunksOptions & {
    readonly names?: readonly string[];
    readonly progress?: LoadProgress;
  },
): AsyncGenerator<TensorChunk> {
  const infos = (options?.names ?? [...reader.tensors.keys()]).map((n) => reader.tensor(n));
  const progress = options?.progress;
  progress?.start(
    infos.reduce((a, t) => a + t.byteLength, 0),
    infos.length,
  );
  try {
    for (const info of infos) {
      let offset = 0;
      for await (const bytes of reader.readChunks(info.name, options)) {
        const next = offset + bytes.byteLength;
        yield { info, offset, bytes };
        progress?.advance(info.name, bytes.byteLength, next === info.byteLength);
        offset = next;
      }
    }
  } finally {
    progress?.stop();
  }
}
