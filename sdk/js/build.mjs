// Builds one JavaScript plugin into a component with componentize-js's API.
//
//   node ../../../sdk/js/build.mjs <source.js> <out.wasm> [world]     (from the plugin's folder)
//
// `world` is the WIT world the plugin targets: `batched-handler` (the
// default), `handler` or `controller`.
// componentize-js comes from the plugin folder's node_modules (`npm ci`).
// The build runs with the repository as the working directory, so a
// plugin in `plugins/examples/<name>/` may import the SDK as
// `../../../sdk/js/informer-guest.js`: componentize-js maps the working
// directory as the guest's `/` while it pre-initializes the module. Only the
// WIT package `wit/`, the SDK and the plugin are read; no network access is
// needed.
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const [source, out, world = 'batched-handler'] = process.argv.slice(2);
if (!source || !out) {
  console.error('usage: node build.mjs <source.js> <out.wasm> [world]');
  process.exit(2);
}
const pluginDir = process.cwd();
// This file is sdk/js/build.mjs.
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const sourcePath = resolve(pluginDir, source);
const outPath = resolve(pluginDir, out);
const witPath = resolve(repo, 'wit');

const modules = join(pluginDir, 'node_modules', '@bytecodealliance');
const { componentize } = await import(pathToFileURL(join(modules, 'componentize-js', 'src', 'componentize.js')).href);
// componentize-js runs its WIT splicer as a component on the WASI shim, and
// preview2-shim 0.26 starts with no preopened directory at all (older ones
// opened `/`), so the splicer cannot read `wit/` ("No such file or
// directory", or jco's "failed to get path metadata"). Open the repository.
const { _setPreopens } = await import(
  pathToFileURL(join(modules, 'preview2-shim', 'dist', 'nodejs', 'filesystem.js')).href
);
_setPreopens({ [repo]: repo });

process.chdir(repo);
const { component } = await componentize({
  sourcePath,
  witPath,
  worldName: world,
  // The host links no wasi:http; stdio (for stderr), random and clocks stay.
  disableFeatures: ['http', 'fetch-event'],
});
await mkdir(dirname(outPath), { recursive: true });
await writeFile(outPath, component);
console.error(`built ${outPath} (${component.length} bytes)`);
