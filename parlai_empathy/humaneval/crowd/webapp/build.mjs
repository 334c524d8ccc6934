// Bundles the two task pages with esbuild: React, mephisto-task and Bootstrap's CSS are all
// inside each bundle, so a worker's browser loads nothing from a CDN.
//   node build.mjs OUTDIR    ->  OUTDIR/acute.js, OUTDIR/turns.js
import * as esbuild from 'esbuild';
import path from 'node:path';

const outdir = path.resolve(process.argv[2] || 'build');
await esbuild.build({
  entryPoints: { acute: 'src/acute.jsx', turns: 'src/turns.jsx' },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2018'],
  loader: { '.css': 'text' },
  jsx: 'automatic',
  define: { 'process.env.NODE_ENV': '"production"' },
  outdir,
  logLevel: 'warning',
});
console.log(`built ${path.join(outdir, 'acute.js')} and ${path.join(outdir, 'turns.js')}`);
