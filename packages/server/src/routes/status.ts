import type { FastifyInstance } from 'fastify';
import type { RouteContext } from './context.js';

/** `GET /health` (200 `ok`, else 503 with the reason) and `GET /metrics` (Prometheus text). */
export function registerStatusRoutes(
  app: FastifyInstance,
  { engine, metrics, inflight }: RouteContext,
) {
  app.get('/health', async (_request, reply) => {
    const health = engine.health();
    const status = inflight.draining ? 'draining' : health.status;
    return reply.code(status === 'ok' ? 200 : 503).send({ status, detail: health.detail ?? null });
  });

  app.get('/metrics', async (_request, reply) => {
    const text = await metrics.render();
    return reply.type(metrics.registry.contentType).send(text);
  });
}
