import { z } from 'zod';
import { EngineError } from '../errors.js';
import { guidedFields, responseFormatSchema } from './structured-output.js';

const MAX_STOP_STRINGS = 16;
const MAX_TOP_LOGPROBS = 20;
/** Prompts in one batched completions request (each is generated as its own request). */
export const MAX_BATCH_PROMPTS = 256;

const tokenId = z.number().int().min(0);

const stop = z.union([z.string(), z.array(z.string()).max(MAX_STOP_STRINGS)]).nullish();

/** Fields shared by completions and chat completions. */
const common = {
  model: z.string().min(1).optional(),
  n: z.number().int().min(1).nullish(),
  max_tokens: z.number().int().min(1).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  repetition_penalty: z.number().gt(0).max(10).nullish(),
  seed: z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER).nullish(),
  stop,
  stop_token_ids: z.array(tokenId).max(64).nullish(),
  ignore_eos: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  user: z.string().nullish(),
  // Kvasir's extension: token-level KV compression for this request (`{"policy": "sinks",
  // "sinks": 4, "window": 1020}`). The engine knows the policies and checks the parameters.
  kv_compression: z
    .object({ policy: z.string().min(1).max(64) })
    .catchall(z.union([z.number(), z.string().max(64)]))
    .refine((o) => Object.keys(o).length <= 16, 'at most 16 parameters')
    .nullish(),
  ...guidedFields,
};

/** Body of `POST /v1/completions`. */
export const completionBodySchema = z.object({
  ...common,
  prompt: z.union([
    z.string(),
    z.array(tokenId).min(1),
    z.array(z.string()).min(1).max(MAX_BATCH_PROMPTS),
    z.array(z.array(tokenId).min(1)).min(1).max(MAX_BATCH_PROMPTS),
  ]),
  // 0 only with echo (scoring the prompt); checked where the fields meet.
  max_tokens: z.number().int().min(0).nullish(),
  logprobs: z.number().int().min(0).max(MAX_TOP_LOGPROBS).nullish(),
  echo: z.boolean().nullish(),
  best_of: z.number().int().min(1).nullish(),
  suffix: z.null().optional(),
});

const textPart = z.object({ type: z.literal('text'), text: z.string() });

/** A tool's name as OpenAI accepts it. */
const toolName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_-]+$/, 'must be letters, digits, _ or -');

const message = z.object({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
  content: z.union([z.string(), z.array(textPart), z.null()]).optional(),
  name: z.string().optional(),
  tool_calls: z
    .array(
      z.object({
        id: z.string().min(1).max(256),
        type: z.literal('function').optional(),
        function: z.object({ name: z.string().min(1).max(64), arguments: z.string() }),
      }),
    )
    .max(128)
    .nullish(),
  tool_call_id: z.string().max(256).nullish(),
});

const MAX_TOOLS = 128;

const tool = z.object({
  type: z.literal('function'),
  function: z.object({
    name: toolName,
    description: z.string().nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
    strict: z.boolean().nullish(),
  }),
});

const toolChoice = z
  .union([
    z.enum(['none', 'auto', 'required']),
    z.object({ type: z.literal('function'), function: z.object({ name: z.string() }) }),
  ])
  .nullish();

/** Body of `POST /v1/chat/completions`. */
export const chatBodySchema = z.object({
  ...common,
  messages: z.array(message).min(1),
  max_completion_tokens: z.number().int().min(1).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(MAX_TOP_LOGPROBS).nullish(),
  response_format: responseFormatSchema,
  tools: z.array(tool).max(MAX_TOOLS).nullish(),
  tool_choice: toolChoice,
  parallel_tool_calls: z.boolean().nullish(),
});

/** A validated completions body. */
export type CompletionBody = z.infer<typeof completionBodySchema>;
/** A validated chat completions body. */
export type ChatBody = z.infer<typeof chatBodySchema>;

/** Parameters that OpenAI defines but this server does not implement, and why. */
const UNSUPPORTED: Readonly<Record<string, string>> = {
  functions: 'deprecated by OpenAI and not supported here; use tools',
  function_call: 'deprecated by OpenAI and not supported here; use tool_choice',
  audio: 'not supported by this server',
};

function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out;
}

/**
 * Validates a request body against a schema.
 * @throws EngineError `INVALID_REQUEST` naming the first offending field (also in `param`).
 */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.infer<S> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new EngineError('INVALID_REQUEST', 'request body must be a JSON object');
  }
  for (const [key, why] of Object.entries(UNSUPPORTED)) {
    const value = (body as Record<string, unknown>)[key];
    const empty =
      value === undefined ||
      value === null ||
      (Array.isArray(value) && value.length === 0) ||
      (typeof value === 'object' && value !== null && Object.keys(value).length === 0);
    if (!empty) {
      throw new EngineError('INVALID_REQUEST', `${key}: ${why}`, {
        details: { param: key },
      });
    }
  }
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const param = issue ? formatPath(issue.path) : '';
  const text = issue?.message ?? 'invalid request body';
  throw new EngineError('INVALID_REQUEST', param ? `${param}: ${text}` : text, {
    details: param ? { param } : {},
  });
}
