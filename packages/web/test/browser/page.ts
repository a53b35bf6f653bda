// The test page's script: @kvasir/web's entry, bundled for the browser, on `window.kvasir`;
// its AI SDK provider and the AI SDK itself (with `Output`, `jsonSchema` and `tool`) on `window.aiSdk` and `window.ai`; the offload frame
// encoder on `window.encodeFrame`, for tests that forge OPFS entries.
import { encodeFrame } from '@kvasir/offload/portable';
import { generateText, jsonSchema, Output, streamText, tool } from 'ai';
import * as aiSdk from '../../src/ai-sdk.js';
import * as kvasir from '../../src/index.js';

Object.assign(globalThis, {
  kvasir,
  aiSdk,
  ai: { generateText, streamText, Output, jsonSchema, tool },
  encodeFrame,
});
