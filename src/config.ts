// Typed, validated configuration (config/): the one schema and its types (config/schema.ts, built
// from config/kinds.ts and config/sections.ts, checked across fields by config/checks.ts), and its
// loading from a file or object and the environment (config/load.ts). Every module imports the
// configuration from here.
export type { RedisConnectionConfig, RedisNode } from './redis-config.js';
export { BUSINESS_DATABASE_NAME } from './config/kinds.js';
export {
  configSchema,
  ConfigError,
  databaseSilenceMs,
  parseConfig,
  type AlertsConfig,
  type ApiConfig,
  type BreakerConfig,
  type Config,
  type ConfigInput,
  type CoordinatorConfig,
  type HandlerConfig,
  type KindConfig,
  type LoadedConfig,
  type RetentionConfig,
  type RouteConfig,
  type WorkerConfig,
} from './config/schema.js';
export { loadConfig, readConfigFile, resolveBusinessDatabaseUrls, type ConfigOverrides, type LoadOptions } from './config/load.js';
