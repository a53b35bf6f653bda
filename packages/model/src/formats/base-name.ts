/**
 * The last segment of a path, as `node:path`'s `basename` gives it for `/` and `\` separators:
 * the readers name files in their messages, and in a browser there is no `node:path`.
 * @internal
 */
export function basename(path: string): string {
  const trimmed = path.replace(/[/\\]+$/, '');
  const cut = Math.max(trimmed.lastIndexOf('/'), trimmed.lastIndexOf('\\'));
  return trimmed.slice(cut + 1);
}
