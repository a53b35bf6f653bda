// One short generation on the wasm backend, run the same way in Node and in a browser's Web
// Worker (wasm-browser.test.ts bundles it for chromium), so the two logits can be compared bit
// for bit. Imports only the package's public entry.
import {
  type CheckpointReader,
  type DevicePlacement,
  loadModel,
  ModelTokenizer,
  makeModelConfig,
} from '../../index.js';

/** The tiny random model both sides run (written as a Q8_0 GGUF by the test). */
export const TINY_CONFIG = makeModelConfig({
  hiddenSize: 64,
  intermediateSize: 128,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 512,
});

const BLOCK_SIZE = 16;
/** Decode steps after the prefill; each feeds back the previous step's argmax. */
export const DECODE_STEPS = 4;

export interface TinyStepsResult {
  /** The chat prompt, tokenized by the GGUF's own tokenizer and chat template. */
  readonly promptIds: number[];
  /** Logits of the prefill's last token then of each decode step, as f32 bit patterns. */
  readonly logitsBits: number[][];
  readonly tokens: number[];
  /** The generated tokens decoded. */
  readonly text: string;
}

/**
 * Loads `reader` on the wasm backend with `threads` threads (or split by layer over
 * `devices`), prefills a chat prompt in one step (several blocks, out of order) and decodes
 * {@link DECODE_STEPS} greedy tokens.
 */
export async function runTinySteps(
  reader: CheckpointReader,
  threads: number,
  devices?: readonly DevicePlacement[],
): Promise<TinyStepsResult> {
  const model = await loadModel(reader, {
    backend: 'wasm',
    threads,
    ...(devices === undefined ? {} : { devices }),
    numBlocks: 8,
    blockSize: BLOCK_SIZE,
    kvFormat: 'f32',
  });
  try {
    const tokenizer = ModelTokenizer.fromGguf(reader.metadata);
    const prompt = tokenizer.encodeChat([{ role: 'user', content: 'Hello 🙂 from a browser' }]);
    const blockTable = [3, 5, 1, 6, 0, 7];
    if (prompt.length + DECODE_STEPS > blockTable.length * BLOCK_SIZE) {
      throw new Error(`a prompt of ${prompt.length} tokens does not fit the block table`);
    }
    const promptLen = prompt.length;
    const slot = (pos: number) =>
      blockTable[Math.floor(pos / BLOCK_SIZE)]! * BLOCK_SIZE + (pos % BLOCK_SIZE);
    const logitsBits: number[][] = [];
    const tokens: number[] = [];
    let logits = await model.forward({
      tokenIds: Int32Array.from(prompt),
      positions: Int32Array.from(prompt, (_, i) => i),
      slotMapping: Int32Array.from(prompt, (_, i) => slot(i)),
      rows: [{ queryStart: 0, queryLen: promptLen, contextLen: promptLen, blockTable }],
      logitsIndices: Int32Array.of(promptLen - 1),
    });
    for (let step = 0; ; step++) {
      logitsBits.push(Array.from(new Uint32Array(logits.buffer, logits.byteOffset, logits.length)));
      if (step === DECODE_STEPS) break;
      let next = 0;
      for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[next]!) next = i;
      tokens.push(next);
      const pos = promptLen + step;
      logits = await model.forward({
        tokenIds: Int32Array.of(next),
        positions: Int32Array.of(pos),
        slotMapping: Int32Array.of(slot(pos)),
        rows: [{ queryStart: 0, queryLen: 1, contextLen: pos + 1, blockTable }],
        logitsIndices: Int32Array.of(0),
      });
    }
    return { promptIds: prompt, logitsBits, tokens, text: tokenizer.decode(tokens) };
  } finally {
    await model.destroy();
  }
}
