// Offline checks of the fleet files: nothing here can start a container, so CI checks what it can
// without an engine. The compose file renders (`docker compose config` when the plugin answers,
// else Debian's `docker-compose config`), the kustomization renders (`kubectl kustomize`), the
// Dockerfile's entrypoint and copied paths exist, every verb the deployments run exists in the
// CLI, and every metric the Grafana dashboard and the alert rules query exists (with its labels)
// in the process's registry. Where a renderer is missing, its test is skipped and the file-level
// checks still run; under CI a missing renderer fails its test (.ci/run installs both).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { Metrics } from '../../src/observability/metrics.js';
import { ROLE_MARK, ROLES } from '../../src/db/roles.js';
import { requireTools, toolCommand } from '../helpers/system-tools.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(ROOT, 'dist/cli/main.js');
const METRICS_PORT = '9464';

// Free-form YAML/JSON walked by path; a wrong path fails the expectation that reads it.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Doc = Record<string, any>;

const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');
// merge: compose files share settings through `<<: *anchor` (YAML 1.1 merge keys).
const yamlFile = (path: string): Doc => parseYaml(read(path), { merge: true }) as Doc;

function run(cmd: string, args: string[], cwd = ROOT) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout: 60_000 });
  return { ok: r.status === 0 && !r.error, status: r.status, stdout: r.stdout ?? '', stderr: (r.stderr ?? '') + (r.error ? String(r.error) : '') };
}

let verbs: Set<string>;
const helpOf = new Map<string, string>();

function cliHelp(verb?: string): string {
  const key = verb ?? '';
  if (!helpOf.has(key)) {
    const r = run(process.execPath, [CLI, ...(verb ? [verb] : []), '--help']);
    expect(r.status, `timeout-center ${key} --help: ${r.stderr}`).toBe(0);
    helpOf.set(key, r.stdout);
  }
  return helpOf.get(key)!;
}

/** A timeout-center command line (after the entrypoint): the verb exists and every --flag is one
 *  of its options. */
function expectCliCommand(args: string[], where: string): void {
  const [verb, ...rest] = args;
  expect(verbs, `${where}: verb "${verb}" is not a timeout-center command`).toContain(verb);
  const help = cliHelp(verb);
  for (const flag of rest.filter((a) => a.startsWith('--'))) {
    expect(help, `${where}: \`${verb}\` has no option ${flag}`).toContain(flag.split('=')[0]);
  }
  const port = rest.indexOf('--port');
  if (port >= 0) expect(rest[port + 1], `${where}: metrics port`).toBe(METRICS_PORT);
}

beforeAll(() => {
  expect(existsSync(CLI), `${CLI} is missing: run \`npm run build\` (npm test does)`).toBe(true);
  const help = cliHelp();
  const commands = help.slice(help.indexOf('Commands:'));
  verbs = new Set([...commands.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!));
  expect([...verbs]).toEqual(expect.arrayContaining(['migrate', 'coordinator', 'worker', 'run', 'demo', 'generate']));
});

