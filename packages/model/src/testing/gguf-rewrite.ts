// Test-only: a GGUF file rewritten with its metadata or tensors edited, how the tests make files
// of other architectures, with keys this package's converter does not write, or broken tensors.
import { open } from 'node:fs/promises';
import { readGgufHeader } from '../formats/gguf/header.js';
import { type GgufTensorToWrite, writeGguf } from '../formats/gguf/writer.js';

/** A tensor as {@link rewriteGguf} hands it to an edit: its bytes as stored. */
export interface RewrittenTensor {
  name: string;
  dtype: GgufTensorToWrite['dtype'];
  shape: number[];
  data: Uint8Array;
}

/**
 * Writes `dst` as `src` with `edit` applied to a copy of its metadata (without
 * `general.alignment`) and to its tensors (bytes copied as stored).
 */
export async function rewriteGguf(
  src: string,
  dst: string,
  edit: {
    readonly metadata?: (md: Map<string, unknown>) => void;
    readonly tensors?: (tensors: RewrittenTensor[]) => void;
  },
): Promise<string> {
  const fh = await open(src, 'r');
  try {
    const header = await readGgufHeader(fh, src);
    const md = new Map(header.metadata);
    md.delete('general.alignment');
    edit.metadata?.(md);
    const tensors: RewrittenTensor[] = [];
    for (const t of header.tensors) {
      const data = new Uint8Array(t.byteLength);
      await fh.read(data, 0, data.byteLength, t.offset);
      tensors.push({ name: t.name, dtype: t.dtype, shape: [...t.dims].reverse(), data });
    }
    edit.tensors?.(tensors);
    await writeGguf(dst, md, tensors);
    return dst;
  } finally {
    await fh.close();
  }
}
