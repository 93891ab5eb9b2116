// Who may call the HTTP API: bearer tokens, each allowed a list of kinds and verbs. Tokens come
// from the config file (api.tokens, as SHA-256 hashes: nothing in the file is a secret) and from
// TC_API_TOKENS (a JSON array; an entry may give the token itself, read from the environment or a
// mounted secret, or its sha256). The process keeps hashes only: a request's token is hashed and
// looked up, and logs and errors name a token by its `name`, never by its value.
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { ApiConfig } from '../config.js';
import { InputError } from '../input-error.js';
import { VERBS, type Verb } from './schemas.js';

export class ApiTokenConfigError extends InputError {
  override name = 'ApiTokenConfigError';
}

export interface ApiToken {
  name: string;
  /** SHA-256 of the token, hex. */
  sha256: string;
  kinds: ReadonlySet<string> | 'all';
  verbs: ReadonlySet<Verb>;
}

const envEntry = z
  .strictObject({
    name: z.string().min(1).max(100),
    token: z.string().min(16, 'a token must be at least 16 characters (e.g. `openssl rand -hex 24`)').optional(),
    sha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .optional(),
    kinds: z.array(z.string().min(1)).min(1),
    verbs: z.array(z.enum([...VERBS, '*'])).min(1),
  })
  .refine((e) => (e.token === undefined) !== (e.sha256 === undefined), { message: 'give token or sha256, not both and not neither' });

export function sha256Hex(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

function toToken(e: { name: string; sha256: string; kinds: string[]; verbs: string[] }): ApiToken {
  return {
    name: e.name,
    sha256: e.sha256,
    kinds: e.kinds.includes('*') ? 'all' : new Set(e.kinds),
    verbs: new Set(e.verbs.includes('*') ? VERBS : (e.verbs as Verb[])),
  };
}

/** The tokens of the config file and of TC_API_TOKENS, hashed; a malformed entry is an error
 *  naming where it is (never echoing a token). */
export function resolveApiTokens(config: Pick<ApiConfig, 'tokens'>, env: NodeJS.ProcessEnv = process.env): ApiToken[] {
  const tokens = config.tokens.map(toToken);
  const raw = env['TC_API_TOKENS'];
  if (raw !== undefined && raw.trim() !== '') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      throw new ApiTokenConfigError(
        'TC_API_TOKENS is not valid JSON: give an array like [{"name":"orders","token":"...","kinds":["order.unpaid"],"verbs":["*"]}]',
      );
    }
    const result = z.array(envEntry).safeParse(parsed);
    if (!result.success) {
      const issue = result.error.issues[0]!;
      throw new ApiTokenConfigError(`TC_API_TOKENS[${issue.path.join('.')}]: ${issue.message}`);
    }
    for (const e of result.data) tokens.push(toToken({ ...e, sha256: e.sha256 ?? sha256Hex(e.token!) }));
  }
  const names = new Set<string>();
  const hashes = new Set<string>();
  for (const t of tokens) {
    if (names.has(t.name)) throw new ApiTokenConfigError(`two API tokens are named "${t.name}": give each its own name (the logs name tokens by it)`);
    if (hashes.has(t.sha256)) throw new ApiTokenConfigError(`API tokens "${t.name}" and another share one secret: give each holder its own token`);
    names.add(t.name);
    hashes.add(t.sha256);
  }
  return tokens;
}

export class TokenTable {
  private readonly byHash: Map<string, ApiToken>;
  constructor(tokens: readonly ApiToken[]) {
    this.byHash = new Map(tokens.map((t) => [t.sha256, t]));
  }

  get enabled(): boolean {
    return this.byHash.size > 0;
  }

  /** The token an Authorization header carries, or null (missing, not bearer, unknown). */
  find(header: string | undefined): ApiToken | null {
    if (!header) return null;
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!m) return null;
    return this.byHash.get(sha256Hex(m[1]!)) ?? null;
  }
}

export function allows(token: ApiToken, verb: Verb, kind: string): boolean {
  return token.verbs.has(verb) && (token.kinds === 'all' || token.kinds.has(kind));
}
