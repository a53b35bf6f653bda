import type { ServerResponse } from 'node:http';
import { errorAnswer } from '../errors.js';
import type { GenerationStream } from '../generation-events.js';
import type { ServerMetrics } from '../metrics.js';
import type { PreparedRequest } from '../request/prepare.js';
import { readGeneration, usageJson } from './choices.js';
import { chatLogprobs, completionLogprobs } from './logprobs.js';
import { toolCallChunks, toolCallParser } from './tool-calls.js';

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};

/**
 * How long a stream waits for its client to read anything before it gives up on it: the socket
 * is closed, which aborts the request.
 */
export const STREAM_STALL_MS = 60_000;

/**
 * Writes server-sent events to `raw`, waiting for the socket to drain when it is full, so a
 * slow client slows its writer instead of growing a buffer without bound. A client that reads
 * nothing for `stallMs`, or a request aborted while its writer waits (a timeout, a shutdown),
 * gets its socket closed: a writer never waits forever on a client that stopped reading.
 */
export function sseWriter(
  raw: ServerResponse,
  signal?: AbortSignal,
  stallMs = STREAM_STALL_MS,
): (payload: unknown) => Promise<void> {
  return async (payload) => {
    if (raw.destroyed || raw.writableEnded) return;
    const ok = raw.write(
      `data: ${typeof payload === 'string' ? payload : JSON.stringify(payload)}\n\n`,
    );
    if (!ok && !raw.destroyed) {
      const drained = await new Promise<boolean>((resolve) => {
        const done = (result: boolean) => () => {
          clearTimeout(timer);
          raw.off('drain', onDrain);
          raw.off('close', onDrain);
          signal?.removeEventListener('abort', onGiveUp);
          resolve(result);
        };
        const onDrain = done(true);
        const onGiveUp = done(false);
        const timer = setTimeout(onGiveUp, stallMs);
        raw.on('drain', onDrain);
        raw.on('close', onDrain);
        if (signal?.aborted) onGiveUp();
        else signal?.addEventListener('abort', onGiveUp, { once: true });
      });
      if (!drained) raw.destroy();
    }
  };
}

/**
 * Streams one request's generation as OpenAI's SSE chunks (`text_completion` or
 * `chat.completion.chunk`): the headers at once (the client knows it was admitted), a role
 * chunk per chat choice, a chunk per visible change, the usage chunk when asked, then
 * `[DONE]`. An error after the headers is sent as an error event before `[DONE]`.
 */
export async function streamResponse(
  prepared: PreparedRequest,
  stream: GenerationStream,
  raw: ServerResponse,
  signal: AbortSignal,
  arrived: number,
  metrics: ServerMetrics,
): Promise<void> {
  raw.on('error', () => {
    // A reset connection surfaces through 'close', which aborts the request.
  });
  raw.writeHead(200, SSE_HEADERS);
  raw.flushHeaders();
  const write = sseWriter(raw, signal);
  const request = prepared.requests[0]!;
  const isChat = prepared.kind === 'chat';
  const base = {
    id: request.id,
    object: isChat ? 'chat.completion.chunk' : 'text_completion',
    created: prepared.created,
    model: request.model,
  };
  const usageField = prepared.includeUsage ? { usage: null } : {};
  const wantLogprobs = request.logprobs !== undefined;
  const syntax = prepared.toolCalls;
  const parsers = syntax ? Array.from({ length: request.n }, () => toolCallParser(syntax)) : [];
  if (isChat) {
    for (let i = 0; i < request.n; i++) {
      await write({
        ...base,
        choices: [
          {
            index: i,
            delta: { role: 'assistant', content: '' },
            logprobs: null,
            finish_reason: null,
          },
        ],
        ...usageField,
      });
    }
  }
  try {
    const tally = await readGeneration(
      request,
      stream,
      signal,
      arrived,
      metrics,
      async (index, e) => {
        const logprobs =
          wantLogprobs && e.logprobs.length > 0
            ? isChat
              ? chatLogprobs(e.logprobs)
              : completionLogprobs(e.logprobs, (request.logprobs ?? 0) > 0)
            : null;
        const parser = parsers[index];
        if (parser) {
          // Tool calls: the text splits into content and call deltas, each its own chunk.
          const choices = toolCallChunks(parser, e.text, e.finishReason, logprobs !== null);
          for (const [k, { delta, finish_reason }] of choices.entries()) {
            const choice = { index, delta, logprobs: k === 0 ? logprobs : null, finish_reason };
            await write({ ...base, choices: [choice], ...usageField });
          }
          return;
        }
        const choice = isChat
          ? {
              index,
              delta: e.text === '' && e.finishReason !== undefined ? {} : { content: e.text },
              logprobs,
              finish_reason: e.finishReason ?? null,
            }
          : { index, text: e.text, logprobs, finish_reason: e.finishReason ?? null };
        await write({ ...base, choices: [choice], ...usageField });
      },
    );
    if (prepared.includeUsage) {
      await write({ ...base, choices: [], usage: usageJson(tally.usage) });
    }
  } catch (error) {
    if (raw.destroyed) return;
    const answer = errorAnswer(error);
    metrics.observeError(answer.body.error.code);
    await write(answer.body);
  }
  await write('[DONE]');
  if (!raw.writableEnded) raw.end();
}
