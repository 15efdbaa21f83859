import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readSync, renameSync, writeSync } from 'node:fs';
import { mkdir, readFile, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { resolveAlias } from '../../src/store/aliases.js';
import { cacheEntryFor } from '../../src/store/cache-entries.js';
import { evictedAt } from '../../src/store/evicted.js';
import { evictToCap, readStoreTotals } from '../../src/store/eviction.js';
import { AUDIO_ARTIFACT_NAME, PEAKS_ARTIFACT_NAME } from '../../src/store/layout.js';
import { createDatabasePins } from '../../src/store/pins.js';
import { emptyProgress, scrubStore, type ScrubDeps, type ScrubFinding } from '../../src/store/scrub.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';
import { BACKENDS } from '../support/test-database.js';

/**
 * One scrub pass (src/store/scrub.ts) over a real store and database: intact content is left as
 * it is; a corrupt file leaves the store for the quarantine folder with its row and aliases; and
 * what happens to content while it is read (evicted, replaced, being stored, corrupted) is never
 * reported or moved wrongly. Reads go through a 1 KiB buffer, so each file takes several reads
 * and a test can act between them (onRead).
 */
const FILE_BYTES = 10_000;

/** Synchronous, so that a test can do it between two reads of the pass (onRead). */
function flipByte(file: string, at = 5000): void {
  const fd = openSync(file, 'r+');
  try {
    const byte = Buffer.alloc(1);
    readSync(fd, byte, 0, 1, at);
    byte[0] = byte[0]! ^ 0xff;
    writeSync(fd, byte, 0, 1, at);
  } finally {
    closeSync(fd);
  }
}

async function pass(fx: StoreFixture, extra: Partial<ScrubDeps> = {}) {
  const progress = emptyProgress();
  const findings: ScrubFinding[] = [];
  const quarantineDir = path.join(fx.dir, 'quarantine');
  await scrubStore(
    {
      database: fx.database,
      store: fx.store,
      quarantineDir,
      now: Date.now,
      pacer: { take: async () => {} },
      buffer: Buffer.alloc(1024),
      signal: new AbortController().signal,
      log: createLogger('silent'),
      onFinding: (finding) => findings.push(finding),
      ...extra,
    },
    progress,
  );
  return { progress, findings, quarantineDir };
}

describe.each(BACKENDS)('store scrub on %s', (kind) => {
  it('control: an intact store is read whole, nothing is reported or moved', async () => {
    const fx = await createStoreFixture(kind);
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await fx.addArtifact(FILE_BYTES, i, `https://media.example/${i}`));
    let checked = 0;
    const { progress, quarantineDir } = await pass(fx, { onChecked: () => checked++ });
    expect(progress).toEqual({
      checked: 5,
      bytesRead: 5 * FILE_BYTES,
      corrupt: 0,
      moved: 0,
      missing: 0,
      unreadable: 0,
      findings: [],
    });
    expect(checked).toBe(5);
    expect(await fx.contentIdsOnDisk()).toEqual([...ids].sort());
    expect(existsSync(quarantineDir)).toBe(false);
    for (const [i, id] of ids.entries())
      expect(await resolveAlias(fx.database, 'url', `https://media.example/${i}`)).toBe(id);
  });

  it('a file with one byte flipped leaves for the quarantine folder, with its row and aliases; the others stay', async () => {
    const fx = await createStoreFixture(kind);
    const intact = await fx.addArtifact(FILE_BYTES, 1, 'https://media.example/intact');
    const bad = await fx.addArtifact(FILE_BYTES, 2, 'https://media.example/bad');
    const file = fx.store.pathOf(bad, AUDIO_ARTIFACT_NAME);
    flipByte(file);
    const flipped = await readFile(file);

    const { progress, findings, quarantineDir } = await pass(fx);
    expect(progress).toMatchObject({
      checked: 2,
      bytesRead: 2 * FILE_BYTES,
      corrupt: 1,
      moved: 1,
      missing: 0,
      unreadable: 0,
    });
    const finding = findings[0]!;
    expect(progress.findings).toEqual([finding]);
    expect(finding).toMatchObject({
      contentId: bad,
      name: AUDIO_ARTIFACT_NAME,
      problem: 'corrupt',
      action: 'quarantined',
      error: null,
    });
    expect(finding.sha256).toBe(createHash('sha256').update(flipped).digest('hex'));
    expect(finding.quarantinedAs).toMatch(new RegExp(`^${bad}\\.\\d+/audio\\.wav$`));

    // Out of the store, kept whole for an operator; its folder is gone too.
    expect(await readFile(path.join(quarantineDir, finding.quarantinedAs!))).toEqual(flipped);
    expect(existsSync(path.dirname(file))).toBe(false);
    expect(await fx.contentIdsOnDisk()).toEqual([intact]);
    // No row, no alias (the next submission downloads it again), marked gone for its jobs' records.
    expect(await cacheEntryFor(fx.database, bad, AUDIO_ARTIFACT_NAME)).toBeUndefined();
    expect(await resolveAlias(fx.database, 'url', 'https://media.example/bad')).toBeUndefined();
    expect((await fx.database.db.select().from(fx.database.t.aliases)).map((row) => row.contentId)).toEqual([intact]);
    expect((await evictedAt(fx.database, [bad])).has(bad)).toBe(true);
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: FILE_BYTES, artifacts: 1 });

    // A second pass finds nothing more.
    expect((await pass(fx)).progress).toMatchObject({ checked: 1, corrupt: 0 });
  });

  it("a WAV's peaks are not hashed (control: intact WAVs with peaks report nothing); a corrupt WAV takes its peaks with it", async () => {
    const fx = await createStoreFixture(kind);
    const intact = await fx.addArtifact(FILE_BYTES, 1, 'https://media.example/intact');
    await fx.addPeaks(intact, 300, 1);
    const bad = await fx.addArtifact(FILE_BYTES, 2, 'https://media.example/bad');
    await fx.addPeaks(bad, 300, 2);
    expect((await pass(fx)).progress).toMatchObject({ checked: 2, bytesRead: 2 * FILE_BYTES, corrupt: 0, moved: 0 });

    flipByte(fx.store.pathOf(bad, AUDIO_ARTIFACT_NAME));
    const { progress, findings, quarantineDir } = await pass(fx);
    expect(progress).toMatchObject({ checked: 2, corrupt: 1, moved: 1, missing: 0 });
    expect(findings.map((finding) => [finding.contentId, finding.name])).toEqual([[bad, AUDIO_ARTIFACT_NAME]]);
    // The WAV is quarantined; the peaks drawn from it are gone, row and file; the intact content keeps both.
    expect(await readdir(path.join(quarantineDir, path.dirname(findings[0]!.quarantinedAs!)))).toEqual([
      AUDIO_ARTIFACT_NAME,
    ]);
    expect(existsSync(path.dirname(fx.store.pathOf(bad, PEAKS_ARTIFACT_NAME)))).toBe(false);
    expect(await cacheEntryFor(fx.database, bad, PEAKS_ARTIFACT_NAME)).toBeUndefined();
    expect(await fx.contentIdsOnDisk()).toEqual([intact, intact]);
    expect((await evictedAt(fx.database, [bad])).has(bad)).toBe(true);
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: FILE_BYTES + 300, artifacts: 2 });
  });

  it('a link or a FIFO where a file should be is corrupt: quarantined, never followed nor waited on', async () => {
    const fx = await createStoreFixture(kind);
    const intact = await fx.addArtifact(FILE_BYTES, 1, 'https://media.example/intact');
    const linked = await fx.addArtifact(FILE_BYTES, 2, 'https://media.example/linked');
    const piped = await fx.addArtifact(FILE_BYTES, 3, 'https://media.example/piped');
    // A relative link to a file whose bytes are right for... another content id.
    await rm(fx.store.pathOf(linked, AUDIO_ARTIFACT_NAME));
    await symlink(
      path.relative(
        path.dirname(fx.store.pathOf(linked, AUDIO_ARTIFACT_NAME)),
        fx.store.pathOf(intact, AUDIO_ARTIFACT_NAME),
      ),
      fx.store.pathOf(linked, AUDIO_ARTIFACT_NAME),
    );
    await rm(fx.store.pathOf(piped, AUDIO_ARTIFACT_NAME));
    execFileSync('mkfifo', [fx.store.pathOf(piped, AUDIO_ARTIFACT_NAME)]);

    const { progress, findings } = await pass(fx);
    expect(progress).toMatchObject({
      checked: 3,
      corrupt: 2,
      moved: 2,
      missing: 0,
      unreadable: 0,
      bytesRead: FILE_BYTES,
    });
    expect(findings.map((f) => [f.contentId, f.problem, f.action, f.sha256]).sort()).toEqual(
      [
        [linked, 'corrupt', 'quarantined', null],
        [piped, 'corrupt', 'quarantined', null],
      ].sort(),
    );
    // The link's target, intact content of its own, stays.
    expect(await fx.contentIdsOnDisk()).toEqual([intact]);
    expect(await cacheEntryFor(fx.database, intact, AUDIO_ARTIFACT_NAME)).toBeDefined();
  });

  it('a missing file and an unreadable one are reported, not acted on', async () => {
    const fx = await createStoreFixture(kind);
    const gone = await fx.addArtifact(FILE_BYTES, 1, 'https://media.example/gone');
    const odd = await fx.addArtifact(FILE_BYTES, 2, 'https://media.example/odd');
    await rm(fx.store.pathOf(gone, AUDIO_ARTIFACT_NAME));
    // A folder where the file should be: opened, but never read.
    await rm(fx.store.pathOf(odd, AUDIO_ARTIFACT_NAME));
    await mkdir(fx.store.pathOf(odd, AUDIO_ARTIFACT_NAME));

    const { progress, findings } = await pass(fx);
    expect(progress).toMatchObject({ checked: 0, corrupt: 0, moved: 0, missing: 1, unreadable: 1 });
    expect(findings.map((f) => [f.contentId, f.problem, f.action, f.error]).sort()).toEqual(
      [
        [gone, 'missing', 'none', null],
        [odd, 'unreadable', 'none', 'EISDIR'],
      ].sort(),
    );
    // Rows and aliases stay: a volume that is not mounted must not empty the store's index.
    expect(await cacheEntryFor(fx.database, gone, AUDIO_ARTIFACT_NAME)).toBeDefined();
    expect(await resolveAlias(fx.database, 'url', 'https://media.example/odd')).toBe(odd);
  });

  it('corrupt content that a job is storing (pinned) is reported, and left in place for the next pass', async () => {
    const fx = await createStoreFixture(kind);
    const bad = await fx.addArtifact(FILE_BYTES, 1, 'https://media.example/bad');
    flipByte(fx.store.pathOf(bad, AUDIO_ARTIFACT_NAME));
    const { unpin } = await createDatabasePins({
      database: fx.database,
      holder: () => 'other-node:put',
      now: Date.now,
    }).pin(bad);

    const first = await pass(fx);
    expect(first.progress).toMatchObject({ checked: 1, corrupt: 1, moved: 0 });
    expect(first.findings[0]).toMatchObject({
      contentId: bad,
      problem: 'corrupt',
      action: 'deferred',
      quarantinedAs: null,
    });
    expect(fx.store.hasSync(bad, AUDIO_ARTIFACT_NAME)).toBe(true);
    expect(await resolveAlias(fx.database, 'url', 'https://media.example/bad')).toBe(bad);

    await unpin();
    const second = await pass(fx);
    expect(second.findings[0]).toMatchObject({ contentId: bad, action: 'quarantined' });
    expect(fx.store.hasSync(bad, AUDIO_ARTIFACT_NAME)).toBe(false);
  });

  it('corrupt content evicted while it is read is neither reported nor moved', async () => {
    const fx = await createStoreFixture(kind);
    const bad = await fx.addArtifact(FILE_BYTES, 1);
    flipByte(fx.store.pathOf(bad, AUDIO_ARTIFACT_NAME));
    // Eviction's rows and file go between two reads (the pacer waits for it): the read goes on, on the unlinked file.
    let eviction: Promise<unknown> | undefined;
    const { progress, findings, quarantineDir } = await pass(fx, {
      onRead: () =>
        void (eviction ??= evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: Date.now })),
      pacer: { take: async () => void (await eviction) },
    });
    expect(await eviction).toMatchObject({ evictedContentIds: [bad] });
    expect(findings).toEqual([]);
    expect(progress).toMatchObject({ corrupt: 0, moved: 0, missing: 0 });
    expect(existsSync(quarantineDir)).toBe(false);
  });

  it('a corrupt file replaced by the right bytes while it is read (a put renaming onto it) is read again, and found intact', async () => {
    const fx = await createStoreFixture(kind);
    const data = randomBytes(FILE_BYTES);
    const id = createHash('sha256').update(data).digest('hex');
    const file = fx.store.pathOf(id, AUDIO_ARTIFACT_NAME);
    await mkdir(path.dirname(file), { recursive: true });
    const truncated = data.subarray(0, FILE_BYTES - 100);
    await writeFile(file, truncated);
    await fx.database.db.insert(fx.database.t.cacheEntries).values({
      contentId: id,
      name: AUDIO_ARTIFACT_NAME,
      kind: 'source_wav',
      bytes: FILE_BYTES,
      contentType: 'audio/wav',
      sampleRate: 44100,
      channels: 2,
      durationS: 1,
      createdAt: 1,
      lastUsedAt: 1,
    });
    const staged = path.join(fx.dir, 'staged');
    await writeFile(staged, data);
    let replaced = false;
    const { findings, progress } = await pass(fx, {
      onRead: () => {
        if (replaced) return;
        replaced = true;
        renameSync(staged, file);
      },
    });
    expect(replaced).toBe(true);
    expect(progress.checked).toBe(1);
    expect(findings).toEqual([]);
    expect(progress.corrupt).toBe(0);
    expect(await readFile(file)).toEqual(data);
  });

  it('a file corrupted while it is read (written in place) is read again and quarantined', async () => {
    const fx = await createStoreFixture(kind);
    const id = await fx.addArtifact(FILE_BYTES, 1);
    const file = fx.store.pathOf(id, AUDIO_ARTIFACT_NAME);
    let reads = 0;
    const { findings } = await pass(fx, {
      onRead: () => {
        // After the first read: the corruption lands in bytes not yet read.
        if (++reads === 1) flipByte(file, 9000);
      },
    });
    // The first read saw the change under way, a second one the corrupt file as it stays.
    expect(reads).toBe(2 * Math.ceil(FILE_BYTES / 1024));
    expect(findings).toHaveLength(1);
    expect(findings[0]).toMatchObject({ contentId: id, problem: 'corrupt', action: 'quarantined' });
    expect(fx.store.hasSync(id, AUDIO_ARTIFACT_NAME)).toBe(false);
  });

  it('goes through every row in batches, and stops when its signal aborts', async () => {
    const fx = await createStoreFixture(kind);
    for (let i = 0; i < 230; i++) await fx.addArtifact(16, i);
    expect((await pass(fx)).progress.checked).toBe(230);

    const abort = new AbortController();
    let checked = 0;
    await expect(
      pass(fx, {
        signal: abort.signal,
        onChecked: () => {
          if (++checked === 10) abort.abort();
        },
      }),
    ).rejects.toThrow();
    expect(checked).toBe(10);
    expect((await readdir(fx.store.root)).length).toBeGreaterThan(0);
  });
});
