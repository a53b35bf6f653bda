// Written by tooling/train/package_model.mjs from kvasir-mini-v1 at step 1400; do not edit.
import type { MiniModelInfo } from './model-info.js';

/** What the packaged weights are: architecture, training run and step, held-out figures. */
export const modelInfo: MiniModelInfo = {
  name: 'kvasir-mini',
  parameters: 5310720,
  architecture: {
    hiddenSize: 256,
    numLayers: 4,
    numHeads: 8,
    numKvHeads: 8,
    intermediateSize: 704,
    vocabSize: 4096,
    contextLength: 512,
  },
  run: 'kvasir-mini-v1',
  step: 1400,
  totalSteps: 1400,
  tokensSeen: 5734400,
  trainingSeconds: 5290,
  heldout: {
    step: 1400,
    loss: 3.8775,
    perplexity: 48.305,
    windows: 582,
  },
  corpus: [
    'King James Version of the Bible (1611)',
    'fortune-mod fortune cookie files (no offensive set, no ascii-art)',
    'WordNet 3.0 synset glosses that have examples (words, definition, examples)',
    'Brown Corpus (Francis and Kucera, 1964/1979), POS tags stripped',
  ],
  commercialUse: false,
};
