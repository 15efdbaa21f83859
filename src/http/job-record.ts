import type { CacheEntryRow, JobRow } from '../db/database.js';
import { downloadName } from '../delivery/download-name.js';
import type { ItemView, JobView } from '../jobs/job-service.js';
import { FINAL_STATUSES } from '../jobs/queue.js';
import { artifactUrlPath, AUDIO_ARTIFACT_NAME } from '../store/layout.js';
import { readStoredMedia, type SourceMedia } from '../tools/media-metadata.js';
import { attemptsOf, type CallbackDeliveryRow } from '../webhooks/deliveries.js';
import { refusalProblem } from './problem.js';
import type {
  CallbackRecord,
  CollectionItemRecord,
  CollectionRecord,
  EvictedRecord,
  JobRecord,
  LoudnessRecord,
} from './schemas.js';

/** Signs an artifact's URL; `filename`, when given, is the download name the URL carries, signed with it. */
export interface SignArtifact {
  (cid: string, name: string, filename?: string): { query: string; expiresAt: number };
}

/**
 * Renders views as records, signing their artifacts' URLs. A view the job service kept (frozen,
 * the same object poll after poll) renders to the same record until the second changes, as the
 * signatures' expiry is in whole seconds: polls of one job within a second share one record,
 * frozen too. Any other view is rendered each time and not remembered (a WeakMap entry per
 * request costs the garbage collector more than the rendering saves).
 */
export function createJobRenderer(sign: SignArtifact, now: () => number): (view: JobView) => JobRecord {
  const rendered = new WeakMap<JobView, { second: number; record: JobRecord }>();
  const render = (view: JobView) =>
    toJobRecord(view.job, {
      leader: view.leader,
      artifacts: view.artifacts,
      callback: view.callback,
      evictedAt: view.evictedAt,
      sign,
    });
  return (view) => {
    if (!Object.isFrozen(view)) return render(view);
    const second = Math.floor(now() / 1000);
    const known = rendered.get(view);
    if (known?.second === second) return known.record;
    const record = Object.freeze(render(view));
    rendered.set(view, { second, record });
    return record;
  };
}

