import { type FileHandle, open } from 'node:fs/promises';
import { fileIoError, ModelError } from '../errors.js';
import { dtypeByteLength, encodeFromF32, type TensorDtype } from './dtype.js';

/** A tensor to write: raw bytes already in `dtype`, or float32 values encoded on write. */
export interface TensorToWrite {
  /** Name stored in the header. */
  readonly name: string;
  /** Stored element type (F32/F16/BF16 for safetensors). */
  readonly dtype: TensorDtype;
  /** Shape, row-major. */
  readonly shape: readonly number[];
  /**
   * Float32 values (converted to `dtype`) or the exact stored bytes; or a function producing
   * them (or a promise of them), called in file order only when the tensor is written, so large
   * checkpoints pass through memory one tensor at a time.
   */
  readonly data:
    | Float32Array
    | Uint8Array
    | (() => Float32Array | Uint8Array | Promise<Float32Array | Uint8Array>);
}

/**
 * Bytes a tensor occupies once stored.
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` when a Q8_0 count is not a multiple of 32.
 */
export function storedByteLength(t: Pick<TensorToWrite, 'dtype' | 'shape'>): number {
  return dtypeByteLength(
    t.dtype,
    t.shape.reduce((a, b) => a * b, 1),
  );
}

/**
 * Converts a tensor's data to its stored bytes, checking the size. `what` starts the error
 * message (the format's word for a tensor).
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` when the data does not fit the dtype and shape.
 */
export async function tensorBytes(t: TensorToWrite, what = 'tensor'): Promise<Uint8Array> {
  const need = storedByteLength(t);
  const data = typeof t.data === 'function' ? await t.data() : t.data;
  const bytes = data instanceof Float32Array ? encodeFromF32(t.dtype, data) : data;
  if (bytes.byteLength !== need) {
    throw new ModelError(
      'SHAPE_MISMATCH',
      `${what} "${t.name}": ${bytes.byteLength} bytes given, ${t.dtype}[${t.shape.join(', ')}] needs ${need}`,
      { details: { tensor: t.name } },
    );
  }
  return bytes;
}

/**
 * Creates (or truncates) `path`, lets `write` fill it, and closes it whatever happens. A
 * {@link ModelError} from `write` passes through; any other failure becomes `IO`.
 *
 * @throws {@link ModelError} `IO`, or what `write` throws.
 */
export async function writeFileWith(
  path: string,
  write: (fh: FileHandle) => Promise<void>,
): Promise<void> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(path, 'w');
    await write(fh);
  } catch (e) {
    if (ModelError.isInstance(e)) throw e;
    throw fileIoError('cannot write', path, e);
  } finally {
    await fh?.close();
  }
}
