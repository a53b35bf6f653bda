/** `@mlc-ai/web-xgrammar`'s `lib/index.js` as text (resolved by `build/xgrammar-bundle.ts`). */
declare module 'virtual:xgrammar-bundle' {
  const text: string;
  export default text;
}
