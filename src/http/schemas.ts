import { z } from '@hono/zod-openapi';
import { ApiErrorCodeSchema as ApiErrorCodes } from '../api-errors.js';
import { JobErrorCodeSchema as JobErrorCodes } from '../job-errors.js';
import { CALLBACK_STATUSES, JOB_KINDS } from '../db/schema/model.js';
import { MAX_FINDINGS_LISTED } from '../store/scrub.js';
import { MEDIA_TEXT_BOUNDS } from '../tools/media-metadata.js';
import { ATTEMPT_LOG_SIZE } from '../webhooks/deliveries.js';

/** The zod schemas of the API: they validate requests and generate openapi.json. */

export const MAX_URL_LENGTH = 2048;
/** The most URLs one POST /sources/batch may carry. */
export const MAX_BATCH_URLS = 100;
/** The most items one page of listJobItems holds, and how many when the request does not say. */
export const MAX_ITEMS_PAGE = 100;
export const DEFAULT_ITEMS_PAGE = 50;

/**
 * A job's status as the API shows it. A collection is `expanding` while its entries are listed,
 * then `running` until its last child ends (src/jobs/collection/parent.ts).
 */
export const JOB_RECORD_STATUSES = ['queued', 'expanding', 'running', 'done', 'failed', 'canceled'] as const;

// The catalogues' codes in an enum of this module's zod: the catalogues are plain zod, which the
// OpenAPI extension may not have reached when they are first imported.
export const ApiErrorCodeSchema = z.enum(ApiErrorCodes.options).openapi('ApiErrorCode', {
  description:
    "Why a request was refused: a stable code from one closed list, whose statuses and meanings are in docs/api.md's API error codes. A client may match on it; new codes can be added.",
});

