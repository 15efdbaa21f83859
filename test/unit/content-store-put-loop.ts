/**
 * Child process of the content store's crash test (content-store.test.ts): puts the given files
 * into a store, one after another, until it is killed. Prints "ready" once the store is open,
 * then "put" before each put and "stored" after it (writes to a pipe are synchronous), so the
 * parent knows whether its kill landed inside a put.
 *
 *   node --import tsx test/unit/content-store-put-loop.ts <store root> <work dir> <file>...
 */
import { copyFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { createContentStore } from '../../src/store/content-store.js';
import { AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';

const [root, workDir, ...files] = process.argv.slice(2);
if (!root || !workDir || files.length === 0)
  throw new Error('usage: content-store-put-loop.ts <store root> <work dir> <file>...');
// Pins do not matter here: nothing evicts.
// The parent knows every writer named put-loop-* is dead once it has killed them.
const store = createContentStore(
  root,
  { pin: () => Promise.resolve({ holder: 'put-loop', unpin: async () => {} }) },
  `put-loop-${process.pid}`,
);
process.stdout.write('ready\n');
for (let i = 0; ; i++) {
  const source = path.join(workDir, `source-${process.pid}-${i}`);
  await copyFile(files[i % files.length]!, source);
  process.stdout.write('put\n');
  const { contentId } = await store.put(source, AUDIO_ARTIFACT_NAME);
  process.stdout.write('stored\n');
  // Every other put is removed again, so later puts of the same bytes store them anew instead of finding them.
  if (i % 2 === 1) store.removeSync(contentId);
  await rm(source, { force: true });
}
