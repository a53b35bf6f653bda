// Fixtures the workspace's tests share that live in files of the repo (Node only).
import { readFile } from 'node:fs/promises';

const CHAT_TEMPLATES = new URL('../ggml-fixtures/chat-templates.json', import.meta.url);

/** Real models' chat templates, by file name (`Qwen-Qwen2.5-7B-Instruct.jinja`, ...). */
export async function chatTemplates() {
  return JSON.parse(await readFile(CHAT_TEMPLATES, 'utf8')).templates;
}
