// The soak: a chaos run of our own, beyond the scripted faults (issue 24, point 7; issue 35 for the
// topologies). Not part of `npm test`:
//   npm run soak -- --minutes 10 [--seed 7] [--out soak.json] [--topology single|stores|cluster|sentinel]
//
// The command line is read first (args.ts: a bad flag exits 2, as the CLI's bad input, before
// anything is started); then run.ts runs the fleet under the nemesis on the chosen topology
// (topology.ts) and checks the invariants (check.ts). Exit 0: no violation; 1: a violation (the
// report names it); 2: a bad command line or a run that could not be set up or finish.
import { parseSoakArgs, SOAK_USAGE, SoakUsageError, type SoakArgs } from './args.ts';

let args: SoakArgs;
try {
  args = parseSoakArgs(process.argv.slice(2));
} catch (err) {
  if (!(err instanceof SoakUsageError)) throw err;
  process.stderr.write(`soak: ${err.message}\n${SOAK_USAGE}\n`);
  process.exit(err.exitCode);
}

// Runs on Node's own TypeScript support (like bench/), with the engine from dist/: loaded only
// once the command line is known to be good.
const { runSoak } = await import('./run.ts');
try {
  process.exitCode = await runSoak(args);
} catch (err) {
  console.error(err);
  process.exitCode = 2;
}
