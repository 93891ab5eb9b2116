// docs/reference/config.md names every field of the config schema (src/config.ts), so a field added
// to the schema without its line in the reference fails here.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { configSchema } from '../../src/config.js';

interface JsonSchema {
  properties?: Record<string, JsonSchema>;
  additionalProperties?: JsonSchema | boolean;
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  allOf?: JsonSchema[];
}

/** Every field's path: `kinds.<name>.shardSize`, `api.tokens[].name`. */
function fieldPaths(schema: JsonSchema, path = '', out = new Set<string>()): Set<string> {
  for (const alt of [...(schema.anyOf ?? []), ...(schema.oneOf ?? []), ...(schema.allOf ?? [])]) fieldPaths(alt, path, out);
  for (const [key, sub] of Object.entries(schema.properties ?? {})) {
    const p = path ? `${path}.${key}` : key;
    out.add(p);
    fieldPaths(sub, p, out);
  }
  if (typeof schema.additionalProperties === 'object') fieldPaths(schema.additionalProperties, `${path}.<name>`, out);
  if (schema.items) fieldPaths(schema.items, `${path}[]`, out);
  return out;
}

describe('docs/reference/config.md', () => {
  it('names every field of the config schema', () => {
    const page = readFileSync(fileURLToPath(new URL('../../docs/reference/config.md', import.meta.url)), 'utf8');
    const schema = z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
    const paths = [...fieldPaths(schema)]
      // a Redis node may be written { host, port }: the node, not a field of its own
      .filter((p) => !/^redis\.(cluster|sentinels)\[\]\./.test(p));
    // a section (`worker`) is documented by its fields
    const leaves = paths.filter((p) => !paths.some((q) => q.startsWith(`${p}.`)));
    const missing = leaves.filter((p) => !page.includes(`\`${p}\``) && !page.includes(`\`${p},`) && !page.includes(`, \`${p}\``));
    expect(paths.length).toBeGreaterThan(80);
    expect(missing).toEqual([]);
  });
});
