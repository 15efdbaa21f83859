/** What both schemas (./sqlite.ts, ./postgres.ts) share: the value sets of their enum columns. */
export const JOB_STATUSES = ['queued', 'running', 'done', 'failed', 'canceled'] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];

export const ALIAS_KINDS = ['url', 'media'] as const;
export type AliasKind = (typeof ALIAS_KINDS)[number];
