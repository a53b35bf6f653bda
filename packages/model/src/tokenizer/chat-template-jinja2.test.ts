import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type ChatMessage, renderChatTemplate } from './chat-template.js';

/** What `tooling/ggml-fixtures/make_chat_template_fixtures.py` rendered with Python's jinja2. */
interface Fixture {
  readonly templates: Record<string, string>;
  readonly cases: {
    template: string;
    bos_token: string | null;
    eos_token: string | null;
    messages: ChatMessage[];
    tools: unknown[] | null;
    rendered: string;
  }[];
}

const fixture = JSON.parse(
  await readFile(
    new URL('../../../../tooling/ggml-fixtures/chat-templates.json', import.meta.url),
    'utf8',
  ),
) as Fixture;

// Real models' templates (Qwen2.5, DeepSeek-R1-Distill-Qwen, Mistral Nemo, Llama 3.1, Qwen3,
// SmolLM3, Phi-3.5, gpt-oss's harmony format), as transformers renders them with jinja2:
// @huggingface/jinja must give the same text. Its strftime_now (local time, as transformers'
// datetime.now()) sees the clock pinned to the fixture's date.
beforeAll(() => {
  vi.useFakeTimers({ toFake: ['Date'] });
  vi.setSystemTime(new Date(2026, 11, 4, 5, 30, 0));
});
afterAll(() => {
  vi.useRealTimers();
});
describe('chat templates against jinja2', () => {
  it.each(fixture.cases.map((c) => [c.template, c.messages.length, c.tools !== null, c] as const))(
    '%s, %i messages, tools %s',
    (name, _n, _tools, c) => {
      const out = renderChatTemplate(
        fixture.templates[name]!,
        c.messages,
        { bos_token: c.bos_token ?? '', eos_token: c.eos_token ?? '' },
        c.tools === null ? {} : { tools: c.tools },
      );
      expect(out).toBe(c.rendered);
    },
  );
});
