// Writes the API's OpenAPI document (docs/openapi.json, for clients in other languages) and the
// TypeScript client's types (src/api/client.generated.ts) from the built server (npm run build
// first; `npm run api:client` does both). test/api/api-document.test.ts fails when either is stale.
import { writeFileSync } from 'node:fs';
import process from 'node:process';
import { fileURLToPath, URL } from 'node:url';
import { openApiDocument } from '../dist/api/document.js';
import { clientSource, documentText } from './api-client.mjs';

const document = await openApiDocument();
writeFileSync(fileURLToPath(new URL('../docs/openapi.json', import.meta.url)), documentText(document));
writeFileSync(fileURLToPath(new URL('../src/api/client.generated.ts', import.meta.url)), await clientSource(document));
process.stdout.write('wrote docs/openapi.json and src/api/client.generated.ts\n');
