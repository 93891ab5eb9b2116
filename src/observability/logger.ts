import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger } from 'pino';

/** JSON lines on stdout (one per event), the format log collectors expect. Scope with
 *  logger.child({ scanId, shardId, workerId }). */
export function createLogger(level: LevelWithSilent = 'info', bindings: Record<string, unknown> = {}, options: { sync?: boolean } = {}): Logger {
  const settings = {
    level,
    base: { pid: process.pid, ...bindings },
    timestamp: pino.stdTimeFunctions.isoTime,
    serializers: { err: pino.stdSerializers.err },
  };
  // sync: each line written before the call returns (a short command that prints after its logs).
  return options.sync ? pino(settings, pino.destination({ dest: 1, sync: true })) : pino(settings);
}
