// The request fields of structured outputs: OpenAI's `response_format` (chat), vLLM's guided
// decoding fields (`guided_json`, `guided_regex`, `guided_grammar`, `guided_choice`, on both
// endpoints, as vLLM's OpenAI server names them) and `logit_bias`, turned into the engine's
// `OutputConstraint` and `SamplingParams.logitBias`.
import { z } from 'zod';
import { EngineError } from '../errors.js';
import type { OutputConstraint } from '../inference-engine.js';

const jsonSchema = z.union([z.record(z.string(), z.unknown()), z.boolean()]);

/** `response_format` of a chat body (OpenAI's shapes). */
export const responseFormatSchema = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('text') }),
    z.object({ type: z.literal('json_object') }),
    z.object({
      type: z.literal('json_schema'),
      json_schema: z.object({
        name: z
          .string()
          .max(64)
          .regex(/^[A-Za-z0-9_-]+$/, 'must be letters, digits, _ or -'),
        description: z.string().nullish(),
        // OpenAI: absent means any JSON object.
        schema: jsonSchema.nullish(),
        // Accepted for compatibility: the schema is always enforced (as vLLM does).
        strict: z.boolean().nullish(),
      }),
    }),
  ])
  .nullish();

/** vLLM's guided decoding fields and OpenAI's `logit_bias`, for both endpoints. */
export const guidedFields = {
  guided_json: z.union([z.string(), jsonSchema]).nullish(),
  guided_regex: z.string().min(1).nullish(),
  guided_grammar: z.string().min(1).nullish(),
  guided_choice: z.array(z.string().min(1)).min(1).max(1024).nullish(),
  logit_bias: z
    .record(z.string().regex(/^\d+$/, 'keys must be token ids'), z.number().min(-100).max(100))
    .refine((o) => Object.keys(o).length <= 1024, 'at most 1024 entries')
    .nullish(),
};

interface StructuredBody {
  readonly response_format?: z.infer<typeof responseFormatSchema>;
  readonly guided_json?: string | boolean | Record<string, unknown> | null;
  readonly guided_regex?: string | null;
  readonly guided_grammar?: string | null;
  readonly guided_choice?: readonly string[] | null;
  readonly logit_bias?: Record<string, number> | null;
}

const invalid = (param: string, message: string) =>
  new EngineError('INVALID_REQUEST', `${param}: ${message}`, { details: { param } });

/** A GBNF string literal of `text`. */
function literal(text: string): string {
  let out = '"';
  for (const ch of text) {
    const c = ch.codePointAt(0)!;
    if (ch === '"' || ch === '\\') out += `\\${ch}`;
    else if (c < 0x20 || c === 0x7f) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else out += ch;
  }
  return `${out}"`;
}

/**
 * The output constraint a body asks for, or undefined.
 * @throws EngineError `INVALID_REQUEST` when it asks for two at once, or `guided_json` is text
 *   that is not JSON.
 */
export function outputConstraint(body: StructuredBody): OutputConstraint | undefined {
  const found: OutputConstraint[] = [];
  const format = body.response_format;
  if (format?.type === 'json_object') found.push({ kind: 'json_object', param: 'response_format' });
  if (format?.type === 'json_schema') {
    const schema = format.json_schema.schema;
    found.push(
      schema == null
        ? { kind: 'json_object', param: 'response_format' }
        : { kind: 'json_schema', schema, param: 'response_format' },
    );
  }
  if (body.guided_json != null) {
    let schema: unknown = body.guided_json;
    if (typeof schema === 'string') {
      try {
        schema = JSON.parse(schema) as unknown;
      } catch (e) {
        throw invalid('guided_json', `not a JSON schema: ${(e as Error).message}`);
      }
    }
    found.push({ kind: 'json_schema', schema, param: 'guided_json' });
  }
  if (body.guided_regex != null) {
    found.push({ kind: 'regex', pattern: body.guided_regex, param: 'guided_regex' });
  }
  if (body.guided_grammar != null) {
    found.push({ kind: 'grammar', grammar: body.guided_grammar, param: 'guided_grammar' });
  }
  if (body.guided_choice != null) {
    found.push({
      kind: 'grammar',
      grammar: `root ::= ${body.guided_choice.map(literal).join(' | ')}`,
      param: 'guided_choice',
    });
  }
  if (found.length > 1) {
    throw invalid(
      found[1]!.param!,
      `only one of response_format (json), guided_json, guided_regex, guided_grammar and guided_choice per request (also got ${found[0]!.param})`,
    );
  }
  return found[0];
}

/** `logit_bias` with numeric keys, or undefined when absent or empty. */
export function logitBias(body: StructuredBody): Record<number, number> | undefined {
  const bias = body.logit_bias;
  if (!bias || Object.keys(bias).length === 0) return undefined;
  const out: Record<number, number> = {};
  for (const [key, value] of Object.entries(bias)) out[Number(key)] = value;
  return out;
}
