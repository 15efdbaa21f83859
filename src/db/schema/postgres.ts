import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  doublePrecision,
  index,
  integer,
  pgTable,
  primaryKey,
  text,
  uniqueIndex,
} from 'drizzle-orm/pg-core';
import { JOB_ERROR_CODES } from '../../job-errors.js';
import { ALIAS_KINDS, CALLBACK_STATUSES, JOB_KINDS, JOB_STATUSES } from './model.js';

/**
 * The PostgreSQL schema: the twin of ./sqlite.ts, whose comments say what each table and column is
 * for. test/unit/db-schemas.test.ts checks that both have the same tables, columns, keys and
 * indexes. Times are milliseconds since the epoch.
 */
/** 64-bit integers (times in ms, byte counts), read as JavaScript numbers. */
const int64 = (name: string) => bigint(name, { mode: 'number' });

export const jobs = pgTable(
  'jobs',
  {
    id: text('id').primaryKey(),
    url: text('url').notNull(),
    urlKey: text('url_key').notNull(),
    status: text('status', { enum: JOB_STATUSES }).notNull(),
    bornDone: boolean('born_done').notNull().default(false),
    followsJobId: text('follows_job_id'),
    createdAt: int64('created_at').notNull(),
    startedAt: int64('started_at'),
    finishedAt: int64('finished_at'),
    attempts: integer('attempts').notNull().default(0),
    lockOwner: text('lock_owner'),
    leaseExpiresAt: int64('lease_expires_at'),
    progressBytes: int64('progress_bytes'),
    progressTotalBytes: int64('progress_total_bytes'),
    contentId: text('content_id'),
    errorCode: text('error_code', { enum: JOB_ERROR_CODES }),
    errorMessage: text('error_message'),
    errorDetail: text('error_detail'),
    errorHttpStatus: integer('error_http_status'),
    extractor: text('extractor'),
    mediaId: text('media_id'),
    mediaKey: text('media_key'),
    requestId: text('request_id'),
    apiKeyId: text('api_key_id').notNull().default(''),
    storedBytes: int64('stored_bytes'),
    media: text('media'),
    kind: text('kind', { enum: JOB_KINDS }).notNull().default('source'),
    parentId: text('parent_id'),
    maxItems: integer('max_items'),
    collectionTitle: text('collection_title'),
    entriesFound: integer('entries_found').notNull().default(0),
    itemsRefused: integer('items_refused').notNull().default(0),
    children: integer('children').notNull().default(0),
    childrenDone: integer('children_done').notNull().default(0),
    childrenFailed: integer('children_failed').notNull().default(0),
    childrenCanceled: integer('children_canceled').notNull().default(0),
    truncated: boolean('truncated').notNull().default(false),
    itemCallbacks: boolean('item_callbacks').notNull().default(false),
  },
  (t) => [
    index('jobs_claim_idx')
      .on(t.status, t.createdAt)
      .where(sql`status = 'queued'`),
    index('jobs_claim_key_idx')
      .on(t.apiKeyId, t.createdAt)
      .where(sql`status = 'queued'`),
    index('jobs_lease_idx')
      .on(t.status, t.leaseExpiresAt)
      .where(sql`status = 'running'`),
    index('jobs_url_key_idx').on(t.urlKey, t.status),
    index('jobs_follows_idx')
      .on(t.followsJobId)
      .where(sql`follows_job_id is not null`),
    uniqueIndex('jobs_one_leader_per_url')
      .on(t.apiKeyId, t.urlKey)
      .where(sql`status in ('queued', 'running') and follows_job_id is null`),
    uniqueIndex('jobs_one_download_per_media')
      .on(t.apiKeyId, t.mediaKey)
      .where(sql`status = 'running' and media_key is not null`),
    index('jobs_key_stored_idx')
      .on(t.apiKeyId, t.finishedAt)
      .where(sql`stored_bytes is not null`),
    index('jobs_parent_idx')
      .on(t.parentId)
      .where(sql`parent_id is not null`),
  ],
);

export const collectionItems = pgTable(
  'collection_items',
  {
    parentId: text('parent_id').notNull(),
    idx: integer('idx').notNull(),
    url: text('url').notNull(),
    title: text('title'),
    jobId: text('job_id'),
    problem: text('problem'),
  },
  (t) => [primaryKey({ columns: [t.parentId, t.idx] })],
);

export const cacheEntries = pgTable(
  'cache_entries',
  {
    contentId: text('content_id').notNull(),
    name: text('name').notNull(),
    kind: text('kind').notNull(),
    bytes: int64('bytes').notNull(),
    contentType: text('content_type').notNull(),
    sampleRate: integer('sample_rate'),
    channels: integer('channels'),
    durationS: doublePrecision('duration_s'),
    /** EBU R128 loudness of the content, on its audio.wav row (null: not measured, or silent). */
    loudnessIntegratedLufs: doublePrecision('loudness_integrated_lufs'),
    loudnessRangeLu: doublePrecision('loudness_range_lu'),
    loudnessTruePeakDbtp: doublePrecision('loudness_true_peak_dbtp'),
    createdAt: int64('created_at').notNull(),
    lastUsedAt: int64('last_used_at').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.contentId, t.name] }),
    index('cache_entries_lru_idx').on(t.lastUsedAt, t.contentId, t.name),
  ],
);

export const aliases = pgTable(
  'aliases',
  {
    kind: text('kind', { enum: ALIAS_KINDS }).notNull(),
    key: text('key').notNull(),
    contentId: text('content_id').notNull(),
    createdAt: int64('created_at').notNull(),
    media: text('media'),
  },
  (t) => [primaryKey({ columns: [t.kind, t.key] }), index('aliases_content_idx').on(t.contentId)],
);

export const storeTotals = pgTable('store_totals', {
  id: integer('id').primaryKey(),
  bytes: int64('bytes').notNull(),
  artifacts: int64('artifacts').notNull(),
});

export const storePins = pgTable(
  'store_pins',
  {
    contentId: text('content_id').notNull(),
    holder: text('holder').notNull(),
    expiresAt: int64('expires_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.contentId, t.holder] })],
);

export const evictedContent = pgTable('evicted_content', {
  contentId: text('content_id').primaryKey(),
  evictedAt: int64('evicted_at').notNull(),
});

export const keyClaims = pgTable('key_claims', {
  apiKeyId: text('api_key_id').primaryKey(),
  lastClaimedAt: int64('last_claimed_at').notNull(),
});

export const serviceLeases = pgTable('service_leases', {
  name: text('name').primaryKey(),
  holder: text('holder').notNull(),
  expiresAt: int64('expires_at').notNull(),
});

export const serviceSecrets = pgTable('service_secrets', {
  name: text('name').primaryKey(),
  value: text('value').notNull(),
  createdAt: int64('created_at').notNull(),
});

export const callbackDeliveries = pgTable(
  'callback_deliveries',
  {
    id: text('id').primaryKey(),
    jobId: text('job_id').notNull(),
    url: text('url').notNull(),
    status: text('status', { enum: CALLBACK_STATUSES }).notNull(),
    createdAt: int64('created_at').notNull(),
    nextAttemptAt: int64('next_attempt_at').notNull(),
    attemptCount: integer('attempt_count').notNull().default(0),
    attemptLog: text('attempt_log').notNull(),
    lockOwner: text('lock_owner'),
    leaseExpiresAt: int64('lease_expires_at'),
    finishedAt: int64('finished_at'),
  },
  (t) => [
    uniqueIndex('callback_deliveries_job_idx').on(t.jobId),
    index('callback_deliveries_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`status = 'pending'`),
  ],
);
