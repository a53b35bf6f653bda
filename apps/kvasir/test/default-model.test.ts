import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { hfDir, modelInfo } from '@kvasir/mini-model';
import { describe, expect, it } from 'vitest';
import { DEFAULT_MODEL_NAME } from '../src/default-model.js';
import { CACHE_DIR, CLI, startServer } from './harness.js';

const run = promisify(execFile);
const kvasir = (args: string[]) =>
  run(process.execPath, [CLI, ...args], {
    maxBuffer: 16 * 1024 * 1024,
    env: { ...process.env, KVASIR_API_KEY: '' },
  });

const PROMPT = 'Tell me a fortune.';
// No --backend: what `npm start` and a new user get (auto: the wasm backend on a machine
// without a GPU, as here and in CI).
const GENERATE = ['generate', '--chat', '-t', '0', '-n', '48', PROMPT];

/**
 * Whether text reads as English at the level a 5M-parameter model can manage: no broken UTF-8,
 * and most whitespace-separated words are letters with at most trailing punctuation. Random
 * weights over a byte-level vocabulary fail it (the test below checks that too).
 */
function readsAsEnglish(text: string): boolean {
  if (/\uFFFD|(?![\t\n\r])\p{Cc}/u.test(text)) return false;
  const words = text.split(/\s+/).filter((w) => w !== '');
  if (words.length < 2) return false;
  const plain = words.filter((w) => /^["'(]?[A-Za-z]+(?:['-][A-Za-z]+)*[.,;:!?'")]*$/.test(w));
  return plain.length >= 0.8 * words.length;
}

describe('the default model is kvasir-mini, the packaged trained model (built CLI)', () => {
  it('info without --model reports it, from the package directory', async () => {
    const { stdout } = await kvasir(['info', '--json', '--backend', 'cpu']);
    const info = JSON.parse(stdout);
    expect(info.model).toMatchObject({
      path: hfDir,
      embedded_default: true,
      random_weights: false,
      id: DEFAULT_MODEL_NAME,
      layers: modelInfo.architecture.numLayers,
      kv_heads: modelInfo.architecture.numKvHeads,
      max_model_len: modelInfo.architecture.contextLength,
    });
  });

  it('serve and generate without --model answer in English and say what the model is', async () => {
    const server = await startServer([], { defaultModel: true });
    let answer: string;
    try {
      expect(server.output()).toContain(`model      ${DEFAULT_MODEL_NAME}  (${hfDir})`);
      expect(server.output()).toMatch(/a small Llama \(5\.3M parameters/);
      expect(server.output()).toMatch(/Non-commercial research use only/);
      expect(server.output()).not.toMatch(/RANDOM weights/);
      const models = await server.client.models.list();
      expect(models.data.map((m) => m.id)).toEqual([DEFAULT_MODEL_NAME]);
      const chat = await server.client.chat.completions.create({
        model: DEFAULT_MODEL_NAME,
        messages: [{ role: 'user', content: PROMPT }],
        temperature: 0,
        max_tokens: 48,
      });
      answer = chat.choices[0]!.message.content ?? '';
      expect(readsAsEnglish(answer), answer).toBe(true);
    } finally {
      expect(await server.stop()).toBe(0);
    }
    // `generate` runs the same greedy decode over the same chat prompt, and says what it runs.
    const generated = await kvasir(GENERATE);
    expect(generated.stdout.trim()).toBe(answer.trim());
    expect(generated.stderr).toContain(`${DEFAULT_MODEL_NAME}: a small Llama`);
    expect(generated.stderr).toMatch(/5\.3M parameters/);
    expect(generated.stderr).toMatch(/Non-commercial research use only/);
  });

  it('random weights (--model random) fail the same English check', async () => {
    const random = await kvasir([...GENERATE, '--model', 'random', '--cache-dir', CACHE_DIR]);
    expect(random.stderr).toMatch(/noise/);
    expect(readsAsEnglish(random.stdout), random.stdout).toBe(false);
  });
});
