// node --import this file: prints, at exit, one JSON line on stderr naming every npm package the
// process loaded (test/cli/startup.test.ts).
import { registerHooks } from 'node:module';
import process from 'node:process';

const packages = new Set();
registerHooks({
  resolve(specifier, context, next) {
    const resolved = next(specifier, context);
    const at = resolved.url.lastIndexOf('node_modules/');
    if (at >= 0) {
      const parts = resolved.url.slice(at + 'node_modules/'.length).split('/');
      packages.add(parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]);
    }
    return resolved;
  },
});
process.on('exit', () => process.stderr.write(`${JSON.stringify({ loadedPackages: [...packages].sort() })}\n`));
