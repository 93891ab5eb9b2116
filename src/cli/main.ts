#!/usr/bin/env node
// The command's entry. V8's compile cache goes on before the program's modules load (a static
// import would compile them first), so every start after the first skips compiling them: about a
// third of the CPU a verb takes to start. Node keeps it in its temporary directory, or where
// NODE_COMPILE_CACHE says; NODE_DISABLE_COMPILE_CACHE=1 turns it off.
import { enableCompileCache } from 'node:module';

enableCompileCache?.();
// Not a top-level await: the engine's verbs wait for a signal on a promise that never settles, and
// Node ends a process whose loop empties under a pending top-level await with exit code 13.
void import('./program.js').then(({ main }) => main(process.argv));
