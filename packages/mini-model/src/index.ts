import { fileURLToPath } from 'node:url';

export { modelInfo } from './model-info.generated.js';
export type { MiniModelInfo } from './model-info.js';

// The files ship beside `dist/`, so each path is one level up from this module in both builds.
const here = (file: string): string => fileURLToPath(new URL(`../${file}`, import.meta.url));

/**
 * The Hugging Face directory: `config.json`, `model.safetensors` (F16), `tokenizer.json`,
 * `tokenizer_config.json` (with the chat template), `generation_config.json` and
 * `training.json`. Pass it to `kvasir serve --model` or `@kvasir/model`'s `loadModel`.
 */
export const hfDir: string = here('hf');

/** The same weights (F16) with tokenizer and chat template, as one GGUF v3 file. */
export const ggufPath: string = here('kvasir-mini.gguf');

/** The model card (`README.md`): data and licences, training, held-out perplexity, limits. */
export const modelCard: string = here('README.md');
