import { createHash } from 'node:crypto';
import { type FileHandle, open, readFile, rename, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { KvasirAppError } from '../errors.js';

/** What an evaluation's saved logits were computed with, as its JSON file states it. */
export interface EvalLogitsHeader {
  readonly format: 'kvasir-eval-logits';
  readonly version: 1;
  readonly model: string;
  readonly backend: string;
  readonly kv_dtype: string;
  readonly block_size: number;
  readonly ctx: number;
  readonly stride: number;
  readonly vocab_size: number;
  /** Tokens evaluated, and SHA-256 of their ids as a JSON array: the same text, tokenized alike. */
  readonly tokens: number;
  readonly token_ids_sha256: string;
  /** Rows in the logits file: one per scored token, in order. */
  readonly scored_tokens: number;
  /** Raw logits, little-endian float32, `scored_tokens × vocab_size`, beside the JSON. */
  readonly logits_file: string;
}

/** The settings a saved reference must share with the run it is compared with. */
export interface EvalLogitsShape {
  readonly ctx: number;
  readonly stride: number;
  readonly vocabSize: number;
  readonly ids: readonly number[];
}

const idsDigest = (ids: readonly number[]) =>
  createHash('sha256').update(JSON.stringify(ids)).digest('hex');

function littleEndianBytes(rows: Float32Array): Uint8Array {
  // Every platform Node runs on here is little-endian; the file format says so explicitly.
  return new Uint8Array(rows.buffer, rows.byteOffset, rows.byteLength);
}

/**
 * Writes the logits of an evaluation's scored positions, row after row, so that a later run
 * (another KV dtype, backend, or build) can be compared with it through `--reference`. The JSON
 * is written last: an interrupted run leaves no file that claims to be complete.
 */
export class EvalLogitsWriter {
  readonly #path: string;
  readonly #handle: FileHandle;
  #values = 0;

  private constructor(path: string, handle: FileHandle) {
    this.#path = path;
    this.#handle = handle;
  }

  /**
   * Opens `<path without .json>.f32` for writing.
   * @throws KvasirAppError `INVALID_CONFIG` when it cannot be created.
   */
  static async create(path: string): Promise<EvalLogitsWriter> {
    try {
      return new EvalLogitsWriter(path, await open(binaryPath(path), 'w'));
    } catch (error) {
      throw new KvasirAppError(
        'INVALID_CONFIG',
        `--save-logits: cannot write ${binaryPath(path)}: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }

  /** Appends rows (`k × vocab` logits). */
  async append(rows: Float32Array): Promise<void> {
    await this.#handle.write(littleEndianBytes(rows));
    this.#values += rows.length;
  }

  /** Closes the logits file and writes the JSON that describes it. */
  async finish(
    header: Omit<
      EvalLogitsHeader,
      'format' | 'version' | 'logits_file' | 'token_ids_sha256' | 'tokens' | 'scored_tokens'
    >,
    ids: readonly number[],
  ): Promise<void> {
    await this.#handle.close();
    const full: EvalLogitsHeader = {
      format: 'kvasir-eval-logits',
      version: 1,
      ...header,
      tokens: ids.length,
      token_ids_sha256: idsDigest(ids),
      scored_tokens: this.#values / header.vocab_size,
      logits_file: basename(binaryPath(this.#path)),
    };
    const tmp = `${this.#path}.tmp`;
    await writeFile(tmp, `${JSON.stringify(full, null, 2)}\n`);
    await rename(tmp, this.#path);
  }

  /** Closes the logits file without describing it (the run failed). */
  async abandon(): Promise<void> {
    await this.#handle.close().catch(() => undefined);
  }
}

function binaryPath(jsonPath: string): string {
  return `${jsonPath.replace(/\.json$/i, '')}.f32`;
}

/** Reads the reference rows a saved evaluation wrote, in the order they were scored. */
export class EvalLogitsReader {
  readonly header: EvalLogitsHeader;
  readonly #handle: FileHandle;
  #offset = 0;

  private constructor(header: EvalLogitsHeader, handle: FileHandle) {
    this.header = header;
    this.#handle = handle;
  }

  /**
   * Opens a saved evaluation and checks that it scored the same tokens with the same windows.
   * @throws KvasirAppError `INVALID_CONFIG` for an unreadable or foreign file, a truncated
   *   logits file, or one that differs from this run (its message names what differs).
   */
  static async open(path: string, shape: EvalLogitsShape): Promise<EvalLogitsReader> {
    const bad = (what: string, cause?: unknown) =>
      new KvasirAppError('INVALID_CONFIG', `--reference ${path}: ${what}`, { cause });
    let header: EvalLogitsHeader;
    try {
      header = JSON.parse(await readFile(path, 'utf8')) as EvalLogitsHeader;
    } catch (error) {
      throw bad(`cannot read: ${(error as Error).message}`, error);
    }
    if (header.format !== 'kvasir-eval-logits' || header.version !== 1) {
      throw bad('not a file written by kvasir eval --save-logits (format kvasir-eval-logits v1)');
    }
    const differs: string[] = [];
    if (header.ctx !== shape.ctx) differs.push(`--ctx ${header.ctx} (this run: ${shape.ctx})`);
    if (header.stride !== shape.stride) {
      differs.push(`--stride ${header.stride} (this run: ${shape.stride})`);
    }
    if (header.vocab_size !== shape.vocabSize) {
      differs.push(`vocabulary ${header.vocab_size} (this model: ${shape.vocabSize})`);
    }
    if (header.tokens !== shape.ids.length || header.token_ids_sha256 !== idsDigest(shape.ids)) {
      differs.push(`other token ids (${header.tokens} tokens; this run: ${shape.ids.length})`);
    }
    if (differs.length > 0) throw bad(`saved with ${differs.join(', ')}`);
    const file = join(dirname(path), header.logits_file);
    let handle: FileHandle;
    try {
      handle = await open(file, 'r');
    } catch (error) {
      throw bad(`cannot open its logits ${file}: ${(error as Error).message}`, error);
    }
    const want = header.scored_tokens * header.vocab_size * 4;
    const { size } = await handle.stat();
    if (size !== want) {
      await handle.close();
      throw bad(`its logits file has ${size} bytes, expected ${want}`);
    }
    return new EvalLogitsReader(header, handle);
  }

  /** The next `count` rows. */
  async next(count: number): Promise<Float32Array> {
    const rows = new Float32Array(count * this.header.vocab_size);
    const bytes = new Uint8Array(rows.buffer);
    const { bytesRead } = await this.#handle.read(bytes, 0, bytes.length, this.#offset);
    if (bytesRead !== bytes.length) {
      throw new KvasirAppError('INVALID_CONFIG', '--reference: its logits file ended early');
    }
    this.#offset += bytes.length;
    return rows;
  }

  async close(): Promise<void> {
    await this.#handle.close();
  }
}
