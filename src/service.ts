// One lifecycle for every background duty (River's startstop and maintenance services): a Service
// has a name, start() and stop(), both idempotent and awaitable. Transitions run one at a time, in
// the order asked, so a stop that arrives while the service starts waits for the start and then
// undoes it; a service stopped may be started again (duties that run only while leading start on
// each election and stop on each deposition).
import type { Logger } from 'pino';

export interface Service {
  readonly name: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The state machine every service shares: subclasses say what starting and stopping do. */
export abstract class BaseService implements Service {
  abstract readonly name: string;
  // ECMAScript private fields: subclasses keep their own names (running, stopping, ...).
  #transition: Promise<void> = Promise.resolve();
  #running = false;

  get isRunning(): boolean {
    return this.#running;
  }

  start(): Promise<void> {
    return this.#enqueue(async () => {
      if (this.#running) return;
      await this.onStart();
      this.#running = true;
    });
  }

  stop(): Promise<void> {
    return this.#enqueue(async () => {
      if (!this.#running) return;
      this.#running = false;
      await this.onStop();
    });
  }

  protected abstract onStart(): Promise<void>;
  protected abstract onStop(): Promise<void>;

  #enqueue(step: () => Promise<void>): Promise<void> {
    const next = this.#transition.then(step);
    this.#transition = next.catch(() => {});
    return next;
  }
}

/** A service made of two callbacks (a timer, a server): for duties too small for a class. */
export function service(name: string, start: () => Promise<void> | void, stop: () => Promise<void> | void): Service {
  return new (class extends BaseService {
    readonly name = name;
    protected async onStart(): Promise<void> {
      await start();
    }
    protected async onStop(): Promise<void> {
      await stop();
    }
  })();
}

/** A service that runs `fn` every `everyMs` while it runs (the first run after one interval), one
 *  run at a time; stop() waits for the run in progress. A run's error goes to `onError`. */
export function periodic(name: string, everyMs: number, fn: () => Promise<void>, onError: (err: unknown) => void): Service {
  let timer: NodeJS.Timeout | undefined;
  let inFlight: Promise<void> | undefined;
  return service(
    name,
    () => {
      timer = setInterval(() => {
        if (inFlight) return;
        inFlight = fn()
          .catch(onError)
          .finally(() => (inFlight = undefined));
      }, everyMs);
    },
    async () => {
      clearInterval(timer);
      timer = undefined;
      await inFlight;
    },
  );
}

/**
 * Services started in order and stopped in reverse order. A start that fails stops what already
 * started (in reverse) and throws; every stop runs even if another fails (each failure logged),
 * and the group's stop throws none of them: a process that stops must release everything it can.
 */
export class ServiceGroup extends BaseService {
  private readonly started: Service[] = [];

  constructor(
    readonly name: string,
    private readonly services: Service[],
    private readonly logger: Logger,
  ) {
    super();
  }

  protected async onStart(): Promise<void> {
    for (const s of this.services) {
      try {
        await s.start();
        this.started.push(s);
      } catch (err) {
        await this.stopStarted();
        throw err;
      }
    }
  }

  protected async onStop(): Promise<void> {
    await this.stopStarted();
  }

  private async stopStarted(): Promise<void> {
    for (const s of this.started.splice(0).reverse()) {
      try {
        await s.stop();
      } catch (err) {
        this.logger.warn({ err, service: s.name, group: this.name }, `stopping ${s.name} failed; stopping the rest`);
      }
    }
  }
}
