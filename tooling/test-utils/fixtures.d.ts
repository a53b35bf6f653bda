/**
 * Real models' chat templates, by file name (`Qwen-Qwen2.5-7B-Instruct.jinja`, ...), from
 * `tooling/ggml-fixtures/chat-templates.json`.
 */
export function chatTemplates(): Promise<Record<string, string>>;
