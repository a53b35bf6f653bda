/** A chat message as the router renders it for the tokenizer (text parts joined). */
export interface PromptMessage {
  readonly role: string;
  readonly content: string;
  readonly name?: string;
}

/**
 * The model's tokenizer, as the replicas apply it: `encode` as for a completions prompt (special
 * tokens such as BOS included), `encodeChat` the chat template with the generation prompt. The
 * router hashes what these return, so they must give the replicas' exact token ids.
 */
export interface PromptTokenizer {
  encode(text: string): readonly number[] | Promise<readonly number[]>;
  encodeChat(messages: readonly PromptMessage[]): readonly number[] | Promise<readonly number[]>;
}

/** What the router reads from a request body: the model and the prompt's token ids. */
export interface RoutedPrompt {
  readonly model: string;
  readonly tokens: readonly number[];
}

const isTokenList = (v: unknown): v is number[] =>
  Array.isArray(v) && v.every((t) => Number.isInteger(t) && t >= 0);

/**
 * The prompt of an OpenAI completions or chat body, tokenized as a replica would. A batch of
 * prompts is routed by its first. Anything unexpected gives no tokens (the request is then routed
 * by load, and the replica answers whatever is wrong with it).
 */
export async function promptOf(
  kind: 'completion' | 'chat',
  body: unknown,
  tokenizer: PromptTokenizer | undefined,
): Promise<RoutedPrompt> {
  if (typeof body !== 'object' || body === null) return { model: '', tokens: [] };
  const b = body as Record<string, unknown>;
  const model = typeof b.model === 'string' ? b.model : '';
  if (kind === 'completion') {
    let prompt = b.prompt;
    if (Array.isArray(prompt) && prompt.length > 0 && !isTokenList(prompt)) prompt = prompt[0];
    if (isTokenList(prompt)) return { model, tokens: prompt };
    if (typeof prompt === 'string' && tokenizer)
      return { model, tokens: await tokenizer.encode(prompt) };
    return { model, tokens: [] };
  }
  if (!Array.isArray(b.messages) || tokenizer === undefined) return { model, tokens: [] };
  const messages: PromptMessage[] = [];
  for (const m of b.messages as unknown[]) {
    if (typeof m !== 'object' || m === null) return { model, tokens: [] };
    const { role, content, name } = m as Record<string, unknown>;
    if (typeof role !== 'string') return { model, tokens: [] };
    // The same rendering as the server's: text parts joined, nothing else.
    const text =
      typeof content === 'string'
        ? content
        : Array.isArray(content)
          ? content.map((p) => (typeof p?.text === 'string' ? p.text : '')).join('')
          : '';
    messages.push({ role, content: text, ...(typeof name === 'string' ? { name } : {}) });
  }
  return { model, tokens: await tokenizer.encodeChat(messages) };
}