/** A collection's item as listJobItems and the item events of the event streams show it. */
export function collectionItemRecord(
  { index, title, url, ...outcome }: ItemView,
  renderView: (view: JobView) => JobRecord,
): CollectionItemRecord {
  return 'job' in outcome
    ? { index, title, url, outcome: 'accepted', job: renderView(outcome.job) }
    : { index, title, url, outcome: 'refused', problem: refusalProblem(outcome.problem) };
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function toJobRecord(
  job: JobRow,
  context: {
    /** The job this one waits for, whose state it shows while it waits. */
    leader?: JobRow;
    artifacts: CacheEntryRow[];
    sign: SignArtifact;
    /** The job's callback delivery, if it has one. */
    callback?: CallbackDeliveryRow;
    /** When the store removed the job's content, if it did (src/store/evicted.ts). */
    evictedAt?: number;
  },
): JobRecord {
  const shown = job.status === 'queued' && context.leader ? context.leader : job;
  const progress =
    shown.status === 'running' && shown.progressBytes !== null
      ? {
          bytes_done: shown.progressBytes,
          bytes_total: shown.progressTotalBytes,
          percent:
            shown.progressTotalBytes && shown.progressTotalBytes > 0
              ? Math.min(100, Math.round((shown.progressBytes / shown.progressTotalBytes) * 1000) / 10)
              : null,
        }
      : null;
  const media = mediaOf(job);
  const result =
    job.status === 'done' && job.contentId
      ? {
          content_id: job.contentId,
          artifacts: context.artifacts.map((artifact) => {
            const path = artifactUrlPath(artifact.contentId, artifact.name);
            const name = downloadName(media?.title ?? null, artifact.name);
            // A URL names its download only when the name is not the artifact's own.
            const signed = context.sign(artifact.contentId, artifact.name, name === artifact.name ? undefined : name);
            return {
              name: artifact.name,
              download_name: name,
              path,
              signed_url: `${path}?${signed.query}`,
              signed_url_expires_at: new Date(signed.expiresAt).toISOString(),
              bytes: artifact.bytes,
              content_type: artifact.contentType,
              sample_rate: artifact.sampleRate,
              channels: artifact.channels,
              duration: artifact.durationS,
            };
          }),
          loudness: loudnessOf(context.artifacts),
          // Said only while the content is gone: stored again, its artifacts are back.
          evicted:
            context.artifacts.length === 0 && context.evictedAt !== undefined ? evictedRecord(context.evictedAt) : null,
        }
      : null;
  return {
    job_id: job.id,
    kind: job.kind,
    parent_id: job.parentId,
    status: recordStatus(shown === job ? job : shown),
    url: job.url,
    born_done: job.bornDone,
    created_at: new Date(job.createdAt).toISOString(),
    started_at: iso(shown.startedAt),
    finished_at: iso(job.finishedAt),
    attempts: job.attempts,
    progress,
    media,
    result,
    error: job.status === 'failed' ? errorRecord(job) : null,
    callback: context.callback ? toCallbackRecord(job, context.callback) : null,
    collection: job.kind === 'collection' ? collectionRecord(job) : null,
  };
}

/** The status shown: a collection being listed is `expanding`, one waiting for its children `running` (src/jobs/collection/parent.ts). */
function recordStatus(job: JobRow): JobRecord['status'] {
  if (job.kind !== 'collection') return job.status === 'listed' ? 'running' : job.status;
  if (job.status === 'running') return 'expanding';
  return job.status === 'listed' ? 'running' : job.status;
}

/** The job's recorded error: a failed job's, or what cut a collection's listing short. */
function errorRecord(job: JobRow) {
  if (!job.errorCode) return null;
  return {
    code: job.errorCode,
    message: job.errorMessage ?? '',
    detail: job.errorDetail,
    http_status: job.errorHttpStatus,
  };
}

function collectionRecord(job: JobRow): CollectionRecord {
  return {
    title: job.collectionTitle,
    max_items: job.maxItems ?? 0,
    entries_found: job.entriesFound,
    children: job.children,
    done: job.childrenDone,
    failed: job.childrenFailed,
    canceled: job.childrenCanceled,
    refused: job.itemsRefused,
    truncated: job.truncated,
    listing_error: job.status !== 'failed' ? errorRecord(job) : null,
  };
}

/**
 * What the job knows of its source (src/tools/media-metadata.ts); for a job recorded before that
 * was kept, its extractor and media id alone.
 */
function mediaOf(job: JobRow): SourceMedia | null {
  const stored = readStoredMedia(job.media);
  if (stored !== null) return stored;
  if (!job.extractor || !job.mediaId) return null;
  return {
    extractor: job.extractor,
    id: job.mediaId,
    title: null,
    artist: null,
    album: null,
    track: null,
    duration: null,
    upload_date: null,
    webpage_url: null,
  };
}

/** The loudness kept on the content's WAV row, or null when it was not measured. */
function loudnessOf(artifacts: CacheEntryRow[]): LoudnessRecord | null {
  const wav = artifacts.find((artifact) => artifact.name === AUDIO_ARTIFACT_NAME);
  if (!wav || wav.loudnessIntegratedLufs === null || wav.loudnessRangeLu === null || wav.loudnessTruePeakDbtp === null)
    return null;
  return {
    integrated_lufs: wav.loudnessIntegratedLufs,
    range_lu: wav.loudnessRangeLu,
    true_peak_dbtp: wav.loudnessTruePeakDbtp,
  };
}

function evictedRecord(at: number): EvictedRecord {
  return {
    at: new Date(at).toISOString(),
    message:
      'The store evicted this content to make room for other content: its artifacts are gone. Submitting the URL again fetches it again.',
  };
}

function toCallbackRecord(job: JobRow, delivery: CallbackDeliveryRow): CallbackRecord {
  const due = delivery.status === 'pending' && FINAL_STATUSES.has(job.status);
  return {
    url: delivery.url,
    delivery_id: delivery.id,
    status: delivery.status,
    attempt_count: delivery.attemptCount,
    // Never before the job's end: a delivery is due from then.
    next_attempt_at: due ? iso(Math.max(delivery.nextAttemptAt, job.finishedAt ?? 0)) : null,
    attempts: attemptsOf(delivery).map((attempt) => ({
      at: new Date(attempt.at).toISOString(),
      status: attempt.status,
      error: attempt.error,
    })),
  };
}
