import { ModelError } from '../../errors.js';

// The kernels link with `--shared-memory`: their one import is a shared memory, which a module
// can only be instantiated over with a shared `WebAssembly.Memory`. One thread needs no shared
// memory, and a page that is not cross-origin isolated cannot hand one to a worker (Chromium
// still creates one; Firefox and Safari refuse). The final threads specification allows atomic
// instructions on an unshared memory (`notify` wakes nobody, and thread 0 of a one-thread pool
// never waits), so the same code runs over an unshared memory once the import says so: only
// the limits flag of the memory import changes (0x03, shared with a maximum, to 0x01), a byte of
// the same length, and the code is the code the threaded build runs.

const IMPORT_SECTION = 2;
const KIND_FUNC = 0;
const KIND_TABLE = 1;
const KIND_MEMORY = 2;
const KIND_GLOBAL = 3;
const LIMITS_SHARED_MAX = 0x03;
const LIMITS_MAX = 0x01;

function leb(bytes: Uint8Array, at: number): { value: number; next: number } {
  let value = 0;
  let shift = 0;
  let i = at;
  for (;;) {
    if (i >= bytes.length) throw new Error('truncated LEB128');
    const b = bytes[i++] as number;
    value += (b & 0x7f) * 2 ** shift;
    if ((b & 0x80) === 0) return { value, next: i };
    shift += 7;
  }
}

/** Skips a `limits` (flag, min, max when the flag has bit 0). */
function skipLimits(bytes: Uint8Array, at: number): number {
  const flag = bytes[at] as number;
  let i = leb(bytes, at + 1).next;
  if (flag & 1) i = leb(bytes, i).next;
  return i;
}

/**
 * A copy of a module's bytes whose shared memory import is unshared.
 * @throws {ModelError} `BACKEND` when the module imports no shared memory (not the kernels'
 *   build).
 */
export function unsharedMemoryImport(module: Uint8Array): Uint8Array {
  const out = module.slice();
  let i = 8; // magic and version
  while (i < out.length) {
    const id = out[i] as number;
    const size = leb(out, i + 1);
    const end = size.next + size.value;
    if (id === IMPORT_SECTION) {
      let p = size.next;
      const count = leb(out, p);
      p = count.next;
      for (let k = 0; k < count.value; k++) {
        for (let name = 0; name < 2; name++) {
          const len = leb(out, p);
          p = len.next + len.value;
        }
        const kind = out[p++] as number;
        if (kind === KIND_MEMORY) {
          if (out[p] !== LIMITS_SHARED_MAX) break;
          out[p] = LIMITS_MAX;
          return out;
        }
        if (kind === KIND_FUNC) p = leb(out, p).next;
        else if (kind === KIND_TABLE) p = skipLimits(out, p + 1);
        else if (kind === KIND_GLOBAL) p += 2;
        else break;
      }
    }
    i = end;
  }
  throw new ModelError(
    'BACKEND',
    'the wasm kernels module imports no shared memory with a maximum: it is not the build this loader expects',
  );
}