describe('Dockerfile', () => {
  const text = read('Dockerfile');
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const stages = lines.map((l, i) => [l, i] as const).filter(([l]) => /^FROM\s/i.test(l));
  const finalStage = lines.slice(stages.at(-1)![1]);

  it('is multi-stage with a small, non-root runtime stage holding production dependencies only', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(finalStage[0]).toMatch(/^FROM node:24-(slim|alpine)\b/);
    expect(finalStage.some((l) => /^RUN npm ci --omit=dev\b/.test(l))).toBe(true);
    const user = finalStage.filter((l) => /^USER\s/.test(l)).at(-1);
    expect(user, 'the runtime stage sets USER').toBeDefined();
    expect(user).not.toMatch(/^USER\s+(root|0)(:|$)/);
    expect(
      lines.some((l) => /^RUN npm run build\b/.test(l)),
      'a stage builds the TypeScript',
    ).toBe(true);
  });

  it('its entrypoint is the built CLI, and every path it copies exists and is in the build context', () => {
    const entry = finalStage.find((l) => l.startsWith('ENTRYPOINT'));
    expect(JSON.parse(entry!.slice('ENTRYPOINT'.length))).toEqual(['node', 'dist/cli/main.js']);
    expect(existsSync(CLI)).toBe(true);
    expect(finalStage.some((l) => /^COPY --from=build \/app\/dist\b/.test(l))).toBe(true);
    const ignored = read('.dockerignore')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    expect(ignored).toEqual(expect.arrayContaining(['node_modules', 'dist', '.git']));
    for (const line of lines.filter((l) => /^COPY\s/.test(l) && !l.includes('--from='))) {
      const sources = line.split(/\s+/).slice(1, -1);
      for (const src of sources) {
        expect(existsSync(join(ROOT, src)), `${line}: ${src} does not exist`).toBe(true);
        expect(ignored, `${line}: ${src} is excluded by .dockerignore`).not.toContain(src.replace(/^\.\//, '').replace(/\/$/, ''));
      }
    }
    // The migrations are read from <app>/sql at run time (two levels above dist/db).
    expect(finalStage.some((l) => /^COPY sql\b/.test(l))).toBe(true);
  });

  it('holds the text files the npm package ships (LICENSE, README, CHANGELOG), and its example tag is the package version', () => {
    const copied = finalStage.filter((l) => /^COPY\s/.test(l) && !l.includes('--from=')).flatMap((l) => l.split(/\s+/).slice(1, -1));
    expect(copied).toEqual(expect.arrayContaining(['LICENSE', 'README.md', 'CHANGELOG.md']));
    const version = (JSON.parse(read('package.json')) as { version: string }).version;
    expect([...text.matchAll(/timeout-center:(\d[\w.-]*)/g)].map((m) => m[1])).toEqual([version, version]);
  });
});

describe('docker-compose.yml', () => {
  const compose = yamlFile('docker-compose.yml');
  const services = compose['services'] as Record<string, Doc>;
  const tcServices = Object.entries(services).filter(([, s]) => s['image'] === 'timeout-center:local');

  it('declares the whole fleet, and the dev servers alone still come up with `docker compose up postgres redis`', () => {
    expect(Object.keys(services)).toEqual(
      expect.arrayContaining(['postgres', 'redis', 'migrate', 'coordinator-1', 'coordinator-2', 'worker', 'console', 'generator', 'prometheus', 'grafana']),
    );
    expect(services['worker']!['deploy']['replicas']).toBe(3);
    // npm start / npm test on the host use these ports, passwordless like the machine's servers.
    expect(services['postgres']!['ports']).toContain('5432:5432');
    expect(services['postgres']!['environment']['POSTGRES_HOST_AUTH_METHOD']).toBe('trust');
    // prepared transactions on: external kinds' first runs commit in two phases (README 3b)
    expect(services['postgres']!['command']).toEqual(['postgres', '-c', 'max_prepared_transactions=64']);
    expect(services['redis']!['ports']).toContain('6379:6379');
    expect(services['postgres']!['depends_on']).toBeUndefined();
    expect(services['redis']!['depends_on']).toBeUndefined();
  });

  it('runs commands the CLI has, with the URLs and config they need, and mounts files that exist', () => {
    for (const [name, s] of tcServices) {
      expectCliCommand(s['command'] as string[], `compose service ${name}`);
      expect(s['environment']['DATABASE_URL'], name).toMatch(/^postgres:\/\/.*@postgres:5432\//);
      expect(s['environment']['REDIS_URL'], name).toBe('redis://redis:6379');
    }
    for (const [name, s] of Object.entries(services)) {
      for (const v of (s['volumes'] ?? []) as string[]) {
        const host = v.split(':')[0]!;
        if (host.startsWith('.')) expect(existsSync(join(ROOT, host)), `compose service ${name}: ${host} does not exist`).toBe(true);
      }
    }
    // Workers and coordinators wait for the migration; the migration waits for PostgreSQL.
    expect(services['migrate']!['depends_on']['postgres']['condition']).toBe('service_healthy');
    // The console listens on all addresses in its container: it has auth from the environment.
    expect(services['console']!['environment']['TC_CONSOLE_PASSWORD']).toBeTruthy();
    for (const name of ['coordinator-1', 'coordinator-2', 'worker', 'console', 'generator']) {
      expect(services[name]!['depends_on']['migrate']['condition'], name).toBe('service_completed_successfully');
    }
  });

  it('the fleet configs are valid, and the generator feeds a declared kind whose table the init script creates', () => {
    for (const file of ['deploy/config/timeout-center.yaml', 'deploy/k8s/timeout-center.yaml']) {
      const config = parseConfig(yamlFile(file), file); // throws ConfigError naming the field
      for (const [kind, k] of Object.entries(config.kinds)) {
        if (k.handler.type === 'sql') expect(k.handler.sql, `${file}: ${kind}`).toMatch(/\bUPDATE orders\b/);
      }
    }
    const config = parseConfig(yamlFile('deploy/config/timeout-center.yaml'));
    const gen = services['generator']!['command'] as string[];
    const kindFlag = gen.indexOf('--kind');
    const kind = kindFlag >= 0 ? gen[kindFlag + 1]! : 'order.unpaid'; // the verb's default
    expect(Object.keys(config.kinds)).toContain(kind);
    // Workers check their handler SQL at start: the orders table exists from PostgreSQL's first boot.
    const initdb = (services['postgres']!['volumes'] as string[]).find((v) => v.endsWith(':/docker-entrypoint-initdb.d:ro'));
    expect(read(`${initdb!.split(':')[0]}/10-orders.sql`)).toMatch(/CREATE TABLE IF NOT EXISTS orders/);
    expect(cliHelp('generate')).toContain(`(default: "order.unpaid")`);
  });

  it('runs each process with the least role it needs: the logins the init step creates (docs/roles.md)', () => {
    const userOf = (name: string) => new URL(services[name]!['environment']['DATABASE_URL'] as string).username;
    expect(userOf('migrate')).toBe('postgres'); // the schema's owner
    for (const name of ['coordinator-1', 'coordinator-2', 'worker', 'console']) expect(userOf(name), name).toBe('tc_engine');
    expect(userOf('generator')).toBe('tc_shop');
    const initdb = (services['postgres']!['volumes'] as string[]).find((v) => v.endsWith(':/docker-entrypoint-initdb.d:ro'))!.split(':')[0]!;
    const roles = read(`${initdb}/20-roles.sql`);
    expect(roles).toMatch(/GRANT timeout_center_engine TO tc_engine;/);
    expect(roles).toMatch(/GRANT timeout_center_writer TO tc_shop;/);
    // The group roles are marked as migrate marks them, so that migrate keeps them.
    for (const role of Object.values(ROLES)) {
      expect(roles).toContain(`CREATE ROLE ${role} NOLOGIN;`);
      expect(roles).toContain(`COMMENT ON ROLE ${role} IS '${ROLE_MARK}';`);
    }
  });

  it('renders with the compose CLI', (ctx) => {
    // Checked in the test, not at collection: under CI only this test fails, the file-level ones run.
    const compose = requireTools('docker-compose');
    ctx.skip(compose.skip, compose.reason);
    const [cmd, ...args] = toolCommand('docker-compose');
    const r = run(cmd, [...args, '-f', 'docker-compose.yml', 'config']);
    expect(r.status, `${[cmd, ...args].join(' ')} config: ${r.stderr}`).toBe(0);
    const rendered = parseYaml(r.stdout) as Doc;
    expect(Object.keys(rendered['services']).sort()).toEqual(Object.keys(services).sort());
    // Anchors and merges resolved: every fleet process got the shared settings.
    expect(rendered['services']['coordinator-2']['environment']['TIMEOUT_CENTER_CONFIG']).toBe('/etc/timeout-center/config.yaml');
    expect(rendered['services']['worker']['deploy']['replicas']).toBe(3);
  });

  it('Prometheus scrapes every timeout-center process on its metrics port', () => {
    const prom = yamlFile('deploy/prometheus/prometheus.yml');
    const jobs = prom['scrape_configs'] as Doc[];
    const staticTargets = jobs.flatMap((j) => (j['static_configs'] ?? []).flatMap((c: Doc) => c['targets'] as string[]));
    const dnsNames = jobs.flatMap((j) => (j['dns_sd_configs'] ?? []).flatMap((c: Doc) => (c['names'] as string[]).map((n) => `${n}:${c['port']}`)));
    const scraped = new Set([...staticTargets, ...dnsNames]);
    const longRunning = tcServices.filter(([, s]) => ['coordinator', 'worker', 'run'].includes((s['command'] as string[])[0]!));
    expect(longRunning.length).toBe(3);
    for (const [name] of longRunning) expect(scraped, `Prometheus does not scrape ${name}`).toContain(`${name}:${METRICS_PORT}`);
    for (const file of prom['rule_files'] as string[]) {
      expect(existsSync(join(ROOT, 'deploy/prometheus', file.replace('/etc/prometheus/', ''))), file).toBe(true);
    }
  });
});

describe('Kubernetes manifests (deploy/k8s, kustomize)', () => {
  const dir = join(ROOT, 'deploy/k8s');
  const kustomization = yamlFile('deploy/k8s/kustomization.yaml');

  it('deploys the image of the package version', () => {
    const version = (JSON.parse(read('package.json')) as { version: string }).version;
    expect(kustomization['images']).toEqual([{ name: 'timeout-center', newName: 'timeout-center', newTag: version }]);
  });

  function rawDocs(): Doc[] {
    return (kustomization['resources'] as string[]).flatMap((file) => {
      expect(existsSync(join(dir, file)), `kustomization.yaml lists ${file}, which does not exist`).toBe(true);
      return parseAllDocuments(read(`deploy/k8s/${file}`)).map((d) => {
        expect(d.errors, file).toEqual([]);
        return d.toJS() as Doc;
      });
    });
  }

  function checkResources(docs: Doc[], rendered: boolean): void {
    for (const d of docs) {
      expect(d['apiVersion'], JSON.stringify(d).slice(0, 200)).toBeTruthy();
      expect(d['kind']).toBeTruthy();
      expect(d['metadata']?.['name']).toBeTruthy();
    }
    const byKind = (kind: string) => docs.filter((d) => d['kind'] === kind);
    const deployments = new Map(byKind('Deployment').map((d) => [d['metadata']['name'] as string, d]));
    const coordinator = deployments.get('timeout-center-coordinator');
    const worker = deployments.get('timeout-center-worker');
    expect(coordinator?.['spec']['replicas']).toBe(2);
    expect(worker).toBeDefined();
    expect(deployments.get('timeout-center-console')?.['spec']['template']['spec']['containers'][0]['args'][0]).toBe('console');
    expect(byKind('Job').map((j) => j['spec']['template']['spec']['containers'][0]['args'][0])).toEqual(['migrate']);
    expect(byKind('PodDisruptionBudget').length).toBe(2);
    expect(byKind('ServiceMonitor').length).toBe(1);
    expect(byKind('HorizontalPodAutoscaler')[0]?.['spec']['scaleTargetRef']['name']).toBe('timeout-center-worker');

    const configMaps = byKind('ConfigMap').map((c) => c['metadata']['name'] as string);
    if (rendered) {
      expect(configMaps.length).toBe(1);
      expect(configMaps[0]).toMatch(/^timeout-center-config-[a-z0-9]+$/); // content hash: a change rolls the pods
      for (const d of docs)
        expect(d['metadata']['namespace'] ?? (d['kind'] === 'Namespace' ? 'n/a' : undefined), `${d['kind']} ${d['metadata']['name']}`).toBeDefined();
    }
    const pods = [...deployments.values(), ...byKind('Job')];
    for (const owner of pods) {
      const where = `${owner['kind']} ${owner['metadata']['name']}`;
      const spec = owner['spec']['template']['spec'];
      expect(spec['securityContext']['runAsNonRoot'], where).toBe(true);
      const volumes = spec['volumes'] as Doc[];
      for (const c of spec['containers'] as Doc[]) {
        expect(c['image'], where).toMatch(/^timeout-center(:|$)/);
        expectCliCommand(c['args'] as string[], where);
        const env = new Map((c['env'] as Doc[]).map((e) => [e['name'] as string, e]));
        for (const key of ['DATABASE_URL', 'REDIS_URL']) {
          // Least privilege (docs/roles.md): only the migrate Job holds the schema owner's URL, from a
          // Secret of its own; every other pod connects as the engine's login.
          const secret = owner['kind'] === 'Job' && key === 'DATABASE_URL' ? 'timeout-center-migrate' : 'timeout-center-connections';
          expect(env.get(key)?.['valueFrom']?.['secretKeyRef'], `${where}: ${key} from the Secret`).toEqual({ name: secret, key });
        }
        // The config file comes from the generated ConfigMap.
        const configPath = env.get('TIMEOUT_CENTER_CONFIG')?.['value'] as string;
        const mount = (c['volumeMounts'] as Doc[]).find((m) => configPath?.startsWith(`${m['mountPath']}/`));
        expect(mount, `${where}: TIMEOUT_CENTER_CONFIG is not under a mounted volume`).toBeDefined();
        const volume = volumes.find((v) => v['name'] === mount!['name']);
        const cmName = volume?.['configMap']?.['name'];
        if (rendered) expect(configMaps, where).toContain(cmName);
        else expect(cmName, where).toBe('timeout-center-config');
        if (owner['kind'] === 'Deployment') {
          // The console serves people on its http port (8080, auth from its Secret); the fleet
          // processes serve metrics and probes on 9464.
          const console = c['name'] === 'console';
          const portName = console ? 'http' : 'metrics';
          const port = (c['ports'] as Doc[]).find((p) => p['name'] === portName);
          expect(String(port?.['containerPort']), where).toBe(console ? '8080' : METRICS_PORT);
          expect(c['livenessProbe']['httpGet'], where).toEqual({ path: '/healthz', port: portName });
          expect(c['readinessProbe']['httpGet'], where).toEqual({ path: '/readyz', port: portName });
          if (console) {
            for (const key of ['TC_CONSOLE_USER', 'TC_CONSOLE_PASSWORD']) {
              expect(env.get(key)?.['valueFrom']?.['secretKeyRef'], `${where}: ${key} from the Secret`).toEqual({ name: 'timeout-center-console', key });
            }
          }
        }
      }
    }
    // The generated file is the config (and it is a valid one: every kind has a handler).
    const gen = (kustomization['configMapGenerator'] as Doc[])[0]!;
    for (const f of gen['files'] as string[]) {
      const file = f.split('=').at(-1)!;
      expect(existsSync(join(dir, file)), file).toBe(true);
    }
    // Services, ServiceMonitor and PDBs select pods that exist.
    const podLabels = [...deployments.values()].map((d) => d['spec']['template']['metadata']['labels'] as Record<string, string>);
    const matches = (selector: Record<string, string>) => podLabels.some((l) => Object.entries(selector).every(([k, v]) => l[k] === v));
    for (const s of byKind('Service')) expect(matches(s['spec']['selector']), `Service ${s['metadata']['name']}`).toBe(true);
    for (const p of byKind('PodDisruptionBudget')) expect(matches(p['spec']['selector']['matchLabels']), `PDB ${p['metadata']['name']}`).toBe(true);
    const sm = byKind('ServiceMonitor')[0]!;
    const services = byKind('Service').filter((s) =>
      Object.entries(sm['spec']['selector']['matchLabels'] as Record<string, string>).every(([k, v]) => s['metadata']['labels'][k] === v),
    );
    expect(services.length).toBe(2);
    for (const s of services) expect((s['spec']['ports'] as Doc[]).map((p) => p['name'])).toContain(sm['spec']['endpoints'][0]['port']);
  }

  it('every listed resource exists and parses; the deployments are complete (file level)', () => {
    checkResources(rawDocs(), false);
  });

  it('renders with `kubectl kustomize`', (ctx) => {
    const kubectl = requireTools('kubectl');
    ctx.skip(kubectl.skip, kubectl.reason);
    const r = run('kubectl', ['kustomize', dir]);
    expect(r.status, `kubectl kustomize: ${r.stderr}`).toBe(0);
    const docs = parseAllDocuments(r.stdout)
      .map((d) => d.toJS() as Doc)
      .filter(Boolean);
    checkResources(docs, true);
  });
});

describe('Grafana dashboard and Prometheus rules', () => {
  let known: Map<string, { type: string; labels: Set<string> }>;

  beforeAll(async () => {
    const metrics = new Metrics('test');
    known = new Map();
    const types = new Map((await metrics.registry.getMetricsAsJSON()).map((m) => [m.name, String(m.type)]));
    for (const m of metrics.registry.getMetricsAsArray()) {
      // prom-client keeps each metric's label names on the instance (not in its public type).
      const info = m as unknown as { name: string; labelNames?: string[] };
      known.set(info.name, { type: types.get(info.name)!, labels: new Set([...(info.labelNames ?? []), 'role', 'instance', 'job']) });
    }
    expect(known.has('tc_lateness_seconds')).toBe(true);
  });

  /** Every tc_* series in a PromQL expression is a metric of the registry (histograms through
   *  their _bucket/_sum/_count series), and every label it matches on is one the metric has. */
  function checkExpr(expr: string, where: string): number {
    let found = 0;
    for (const m of expr.matchAll(/\b(tc_[a-z0-9_]+)(\{([^}]*)\})?/g)) {
      const series = m[1]!;
      const base = known.has(series) ? series : series.replace(/_(bucket|sum|count)$/, '');
      const metric = known.get(base);
      expect(metric, `${where}: ${series} is not a timeout-center metric (src/observability/metrics.ts)`).toBeDefined();
      if (base !== series) expect(metric!.type, `${where}: ${series}`).toBe('histogram');
      if (series.endsWith('_bucket')) metric!.labels.add('le');
      for (const l of (m[3] ?? '').matchAll(/([a-zA-Z_]\w*)\s*(=~|!~|!=|=)/g)) {
        expect(metric!.labels.has(l[1]!), `${where}: ${base} has no label "${l[1]}"`).toBe(true);
      }
      found += 1;
    }
    // Labels aggregated or matched on (by, without, on, ignoring, group_left/right) belong to a metric of the expression.
    const used = [...expr.matchAll(/\b(tc_[a-z0-9_]+)/g)].map((m) => known.get(m[1]!) ?? known.get(m[1]!.replace(/_(bucket|sum|count)$/, '')));
    for (const clause of expr.matchAll(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g)) {
      for (const label of clause[1]!.split(',').map((l) => l.trim()).filter(Boolean)) {
        expect(
          used.some((m) => m?.labels.has(label)),
          `${where}: no metric of the expression has label "${label}"`,
        ).toBe(true);
      }
    }
    return found;
  }

  it('the dashboard JSON parses and queries only metrics (and labels) the processes export', () => {
    const dash = JSON.parse(read('deploy/grafana/dashboards/timeout-center.json')) as Doc;
    expect(dash['uid']).toBe('timeout-center');
    const panels = (dash['panels'] as Doc[]).flatMap((p) => [p, ...((p['panels'] as Doc[]) ?? [])]);
    const titles = panels.map((p) => String(p['title']).toLowerCase());
    for (const topic of ['lateness', 'throughput', 'backlog', 'fail', 'leader']) {
      expect(
        titles.some((t) => t.includes(topic)),
        `no panel about ${topic}`,
      ).toBe(true);
    }
    let queried = 0;
    const exprs: string[] = [];
    for (const p of panels) {
      for (const t of (p['targets'] as Doc[]) ?? []) {
        exprs.push(t['expr']);
        queried += checkExpr(String(t['expr']), `panel "${p['title']}"`);
      }
    }
    expect(queried).toBeGreaterThan(20);
    expect(exprs.some((e) => /histogram_quantile\(0\.5, .*tc_lateness_seconds_bucket/.test(e))).toBe(true);
    expect(exprs.some((e) => /histogram_quantile\(0\.99, .*tc_lateness_seconds_bucket/.test(e))).toBe(true);
    const variables = (dash['templating']['list'] as Doc[]).map((v) => v['name']);
    for (const e of exprs) for (const v of e.matchAll(/\$(\w+)/g)) expect(variables, e).toContain(v[1]);
  });

  it('Grafana provisioning points at the dashboard folder compose mounts, and at Prometheus', () => {
    const ds = yamlFile('deploy/grafana/provisioning/datasources/prometheus.yml');
    expect(ds['datasources'][0]).toMatchObject({ type: 'prometheus', url: 'http://prometheus:9090' });
    const provider = yamlFile('deploy/grafana/provisioning/dashboards/timeout-center.yml');
    const grafana = yamlFile('docker-compose.yml')['services']['grafana'] as Doc;
    const dashboardsMount = (grafana['volumes'] as string[]).find((v) => v.startsWith('./deploy/grafana/dashboards:'));
    expect(dashboardsMount?.split(':')[1]).toBe(provider['providers'][0]['options']['path']);
  });

  it('the Prometheus alert rules query only exported metrics', () => {
    const rules = yamlFile('deploy/prometheus/alerts.yml');
    let n = 0;
    for (const g of rules['groups'] as Doc[]) for (const r of g['rules'] as Doc[]) n += checkExpr(String(r['expr']), `rule ${r['alert']}`);
    expect(n).toBeGreaterThan(5);
  });

  it("the vacuum horizon rules fire at the config's defaults and name the holder (docs/vacuum-horizon.md)", () => {
    const rules = (yamlFile('deploy/prometheus/alerts.yml')['groups'] as Doc[]).flatMap((g) => g['rules'] as Doc[]);
    const rule = (name: string) => {
      const r = rules.find((x) => x['alert'] === name);
      expect(r, `rule ${name}`).toBeDefined();
      return r!;
    };
    // The defaults, as a config that sets nothing about alerts gets them.
    const alerts = parseConfig(yamlFile('deploy/config/timeout-center.yaml')).alerts;
    const held = rule('TimeoutCenterVacuumHorizonHeld');
    expect(String(held['expr'])).toMatch(new RegExp(`tc_vacuum_horizon_age_seconds\\) > ${alerts.vacuumHorizonMs / 1000}$`));
    for (const label of ['database', 'holder', 'pid', 'application_name', 'gid']) expect(String(held['expr'])).toContain(label);
    expect(String((held['annotations'] as Doc)['description'])).toContain('pg_terminate_backend({{ $labels.pid }})');
    const slot = rule('TimeoutCenterVacuumHorizonSlot');
    expect(String(slot['expr'])).toMatch(new RegExp(`tc_vacuum_horizon_age_xids\\{[^}]*\\}\\) > ${alerts.vacuumHorizonXids}$`));
    expect(String(rule('TimeoutCenterVacuumHorizonHeldLong')['expr'])).toMatch(/> 3600$/);
    expect(String(rule('TimeoutCenterVacuumHorizonHidden')['expr'])).toContain('tc_vacuum_horizon_sees_all_sessions');
  });
});
