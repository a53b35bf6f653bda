import { EngineError } from '../errors.js';

/** Where `path` is in the body, as `messages[0].content`. */
function describe(path: readonly (string | number)[]): string {
  let out = '';
  for (const key of path)
    out += typeof key === 'number' ? `[${key}]` : out === '' ? key : `.${key}`;
  return out;
}

/**
 * The first `__proto__` key, or `constructor` holding a `prototype`: keys that reach an
 * object's prototype once the body is merged or spread somewhere.
 */
function findPoisonedKey(value: unknown): { key: string; path: string } | undefined {
  const stack: { value: unknown; path: (string | number)[] }[] = [{ value, path: [] }];
  while (stack.length > 0) {
    const { value: node, path } = stack.pop()!;
    if (typeof node !== 'object' || node === null) continue;
    if (Array.isArray(node)) {
      for (const [i, item] of node.entries()) stack.push({ value: item, path: [...path, i] });
      continue;
    }
    for (const key of Object.keys(node)) {
      const child = (node as Record<string, unknown>)[key];
      if (
        key === '__proto__' ||
        (key === 'constructor' &&
          typeof child === 'object' &&
          child !== null &&
          'prototype' in child)
      ) {
        return { key, path: describe([...path, key]) };
      }
      stack.push({ value: child, path: [...path, key] });
    }
  }
  return undefined;
}

/**
 * Parses a JSON request body. A body naming `__proto__` (or `constructor.prototype`) is refused
 * by name rather than as "not valid JSON": it is valid JSON, only not accepted here.
 * @throws EngineError `INVALID_REQUEST`: empty or malformed JSON, or a prototype key (its path
 *   in `param`).
 */
export function parseJsonBody(text: string): unknown {
  if (text.trim() === '') throw new EngineError('INVALID_REQUEST', 'the request body is empty');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new EngineError(
      'INVALID_REQUEST',
      `the request body is not valid JSON: ${(error as Error).message}`,
    );
  }
  // The walk runs only for bodies that could hold such a key (escaped spellings included).
  if (/proto|constructor|\\u/i.test(text)) {
    const found = findPoisonedKey(value);
    if (found !== undefined) {
      throw new EngineError(
        'INVALID_REQUEST',
        `${found.path}: the key "${found.key}" is not allowed in a request body`,
        { details: { param: found.path } },
      );
    }
  }
  return value;
}
