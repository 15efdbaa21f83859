-- Ended jobs (which pile up) leave the claim, lease and follower indexes: each holds only the jobs
-- its queries look for (test/unit/db-job-indexes.test.ts), and inserting a born-done job writes
-- three index pages fewer.
DROP INDEX "jobs_claim_idx";--> statement-breakpoint
DROP INDEX "jobs_lease_idx";--> statement-breakpoint
DROP INDEX "jobs_follows_idx";--> statement-breakpoint
CREATE INDEX "jobs_claim_idx" ON "jobs" USING btree ("status","created_at") WHERE status = 'queued';--> statement-breakpoint
CREATE INDEX "jobs_lease_idx" ON "jobs" USING btree ("status","lease_expires_at") WHERE status = 'running';--> statement-breakpoint
CREATE INDEX "jobs_follows_idx" ON "jobs" USING btree ("follows_job_id") WHERE follows_job_id is not null;