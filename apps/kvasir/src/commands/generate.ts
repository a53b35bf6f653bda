import { randomUUID } from 'node:crypto';
import type { EngineConfig } from '../config.js';
import { describeDefaultModel } from '../default-model.js';
import { buildEngine } from '../engine/bootstrap.js';
import { backendLines } from './serve.js';

/** Options of `kvasir generate`. */
export interface GenerateOptions {
  readonly maxTokens: number;
  readonly temperature: number;
  readonly topP: number;
  readonly topK: number;
  readonly seed?: number;
  readonly chat: boolean;
  readonly stop: readonly string[];
}

/** `kvasir generate "<prompt>"`: one generation in-process, streamed to stdout. */
export async function generateCommand(
  config: EngineConfig,
  prompt: string,
  options: GenerateOptions,
): Promise<void> {
  const built = await buildEngine(config);
  try {
    const engine = built.engine;
    const model = engine.modelCard.id;
    const promptTokens = options.chat
      ? await engine.applyChatTemplate(model, [{ role: 'user', content: prompt }])
      : await engine.tokenize(model, prompt);
    if (built.isDefaultModel) {
      process.stderr.write(
        describeDefaultModel()
          .map((line) => `[kvasir] ${line}\n`)
          .join(''),
      );
    } else if (built.isRandomModel) {
      process.stderr.write(
        '[kvasir] random-weight model (--model random): the text below is noise.\n',
      );
    }
    // A split model says where its layers run, as serve's banner does (a model past one
    // WebAssembly memory is split without being asked).
    if (built.model.devices.length > 1) {
      for (const line of backendLines(built.model, built.plan)) {
        process.stderr.write(`[kvasir] ${line.trim().replace(/\s+/g, ' ')}\n`);
      }
    }
    const controller = new AbortController();
    const stream = await engine.generate(
      {
        id: `gen-${randomUUID()}`,
        model,
        promptTokens,
        n: 1,
        // A default compression in cache positions lets the generation run past the context.
        maxTokens: engine.modelCard.unboundedContext
          ? options.maxTokens
          : Math.min(options.maxTokens, engine.modelCard.maxModelLen - promptTokens.length),
        sampling: {
          temperature: options.temperature,
          topP: options.topP,
          topK: options.topK,
          minP: 0,
          presencePenalty: 0,
          frequencyPenalty: 0,
          repetitionPenalty: 1,
          ...(options.seed === undefined ? {} : { seed: options.seed }),
        },
        stopTokenIds: [],
        stopStrings: options.stop,
        ignoreEos: false,
      },
      controller.signal,
    );
    let finish = 'abort';
    let usage = '';
    for await (const event of stream) {
      if (event.kind === 'usage') {
        usage = `${event.promptTokens} prompt tokens (${event.cachedPromptTokens} cached), ${event.completionTokens} generated`;
        continue;
      }
      if (event.kind !== 'delta') continue;
      process.stdout.write(event.text);
      if (event.finishReason) finish = event.finishReason;
    }
    process.stdout.write('\n');
    process.stderr.write(`[kvasir] finish: ${finish}; ${usage}\n`);
  } finally {
    await built.close();
  }
}
