import type { FastifyInstance } from 'fastify';
import type { ModelCard } from '../inference-engine.js';
import { findModel } from '../request/prepare.js';
import type { RouteContext } from './context.js';

const modelJson = (m: ModelCard) => ({
  id: m.id,
  object: 'model',
  created: m.created,
  owned_by: m.ownedBy,
  max_model_len: m.maxModelLen,
});

/** `GET /v1/models` and `GET /v1/models/:id`. */
export function registerModelRoutes(app: FastifyInstance, { engine }: RouteContext) {
  app.get('/v1/models', async () => ({ object: 'list', data: engine.listModels().map(modelJson) }));
  app.get<{ Params: { id: string } }>('/v1/models/:id', async (request) =>
    modelJson(findModel(engine, request.params.id)),
  );
}
