// Bundles the console into dist/ (what metal-scheduler embeds and serves at /console):
// dist/index.html, dist/assets/app.js, dist/assets/app.css. No CDN, nothing loaded from
// outside the site. `npm run build` type-checks against scheduler/openapi.json first.
// A file whose bytes did not change is not rewritten, so cargo (which watches dist/) does
// not rebuild the scheduler for nothing.
import { build } from "esbuild";
import { mkdir, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";

const bundle = await build({
  entryPoints: { app: "src/main.tsx" },
  bundle: true,
  minify: true,
  format: "esm",
  splitting: true,
  chunkNames: "[name]-[hash]",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  outdir: "dist/assets",
  write: false,
  logLevel: "warning",
});
// The stylesheets the code imports (xterm.js's) come first, ours after them.
const files = new Map(bundle.outputFiles.map((f) => [f.path.slice(f.path.indexOf("dist/") + 5), Buffer.from(f.contents)]));
files.set("index.html", await readFile("src/index.html"));
files.set("assets/app.css", Buffer.concat([files.get("assets/app.css") ?? Buffer.alloc(0), await readFile("src/style.css")]));

async function existing(dir, prefix = "") {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const found = [];
  for (const e of entries) {
    if (e.isDirectory()) found.push(...(await existing(join(dir, e.name), `${prefix}${e.name}/`)));
    else found.push(`${prefix}${e.name}`);
  }
  return found;
}

let written = 0;
for (const [name, bytes] of files) {
  const path = join("dist", name);
  const old = await readFile(path).catch(() => null);
  if (old && old.equals(bytes)) continue;
  await mkdir(join(path, ".."), { recursive: true });
  await writeFile(path, bytes);
  written++;
}
for (const name of await existing("dist")) if (!files.has(name)) await rm(join("dist", name));
console.log(`console: dist/ ${written ? `updated (${written} files)` : "unchanged"}`);
