// The OpenAPI 3.1 document of the HTTP API, as the server builds it from its routes' zod schemas
// (no database needed: nothing is called). Used by scripts/generate-api-client.mjs (the committed
// docs/openapi.json and src/api/client.generated.ts) and by the test that keeps them current.
import { pino } from 'pino';
import { ApiBackend } from './backend.js';
import { buildApiApp } from './server.js';
import { TokenTable } from './tokens.js';

const noDatabase = {
  query(): Promise<never> {
    return Promise.reject(new Error('the OpenAPI document is built without a database'));
  },
};

export async function openApiDocument(): Promise<Record<string, unknown>> {
  const app = await buildApiApp({
    backend: new ApiBackend({ center: noDatabase, stores: {}, kinds: {} }),
    tokens: new TokenTable([]),
    logger: pino({ level: 'silent' }),
  });
  try {
    return app.swagger() as unknown as Record<string, unknown>;
  } finally {
    await app.close();
  }
}