export const ProblemSchema = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    code: ApiErrorCodeSchema,
    request_id: z.string().optional(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  .openapi('Problem');

const callbackUrl = z.string().max(MAX_URL_LENGTH).optional().openapi({
  description:
    'http or https URL that gets the job record in a signed POST when the job ends (done, failed or canceled); see docs/webhooks.md. Its destination must pass the same address policy as a source URL.',
  example: 'https://hooks.example.org/source-fetch',
});

export const PlaylistOptionSchema = z
  .object({
    max_items: z.number().int().positive().optional().openapi({
      description: 'List at most this many entries (PLAYLIST_MAX_ITEMS, if lower, wins).',
      example: 50,
    }),
    item_callbacks: z.boolean().optional().openapi({
      description:
        "Each child job also gets a callback of its own when it ends, to the submission's `callback_url` (required with it: else 400 `callback_url_required`), signed as any callback; a child shared by several entries gets one. Without it only the collection's own end is called back.",
    }),
  })
  .strict()
  .openapi('PlaylistOption', {
    description:
      "Opt in to a collection: the URL is a playlist, album, channel page or feed, and the job is a parent (`kind` `collection`) that lists it and submits each entry as a child job of its own. Without it a playlist's job fails `playlist_not_supported`.",
  });

const sourceUrl = z.string().openapi({
  description:
    'http or https URL of the media to fetch (at most 2048 characters; a longer one is refused with url_too_long).',
  example: 'https://media.example.org/talk.m4a',
});

export const SubmitSourceBody = z
  .object({
    // Its length is checked with the rest of the URL's rules (src/policy/source-url.ts), so that a
    // URL too long is refused with url_too_long here as in a batch.
    url: z.string().openapi({
      description:
        'http or https URL of the media to fetch (at most 2048 characters; a longer one is refused with url_too_long).',
      example: 'https://media.example.org/talk.m4a',
    }),
    playlist: PlaylistOptionSchema.optional(),
    callback_url: callbackUrl,
  })
  .strict()
  .openapi('SubmitSource');

export const SubmitSourceBatchBody = z
  .object({
    urls: z
      .array(
        z.union([
          sourceUrl,
          z
            .object({ url: sourceUrl, playlist: PlaylistOptionSchema.optional() })
            .strict()
            .openapi('BatchSource', { description: 'A URL with its options: `playlist` makes it a collection.' }),
        ]),
      )
      .min(1)
      .max(MAX_BATCH_URLS)
      .openapi({
        description: `1 to ${MAX_BATCH_URLS} URLs (a string, or an object with \`url\` and \`playlist\`), each treated as one submitSource; a URL given twice gets one download.`,
        example: ['https://media.example.org/a.m4a', 'https://media.example.org/b.m4a'],
      }),
    callback_url: callbackUrl,
  })
  .strict()
  .openapi('SubmitSourceBatch');

export const JobIdParam = z.object({
  id: z
    .string()
    .min(1)
    .max(64)
    .openapi({ param: { name: 'id', in: 'path' }, example: 'c5b2b0d4-2f5e-4c43-9a3e-5f2d1b8f2a11' }),
});

export const ArtifactSchema = z
  .object({
    name: z.string().openapi({
      description:
        "`audio.wav`: the PCM WAV. `peaks.json`: its waveform peaks in BBC audiowaveform's JSON format (version 2: `channels`, `sample_rate`, `samples_per_pixel`, `bits` 8, `length`, `data` as min,max per channel per pixel), which peaks.js, waveform-data and wavesurfer.js read as they are; absent for content stored before peaks were kept.",
      example: 'audio.wav',
    }),
    download_name: z.string().openapi({
      description:
        "The name to save the file under: the source's title (`media.title`) with the artifact's suffix (`My Song.wav`, `My Song.peaks.json`), made safe for every common file system (docs/delivery.md); the artifact's `name` when there is no title. `signed_url` answers with a `Content-Disposition` naming it; a keyed request gets it with `?filename=` and the name.",
      example: 'My Song.wav',
    }),
    path: z.string().openapi({ description: 'Path of getArtifact; needs the API key.' }),
    signed_url: z.string().openapi({
      description:
        "Path with an expiring signature, usable without a key (e.g. <audio src>); it carries `download_name` as `filename` (covered by the signature) when that is not the artifact's `name`.",
    }),
    signed_url_expires_at: z.string(),
    bytes: z.number().int(),
    content_type: z.string(),
    sample_rate: z.number().int().nullable(),
    channels: z.number().int().nullable(),
    duration: z.number().nullable().openapi({ description: 'Seconds.' }),
  })
  .openapi('Artifact', {
    description:
      'One file of the content. `sample_rate`, `channels` and `duration` are those of the WAV, null for `peaks.json`.',
  });

export const LoudnessSchema = z
  .object({
    integrated_lufs: z.number().openapi({ description: 'Integrated loudness, LUFS.', example: -23 }),
    range_lu: z.number().openapi({ description: 'Loudness range, LU.', example: 4.2 }),
    true_peak_dbtp: z.number().openapi({ description: 'True peak of the loudest channel, dBTP.', example: -1.5 }),
  })
  .openapi('Loudness', {
    description:
      "The WAV's loudness per EBU R128 (ITU-R BS.1770), measured from its bytes as the store hashes them. Null when unknown: content stored before loudness was measured, or with LOUDNESS=off, or silent (no true peak).",
  });

const mediaText = (bound: number, description: string) =>
  z
    .string()
    .nullable()
    .openapi({ description: `${description} At most ${bound} characters.` });

export const MediaSchema = z
  .object({
    extractor: z.string().openapi({
      description: "The downloader's extractor (`Generic` for a direct link to a file).",
      example: 'Generic',
    }),
    id: z.string().openapi({ description: 'The media id the extractor gave (for a direct link, the file name).' }),
    title: mediaText(
      MEDIA_TEXT_BOUNDS.title,
      "The media's title; for a direct link to a file, its own title tag (ID3, Vorbis comment, ...) rather than its file name when it has one.",
    ),
    artist: mediaText(
      MEDIA_TEXT_BOUNDS.artist,
      'The artist, else the creator, else the uploader; for a file found by the generic extractor, its own artist tag when the downloader had none.',
    ),
    album: mediaText(
      MEDIA_TEXT_BOUNDS.album,
      'The album; for a file found by the generic extractor, its album tag when the downloader had none.',
    ),
    track: mediaText(MEDIA_TEXT_BOUNDS.track, "The track's title, as music sites give it."),
    duration: z.number().nullable().openapi({
      description:
        "Seconds, as the downloader gave them before the download (the WAV's own is its artifact's `duration`).",
    }),
    upload_date: z.string().nullable().openapi({ description: 'YYYY-MM-DD.', example: '2026-11-30' }),
    webpage_url: z
      .string()
      .nullable()
      .openapi({
        description: `The media's page, http or https only, without user or password. At most ${MEDIA_TEXT_BOUNDS.webpage_url} characters (a longer one is left out).`,
      }),
  })
  .openapi('Media', {
    description:
      "What the downloader said of the source, and for a file found by yt-dlp's generic extraction what its own tags add: every text without control characters, bidirectional overrides or markup (HTML tags are removed, and a `<` that could open one becomes `＜`), cut at its bound with `…`. A job born done shows what the job that stored its URL knew. Null until the downloader has read the media, and for jobs that never got that far.",
  });

export const EvictedSchema = z
  .object({
    at: z.string().openapi({ description: 'When the store removed the content.' }),
    message: z.string().openapi({ description: 'What happened, and that submitting the URL again fetches it again.' }),
  })
  .openapi('Evicted', {
    description:
      'Set on a done job whose content the store no longer holds: evicted (least recently used first, to keep the store within its bounds) or found gone at start-up. `artifacts` is then empty. Null while the content is stored (again).',
  });

export const CallbackAttemptSchema = z
  .object({
    at: z.string().openapi({ description: 'When the attempt started.' }),
    status: z
      .number()
      .int()
      .nullable()
      .openapi({ description: "The receiver's HTTP status; only 2xx delivers (a redirect is not followed)." }),
    error: z.string().nullable().openapi({
      description:
        'Why there was no answer: timeout, connect_failed, tls_failed, no_response, or a refusal of the address policy at connect time (host_localhost, host_unresolvable, address_<range>).',
    }),
  })
  .openapi('CallbackAttempt');

export const CallbackSchema = z
  .object({
    url: z.string(),
    delivery_id: z.string().openapi({
      description: 'Sent as Webhook-Id on every attempt of this delivery: the receiver de-duplicates on it.',
    }),
    status: z.enum(CALLBACK_STATUSES).openapi({
      description:
        "pending: waiting for the job to end or for the next attempt; delivered: the receiver answered 2xx; failed: no attempt succeeded within WEBHOOK_RETRY_FOR_S of the job's end.",
    }),
    attempt_count: z.number().int().openapi({ description: 'Attempts made so far.' }),
    next_attempt_at: z
      .string()
      .nullable()
      .openapi({ description: 'While pending after the job ended: the earliest time of the next attempt.' }),
    attempts: z
      .array(CallbackAttemptSchema)
      .max(ATTEMPT_LOG_SIZE)
      .openapi({ description: `The latest ${ATTEMPT_LOG_SIZE} attempts, oldest first.` }),
  })
  .openapi('Callback', {
    description: "The callback of a job submitted with a callback_url (the job record's `callback` is null otherwise).",
  });

export const JobErrorCodeSchema = z.enum(JobErrorCodes.options).openapi('JobErrorCode', {
  description:
    "Why a job failed: a stable code from one closed list, whose meanings and sentences are in docs/api.md's job error codes. A client may match on it; new codes can be added.",
});

export const JobErrorSchema = z
  .object({
    code: JobErrorCodeSchema,
    message: z.string().openapi({
      description:
        "The code's sentence, for people: plain words, one sentence, its values (a limit, a status, a host) filled in.",
    }),
    detail: z.string().nullable().openapi({
      description:
        "The specifics, in the words of the part that met the failure (the downloader's or converter's own text, trimmed, without secrets or server paths; the egress guard's reason), or null.",
    }),
    http_status: z.number().int().nullable().openapi({
      description: "The origin's HTTP status for the `http_*` codes (404 for `http_not_found`...); else null.",
    }),
  })
  .openapi('JobError', { description: 'Why a failed job failed; null for any other status.' });

export const CollectionSchema = z
  .object({
    title: z.string().nullable().openapi({ description: "The collection's own title, once listed." }),
    max_items: z.number().int().openapi({ description: 'At most this many entries are listed.' }),
    entries_found: z.number().int().openapi({ description: 'Entries listed so far: one item each.' }),
    children: z
      .number()
      .int()
      .openapi({ description: 'Child jobs made (entries of the same URL share one; born-done ones count).' }),
    done: z.number().int().openapi({ description: 'Children done.' }),
    failed: z.number().int().openapi({ description: 'Children failed.' }),
    canceled: z.number().int().openapi({ description: 'Children canceled.' }),
    refused: z.number().int().openapi({ description: 'Entries refused as items (their problem is in listJobItems).' }),
    truncated: z.boolean().openapi({ description: 'The listing stopped at `max_items` while more entries may exist.' }),
    listing_error: JobErrorSchema.nullable().openapi({
      description:
        'Why the listing stopped early, when it did after finding entries (the collection still ends done with them); a listing that found none fails the job with this error.',
    }),
  })
  .openapi('Collection', {
    description:
      "A collection's listing and children (`kind` `collection`); null for a source's job. The job is `done` once its listing has ended and every child has ended, however each ended.",
  });

export const JobSchema = z
  .object({
    job_id: z.string(),
    kind: z.enum(JOB_KINDS).openapi({
      description: '`source`: one URL fetched. `collection`: a playlist, album or feed whose entries are child jobs.',
    }),
    parent_id: z.string().nullable().openapi({ description: "A child job's collection; else null." }),
    status: z.enum(JOB_RECORD_STATUSES).openapi({
      description:
        'queued, running, done, failed, canceled; a collection is `expanding` while it lists its entries, then `running` until its last child ends.',
    }),
    url: z.string(),
    born_done: z.boolean().openapi({ description: 'True when the URL was already stored and nothing was downloaded.' }),
    created_at: z.string(),
    started_at: z.string().nullable(),
    finished_at: z.string().nullable(),
    attempts: z.number().int(),
    progress: z
      .object({
        bytes_done: z.number().int(),
        bytes_total: z.number().int().nullable(),
        percent: z.number().nullable(),
      })
      .nullable(),
    media: z.union([MediaSchema, z.null()]),
    result: z
      .object({
        content_id: z.string(),
        artifacts: z.array(ArtifactSchema),
        loudness: z.union([LoudnessSchema, z.null()]),
        evicted: z.union([EvictedSchema, z.null()]),
      })
      .nullable(),
    error: JobErrorSchema.nullable(),
    callback: z.union([CallbackSchema, z.null()]),
    collection: z.union([CollectionSchema, z.null()]),
  })
  .openapi('Job');

export const BatchItemSchema = z
  .discriminatedUnion('outcome', [
    z.object({
      outcome: z.literal('accepted'),
      url: z.string().openapi({ description: 'The URL as given.' }),
      job: JobSchema,
    }),
    z.object({
      outcome: z.literal('refused'),
      url: z.string().openapi({ description: 'The URL as given.' }),
      problem: ProblemSchema.openapi({
        description: 'What submitSource would have answered for this URL alone (its status and stable code).',
      }),
    }),
  ])
  .openapi('BatchItem');

const itemFields = {
  index: z.number().int().openapi({ description: "The entry's place in the collection, from 1." }),
  title: z.string().nullable().openapi({ description: "The entry's title as listed, or null." }),
  url: z.string().openapi({ description: "The entry's URL as listed." }),
};

export const CollectionItemSchema = z
  .discriminatedUnion('outcome', [
    z.object({ ...itemFields, outcome: z.literal('accepted'), job: JobSchema }),
    z.object({
      ...itemFields,
      outcome: z.literal('refused'),
      problem: ProblemSchema.openapi({
        description: 'What submitSource would have answered for this URL alone (its status and stable code).',
      }),
    }),
  ])
  .openapi('CollectionItem', {
    description:
      "One entry of a collection, in the batch's per-URL shape: accepted with its child job (entries of the same URL share one), or refused with its problem.",
  });

export const CollectionItemsSchema = z
  .object({
    items: z.array(CollectionItemSchema).openapi({ description: 'Items in playlist order.' }),
    next_after: z.number().int().nullable().openapi({
      description: 'Pass as `after` for the next page; null when this page is the last listed so far.',
    }),
  })
  .openapi('CollectionItems');

export const ItemsQuery = z.object({
  after: z.coerce
    .number()
    .int()
    .min(0)
    .default(0)
    .openapi({ param: { name: 'after', in: 'query' }, description: "Items after this index (a page's `next_after`)." }),
  limit: z.coerce
    .number()
    .int()
    .min(1)
    .max(MAX_ITEMS_PAGE)
    .default(DEFAULT_ITEMS_PAGE)
    .openapi({ param: { name: 'limit', in: 'query' }, description: `Items per page, 1 to ${MAX_ITEMS_PAGE}.` }),
});

export const BatchResultSchema = z
  .object({
    accepted: z.number().int().openapi({ description: 'How many URLs got a job.' }),
    refused: z.number().int().openapi({ description: 'How many did not.' }),
    results: z.array(BatchItemSchema).openapi({ description: 'One item per URL, in the order given.' }),
  })
  .openapi('BatchResult');

const ToolHealth = z.object({ present: z.boolean(), path: z.string().nullable(), version: z.string().nullable() });

const DownloaderHealth = ToolHealth.extend({
  released_on: z.string().nullable().openapi({
    description:
      "The release date in the downloader's version (yt-dlp's are dates), YYYY-MM-DD; null when the version names none.",
  }),
  age_days: z.number().int().nullable().openapi({ description: 'Days since that date.' }),
  outdated: z.boolean().openapi({
    description:
      'Older than 90 days: sites change, and an old yt-dlp falls behind them. A warning only: it does not change `status`.',
  }),
});

export const HealthSchema = z
  .object({
    status: z.enum(['ok', 'degraded', 'unavailable']),
    can_fetch: z.boolean(),
    downloader: DownloaderHealth,
    ffmpeg: ToolHealth,
    node_id: z.string().openapi({ description: 'This node, among the nodes sharing the database.' }),
    database: z.object({ ok: z.boolean(), kind: z.enum(['sqlite', 'postgres']) }),
    artifact_root: z.object({
      writable: z.boolean(),
      free_bytes: z
        .number()
        .nullable()
        .openapi({ description: "Bytes free on the artifact root's volume (null: it cannot be asked)." }),
      min_free_bytes: z.number().openapi({
        description: 'What one job can need (STORE_MIN_FREE_BYTES); eviction keeps at least this much free.',
      }),
      can_store: z.boolean().openapi({
        description: 'False when less than min_free_bytes is free: this node takes no job, and `status` is `degraded`.',
      }),
      stored_bytes: z.number().nullable().openapi({
        description:
          "Bytes of content the store holds, what eviction can free (null: the database cannot be asked). Below min_free_bytes with less stored than is short, eviction cannot make room: files that are not the store's fill the volume.",
      }),
    }),
    confinement: z.object({
      mode: z.enum(['netns', 'off']).openapi({
        description: "How the tools are confined to the egress guard; 'off' only when the operator chose it.",
      }),
      ok: z.boolean(),
      reason: z
        .string()
        .nullable()
        .openapi({ description: 'Why the tools cannot be confined (or that confinement is turned off).' }),
    }),
    warnings: z.array(z.object({ code: z.string(), message: z.string() })).openapi({
      description:
        'What an operator should look at although the service works (`downloader_outdated`, `store_low_on_space`).',
    }),
  })
  .openapi('Health');

export type JobRecord = z.infer<typeof JobSchema>;
export type CollectionRecord = z.infer<typeof CollectionSchema>;
export type CollectionItemsRecord = z.infer<typeof CollectionItemsSchema>;
export type CollectionItemRecord = z.infer<typeof CollectionItemSchema>;
export type CallbackRecord = z.infer<typeof CallbackSchema>;
export type EvictedRecord = z.infer<typeof EvictedSchema>;
export type LoudnessRecord = z.infer<typeof LoudnessSchema>;
export type BatchResult = z.infer<typeof BatchResultSchema>;
export type HealthReport = z.infer<typeof HealthSchema>;

export const ScrubFindingSchema = z
  .object({
    content_id: z.string(),
    name: z.string(),
    problem: z.enum(['corrupt', 'missing', 'unreadable']).openapi({
      description:
        "corrupt: the file's bytes do not hash to its content id; missing: its cache row names a file that is gone; unreadable: reading it failed (`error`).",
    }),
    sha256: z.string().nullable().openapi({ description: 'corrupt: the SHA-256 of the bytes read.' }),
    error: z.string().nullable().openapi({ description: 'unreadable: the error code of the read (EIO, EISDIR, ...).' }),
    action: z.enum(['quarantined', 'deferred', 'none']).openapi({
      description:
        'quarantined: the file left the store for the quarantine folder (DATA_DIR/quarantine), its cache row and aliases went, so the next submission of its URL downloads it again; deferred: a job was storing that content at that moment, so it stays for the next pass; none: reported only.',
    }),
    quarantined_as: z
      .string()
      .nullable()
      .openapi({ description: 'Where under the quarantine folder: `<content id>.<unix ms>/<name>`.' }),
  })
  .openapi('ScrubFinding');

export const ScrubReportSchema = z
  .object({
    pass_id: z.string(),
    node_id: z.string().openapi({ description: 'The node that runs the pass.' }),
    trigger: z
      .enum(['request', 'schedule'])
      .openapi({ description: 'Asked for (scrubStore), or the background pass (SCRUB_INTERVAL_S).' }),
    status: z
      .enum(['running', 'done', 'failed', 'stopped'])
      .openapi({ description: 'stopped: the node shut down during the pass.' }),
    started_at: z.string(),
    finished_at: z.string().nullable(),
    checked: z
      .number()
      .int()
      .openapi({ description: 'Artifacts read whole and compared with their content id so far.' }),
    bytes_read: z.number().int(),
    corrupt: z.number().int(),
    moved: z.number().int().openapi({ description: 'Corrupt artifacts moved to the quarantine folder.' }),
    missing: z.number().int(),
    unreadable: z.number().int(),
    findings: z
      .array(ScrubFindingSchema)
      .openapi({ description: `Each problem found, in the order found: the first ${MAX_FINDINGS_LISTED}.` }),
    findings_omitted: z.number().int().openapi({ description: 'Problems found beyond those listed.' }),
    error: z.string().nullable().openapi({ description: 'Why a failed pass stopped.' }),
  })
  .openapi('ScrubReport');

export type ScrubReportRecord = z.infer<typeof ScrubReportSchema>;
