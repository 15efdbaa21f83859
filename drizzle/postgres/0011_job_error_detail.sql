-- A failed job's error (src/job-errors.ts) keeps, beside its code and sentence, the specifics
-- (the downloader's or converter's own words, trimmed and cleaned; the egress guard's reason) and
-- the origin's HTTP status for the http_* codes; null for jobs that failed before.
ALTER TABLE "jobs" ADD COLUMN "error_detail" text;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "error_http_status" integer;