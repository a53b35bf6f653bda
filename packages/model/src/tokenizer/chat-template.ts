import { Template } from '@huggingface/jinja';
import { ModelError } from '../errors.js';

/** One chat message as chat templates expect it. Extra fields (tool calls, names) pass through. */
export interface ChatMessage {
  /** `system`, `user`, `assistant`, `tool`, ... */
  readonly role: string;
  /** The message text. */
  readonly content: string;
  readonly [extra: string]: unknown;
}

/** Options of {@link renderChatTemplate}. */
export interface ChatTemplateOptions {
  /** Append the header that opens the assistant's turn (for generation). Default true. */
  readonly addGenerationPrompt?: boolean;
  /** Tool definitions, for templates that render them. */
  readonly tools?: readonly unknown[];
  /** Extra variables for the template (e.g. `date_string`). */
  readonly variables?: Readonly<Record<string, unknown>>;
}

const cache = new Map<string, Template>();

/**
 * Renders a Hugging Face chat template (Jinja, through `@huggingface/jinja`) as transformers'
 * `apply_chat_template(..., tokenize=False)` does: the template sees `messages`,
 * `add_generation_prompt`, `tools` and the special tokens (`bos_token`, `eos_token`, ...).
 *
 * @param specialTokens - e.g. `{ bos_token: '<s>', eos_token: '</s>' }`.
 * @throws {@link ModelError} `CHAT_TEMPLATE` when the template does not parse, raises an
 *   exception (`raise_exception`) or fails to render.
 */
export function renderChatTemplate(
  template: string,
  messages: readonly ChatMessage[],
  specialTokens: Readonly<Record<string, string | null>>,
  options?: ChatTemplateOptions,
): string {
  let t = cache.get(template);
  if (!t) {
    try {
      t = new Template(template);
    } catch (e) {
      throw new ModelError(
        'CHAT_TEMPLATE',
        `chat template does not parse: ${(e as Error).message}`,
        { cause: e },
      );
    }
    if (cache.size > 32) cache.clear();
    cache.set(template, t);
  }
  try {
    return t.render({
      ...specialTokens,
      ...options?.variables,
      messages: messages.map((m) => ({ ...m })),
      add_generation_prompt: options?.addGenerationPrompt ?? true,
      ...(options?.tools ? { tools: options.tools } : {}),
    });
  } catch (e) {
    throw new ModelError(
      'CHAT_TEMPLATE',
      `chat template failed to render: ${(e as Error).message}`,
      { cause: e },
    );
  }
}
