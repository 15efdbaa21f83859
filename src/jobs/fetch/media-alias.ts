import type { Database, Queryable } from '../../db/database.js';
import { resolveAlias, setAlias } from '../../store/aliases.js';
import type { ContentStore } from '../../store/content-store.js';
import { AUDIO_ARTIFACT_NAME } from '../../store/layout.js';
import { lockContent } from '../../store/pins.js';
import { recordUse } from '../../store/usage.js';
import { claimMediaDownload, followMediaDownload, markDone, recordMediaIdentity, type Ended } from '../queue.js';
import { sourceMediaOf, storedMedia } from '../../tools/media-metadata.js';
import type { Extracted } from './media-info.js';
import { step, type FetchContext, type Outcome } from './step.js';

/**
 * The media alias, decided while the download waits at its gate: another URL of media that is already stored ends the job here, with that
 * content; another job of the same API key (on any node) downloading the same media right now
 * makes this job its follower; otherwise this job claims the media's download for its key and goes
 * on. Another key's download of the same media is never followed (src/jobs/queue.ts says why): the
 * two download, and the store keeps one copy of the equal WAVs.
 */
export type MediaDecision =
  | { kind: 'download' }
  | { kind: 'reused'; ended: Ended }
  | { kind: 'following'; leaderId: string }
  /** The job is no longer this node's to run (canceled meanwhile). */
  | { kind: 'lost' };

export interface MediaAliasDeps {
  database: Database;
  store: Pick<ContentStore, 'hasSync'>;
  now: () => number;
}

/** Rounds of "the job holding the media ended just now" before downloading anyway. */
const MAX_ROUNDS = 3;

export function resolveMedia(
  ctx: FetchContext,
  deps: MediaAliasDeps,
  extracted: Extracted,
): Promise<Outcome<MediaDecision>> {
  return step(async () => {
    const { job, owner } = ctx;
    await recordMediaIdentity(deps.database, job.id, {
      extractor: extracted.info.extractorKey,
      mediaId: extracted.info.mediaId,
      media: storedMedia(sourceMediaOf(extracted.info)),
    });
    const mediaKey = extracted.mediaKey;
    if (mediaKey === undefined) return { kind: 'download' };
    for (let round = 0; round < MAX_ROUNDS; round++) {
      const reused = await reuseStored(deps, job.id, owner, mediaKey);
      if (reused === 'lost') return { kind: 'lost' };
      if (reused !== 'absent') {
        ctx.log.info(
          { content_id: reused.job.contentId, media: mediaKey },
          'media already stored under another URL: job done',
        );
        return { kind: 'reused', ended: reused };
      }
      const claim = await claimMediaDownload(deps.database, job, owner, mediaKey);
      if (claim === 'claimed') return { kind: 'download' };
      if (claim === 'lost') return { kind: 'lost' };
      if (await followMediaDownload(deps.database, job.id, owner, claim.followId)) {
        ctx.log.info(
          { leader_id: claim.followId, media: mediaKey },
          'the same media is being downloaded by another job of the same key: following it',
        );
        return { kind: 'following', leaderId: claim.followId };
      }
    }
    return { kind: 'download' };
  });
}

/**
 * Ends the job with the content its media alias points to, in one transaction under the
 * content's lock (no node's eviction can remove it in between), making it hot: it is in use.
 */
async function reuseStored(
  deps: MediaAliasDeps,
  jobId: string,
  owner: string,
  mediaKey: string,
): Promise<Ended | 'absent' | 'lost'> {
  return deps.database.transaction(async (q) => {
    const known = await resolveAlias(q, 'media', mediaKey);
    if (known === undefined) return 'absent';
    await lockContent(q, [known], 'use');
    if ((await resolveAlias(q, 'media', mediaKey)) !== known || !deps.store.hasSync(known, AUDIO_ARTIFACT_NAME))
      return 'absent';
    const now = deps.now();
    const ended = await markDone(q, jobId, owner, known, now);
    if (!ended) return 'lost';
    await aliasUrlsOf(q, ended, known, now);
    await recordUse(q, known, now);
    return ended;
  });
}

/**
 * Every URL a finished job and its followers were submitted with now names its content, with what
 * the job submitted with it knew of the source (the first such job's, for a URL given twice).
 */
export async function aliasUrlsOf(q: Queryable, ended: Ended, contentId: string, now: number): Promise<void> {
  const mediaByKey = new Map<string, string | null>();
  for (const job of [ended.job, ...ended.followers]) {
    if (!mediaByKey.has(job.urlKey)) mediaByKey.set(job.urlKey, job.media);
  }
  for (const [key, media] of mediaByKey) await setAlias(q, 'url', key, contentId, now, media);
}
