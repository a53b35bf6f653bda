import { performance } from 'node:perf_hooks';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { EngineError } from '../errors.js';
import type { GenerationStream } from '../generation-events.js';
import { prepareRequest, type RequestKind } from '../request/prepare.js';
import { collectResponse } from '../response/collect.js';
import { streamResponse } from '../response/sse.js';
import type { RouteContext } from './context.js';

/**
 * `POST /v1/completions` and `POST /v1/chat/completions`: prepare the request, admit it (every
 * prompt of a batch), then answer with the collected response or an SSE stream.
 */
export function registerGenerationRoutes(app: FastifyInstance, context: RouteContext) {
  const { engine, metrics, inflight, maxN, maxResponseBytes } = context;
  const checkAccepting = () => {
    if (inflight.draining) throw new EngineError('DRAINING', 'server is shutting down');
    const health = engine.health();
    if (health.status !== 'ok') {
      throw new EngineError(
        'DRAINING',
        `engine is ${health.status}${health.detail ? `: ${health.detail}` : ''}`,
      );
    }
  };

  async function handle(kind: RequestKind, request: FastifyRequest, reply: FastifyReply) {
    const arrived = performance.now();
    const prepared = await prepareRequest(kind, request.body, {
      engine,
      maxN,
      checkAccepting,
      ...(maxResponseBytes === undefined ? {} : { maxResponseBytes }),
    });
    const flight = inflight.begin(reply.raw);
    const { controller } = flight;
    try {
      const streams: GenerationStream[] = [];
      try {
        for (const gen of prepared.requests) {
          streams.push(await engine.generate(gen, controller.signal));
        }
      } catch (error) {
        // The prompts of a batch admitted before one was refused end with it.
        if (streams.length > 0) controller.abort(error);
        throw error;
      }
      if (prepared.stream) {
        reply.hijack();
        await streamResponse(prepared, streams[0]!, reply.raw, controller.signal, arrived, metrics);
        return reply;
      }
      return await collectResponse(prepared, streams, controller, arrived, metrics);
    } finally {
      flight.end();
    }
  }

  app.post('/v1/completions', (request, reply) => handle('completion', request, reply));
  app.post('/v1/chat/completions', (request, reply) => handle('chat', request, reply));
}
