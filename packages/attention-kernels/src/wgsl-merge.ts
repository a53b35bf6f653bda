// Kernels that both load and store cache rows (the key shift) include a format's load WGSL and
// its store WGSL, and both carry the format's shared helpers (int8 codecs, Hadamard butterflies):
// WGSL refuses a second declaration of a name, so the second copy goes.

const DECL =
  /^(?:\s|\/\/[^\n]*\n)*(?:@\w+(?:\([^)]*\))?\s*)*(?:fn|const|struct|alias|override|var(?:<[^>]*>)?)\s+(\w+)/;

/** Top-level declarations of a WGSL module, in order, each with its leading comments. */
function topLevel(code: string): string[] {
  const items: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < code.length; i++) {
    const ch = code[i];
    if (ch === '/' && code[i + 1] === '/') {
      const end = code.indexOf('\n', i);
      i = end < 0 ? code.length : end;
      continue;
    }
    if (ch === '{' || ch === '(') depth++;
    else if (ch === '}' || ch === ')') {
      depth--;
      if (depth === 0 && ch === '}') {
        items.push(code.slice(start, i + 1));
        start = i + 1;
      }
    } else if (ch === ';' && depth === 0) {
      items.push(code.slice(start, i + 1));
      start = i + 1;
    }
  }
  const rest = code.slice(start);
  if (rest.trim() !== '') items.push(rest);
  return items;
}

/** Declared names of a WGSL module's top-level items. */
function declared(code: string): Set<string> {
  const names = new Set<string>();
  for (const item of topLevel(code)) {
    const m = DECL.exec(item);
    if (m) names.add(m[1] as string);
  }
  return names;
}

/**
 * `first` followed by the declarations of `second` whose names `first` does not declare: both
 * come from the same format's generators, so a repeated name is the same helper.
 *
 * @internal
 */
export function mergeWgsl(first: string, second: string): string {
  const have = declared(first);
  const kept = topLevel(second).filter((item) => {
    const m = DECL.exec(item);
    return m === null || !have.has(m[1] as string);
  });
  return `${first}\n${kept.join('')}\n`;
}
