import type { Database, Queryable } from '../../db/database.js';
import { setAlias } from '../../store/aliases.js';
import { cacheEntryFor, recordCacheEntry, SOURCE_WAV_KIND, WAVEFORM_PEAKS_KIND } from '../../store/cache-entries.js';
import { EnteredButFailed, type ContentStore, type StoredContent } from '../../store/content-store.js';
import { AUDIO_ARTIFACT_NAME, PEAKS_ARTIFACT_NAME } from '../../store/layout.js';
import { createPeaksAccumulator, peaksJsonBytes } from '../../audio/peaks.js';
import { allowanceRefusal, lockKeyStorage, type KeyAllowance } from '../../store/key-allowance.js';
import { endPin, lockContent, pinnedByOthers } from '../../store/pins.js';
import { NO_KEY_IDENTITY } from '../key-identity.js';
import { markDone, type Ended } from '../queue.js';
import type { Converted } from './convert.js';
import { aliasUrlsOf } from './media-alias.js';
import { JobFailure, step, type FetchContext, type Outcome } from './step.js';

/**
 * Step 4 (of ./task.ts), commit: the WAV enters the content store (atomic, content-addressed,
 * pinned until recorded, so no node's eviction can remove it or an identical copy stored earlier),
 * with its waveform peaks (peaks.json) as ctx.audioAnalysis says, computed from the bytes the store
 * hashes (../../audio/peaks.ts: one read of the WAV for both), and the loudness the conversion
 * measured; the attempt's work folder is discarded (so a job seen done has left nothing behind),
 * then the job, its followers, the cache row and the aliases are recorded in one transaction. A job
 * that is no longer this node's (canceled meanwhile) records nothing: undefined.
 *
 * The peaks are written while the content is pinned, before the transaction, which records them
 * as a second row of the same content; a content stored before peaks existed gains them when a
 * job stores its bytes again.
 *
 * All or nothing: a commit that does not end with the job done (any write refused, ENOSPC on the
 * WAV's move, the peaks' file or the database's; the job lost; its key's allowance) takes back
 * what it added to the store (`takeBack`), never content stored whole before it. So, but for
 * another put's bytes until that put ends, no file stays in the store that eviction and the
 * free-space floor do not count.
 *
 * New content (the WAV and its peaks) counts against the submitting key's allowance (`keyAllowance`,
 * src/store/key-allowance.ts), checked in that transaction under the key's lock: a job that would
 * take its key past it records nothing, its file goes again (unless the same bytes are recorded
 * or held by another put), and it fails with key_storage_quota_exceeded. Nothing was recorded, so
 * nothing is evicted for it. Jobs whose key is not known are not counted.
 */
export interface CommitDeps {
  database: Database;
  store: ContentStore;
  now: () => number;
  /** Absent: no allowance per key. */
  keyAllowance?: KeyAllowance;
}

export function commitContent(
  ctx: FetchContext,
  deps: CommitDeps,
  converted: Converted,
  /**
   * The media alias key, when one can be trusted; and what the job knows of its source (the
   * record's `media` in JSON), recorded on the job and on its URLs' aliases.
   */
  source: { mediaKey?: string; media?: string },
  discardWork: () => Promise<void>,
  /**
   * Filled with the commit's parts, in ms: the WAV's put (hash, peaks, flush, move), the peaks'
   * file with the work folder's removal beside it, the record.
   */
  partMs: Record<string, number> = {},
): Promise<Outcome<Ended | undefined>> {
  return step(async () => {
    const { database, store } = deps;
    let lapStarted = performance.now();
    const lap = (name: string) => {
      const now = performance.now();
      partMs[`${name}_ms`] = Math.round(now - lapStarted);
      lapStarted = now;
    };
    const accumulator = ctx.audioAnalysis?.peaks ? createPeaksAccumulator() : undefined;
    let stored: StoredContent;
    try {
      stored = await store.put(converted.wavPath, AUDIO_ARTIFACT_NAME, accumulator);
    } catch (err) {
      if (!(err instanceof EnteredButFailed)) throw err;
      await takeBack(ctx, deps, err.stored);
      throw err.cause;
    }
    lap('put');
    // Whatever fails from here on, what the commit added to the store is taken back.
    let takenBack = false;
    try {
      const peaks = accumulator?.finish();
      if (converted.loudness === null) ctx.log.warn('no loudness measured (a silent WAV)');
      // The work folder goes while the peaks' file is written: both before the record.
      const discarding = discardWork();
      let peaksBytes: number | null;
      try {
        peaksBytes = peaks
          ? await store.putDerived(stored.contentId, PEAKS_ARTIFACT_NAME, peaksJsonBytes(peaks))
          : null;
      } finally {
        await discarding;
      }
      lap('peaks_file_and_discard');
      const now = deps.now();
      const apiKeyId = ctx.job.apiKeyId;
      const storedBytes = stored.reused ? null : stored.bytes + (peaksBytes ?? 0);
      const outcome = await database.transaction(async (q) => {
        // Never a row without its file, whoever removed it.
        if (!store.hasSync(stored.contentId, AUDIO_ARTIFACT_NAME)) return 'vanished' as const;
        if (peaksBytes !== null && !store.hasSync(stored.contentId, PEAKS_ARTIFACT_NAME)) return 'vanished' as const;
        if (deps.keyAllowance && storedBytes !== null && apiKeyId !== NO_KEY_IDENTITY) {
          await lockKeyStorage(q, apiKeyId);
          const refusal = await allowanceRefusal(q, deps.keyAllowance, apiKeyId, storedBytes, now);
          if (refusal) return { refusal };
        }
        const ended = await markDone(q, ctx.job.id, ctx.owner, stored.contentId, now, storedBytes, source.media);
        if (!ended) return 'lost' as const;
        await recordEntries(q, { contentId: stored.contentId, bytes: stored.bytes }, converted, peaksBytes, now);
        await aliasUrlsOf(q, ended, stored.contentId, now);
        if (source.mediaKey) await setAlias(q, 'media', source.mediaKey, stored.contentId, now);
        // Recorded, so no longer pinned: a write here, not after (a database on a full volume
        // could refuse that one, and leave the content pinned, unevictable, for the pin's life).
        await endPin(q, stored.contentId, stored.pin);
        return ended;
      });
      lap('record');
      if (outcome === 'vanished') throw new Error('stored content vanished before it was recorded');
      if (outcome === 'lost' || 'refusal' in outcome) {
        takenBack = true;
        await takeBack(ctx, deps, stored);
        if (outcome === 'lost') return undefined;
        ctx.log.info({ bytes: stored.bytes }, "over its key's storage allowance: nothing stored");
        throw new JobFailure(outcome.refusal);
      }
      ctx.log.info({ content_id: stored.contentId, bytes: stored.bytes, reused: stored.reused }, 'job done');
      // Its pin ended with the record: this deletes nothing.
      await stored.release().catch((err: unknown) => ctx.log.warn({ err }, 'ending a pin failed'));
      return outcome;
    } catch (err) {
      // Any write of the commit refused (ENOSPC on the peaks' file or the database's, say): what it
      // added goes, so the store holds nothing its accounting does not know.
      if (!takenBack) await takeBack(ctx, deps, stored);
      throw err;
    }
  });
}

