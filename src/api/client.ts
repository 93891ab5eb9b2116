// A typed client of the HTTP API for TypeScript services: openapi-fetch over the types
// openapi-typescript generates from the served document (client.generated.ts, kept current by
// test/api/api-document.test.ts; regenerate with `npm run api:client`).
//
//   const api = createApiClient({ baseUrl: 'http://timeout-center:8081', token: process.env.TC_TOKEN! });
//   const { data, error } = await api.POST('/v1/timeouts', { body: { kind: 'order.unpaid', bizId: '42', delayMs: 900_000 } });
import createClient, { type Client } from 'openapi-fetch';
import type { paths } from './client.generated.js';

export type { paths as ApiPaths, components as ApiComponents } from './client.generated.js';
export type ApiClient = Client<paths>;

export interface ApiClientOptions {
  /** e.g. http://127.0.0.1:8081 (no /v1). */
  baseUrl: string;
  /** The bearer token (one of api.tokens / TC_API_TOKENS). */
  token?: string | undefined;
  /** A fetch of your own (timeouts, a proxy agent); the global fetch by default. */
  fetch?: typeof fetch;
}

export function createApiClient(options: ApiClientOptions): ApiClient {
  return createClient<paths>({
    baseUrl: options.baseUrl,
    headers: options.token === undefined ? {} : { authorization: `Bearer ${options.token}` },
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
}