/**
 * Takes back what a failed commit added to the store, then ends its pin: under the content's lock,
 * unless another put pins the content (it may be about to record it, having found the file
 * there), each file of it that no row names goes (the whole folder when the WAV has no row). So
 * content stored whole before (recorded) stays, and so does a file another job recorded meanwhile;
 * a file an earlier failed commit left for this put, which pinned it, goes now. The check only
 * reads, so it runs on a database whose volume is full (SQLite beside the store); the pin's end,
 * a write, follows the removal, once the space is free again.
 */
async function takeBack(ctx: FetchContext, deps: CommitDeps, stored: StoredContent): Promise<void> {
  const { contentId } = stored;
  try {
    await deps.database.transaction(async (q) => {
      await lockContent(q, [contentId], 'remove');
      if (await pinnedByOthers(q, contentId, stored.pin, deps.now())) return;
      if (!(await cacheEntryFor(q, contentId, AUDIO_ARTIFACT_NAME))) return deps.store.removeSync(contentId);
      if (
        deps.store.hasSync(contentId, PEAKS_ARTIFACT_NAME) &&
        !(await cacheEntryFor(q, contentId, PEAKS_ARTIFACT_NAME))
      )
        deps.store.removeSync(contentId, PEAKS_ARTIFACT_NAME);
    });
  } catch (err) {
    // Left to start-up reconciliation; logged so that the operator knows what stays.
    ctx.log.error({ err, content_id: contentId }, 'a failed commit could not take back what it stored');
  }
  // A pin that cannot end now (the database refusing writes) expires; eviction drops it then.
  await stored.release().catch((err: unknown) => ctx.log.warn({ err }, "a failed commit's pin could not end"));
}

/** The cache rows of a stored WAV (with what is known of its audio) and of its peaks, when there are any. */
async function recordEntries(
  q: Queryable,
  stored: { contentId: string; bytes: number },
  converted: Converted,
  peaksBytes: number | null,
  now: number,
): Promise<void> {
  const { header } = converted;
  const loudness = converted.loudness ?? null;
  await recordCacheEntry(
    q,
    {
      contentId: stored.contentId,
      name: AUDIO_ARTIFACT_NAME,
      kind: SOURCE_WAV_KIND,
      bytes: stored.bytes,
      contentType: 'audio/wav',
      sampleRate: header.sampleRate,
      channels: header.channels,
      durationS: header.durationS,
      loudnessIntegratedLufs: loudness?.integratedLufs ?? null,
      loudnessRangeLu: loudness?.rangeLu ?? null,
      loudnessTruePeakDbtp: loudness?.truePeakDbtp ?? null,
    },
    now,
  );
  if (peaksBytes === null) return;
  await recordCacheEntry(
    q,
    {
      contentId: stored.contentId,
      name: PEAKS_ARTIFACT_NAME,
      kind: WAVEFORM_PEAKS_KIND,
      bytes: peaksBytes,
      contentType: 'application/json',
      sampleRate: null,
      channels: null,
      durationS: null,
    },
    now,
  );
}
