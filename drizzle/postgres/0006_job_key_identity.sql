-- Jobs know who submitted them: api_key_id, a digest of the API key (src/jobs/key-identity.ts),
-- never the key; '' for jobs made before. stored_bytes: the bytes of new content a job put into
-- the store, counted against its key's allowance (src/store/key-allowance.ts), which sums them
-- over a window through jobs_key_stored_idx (only jobs that stored something are in it).
ALTER TABLE "jobs" ADD COLUMN "api_key_id" text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "stored_bytes" bigint;--> statement-breakpoint
CREATE INDEX "jobs_key_stored_idx" ON "jobs" USING btree ("api_key_id","finished_at") WHERE stored_bytes is not null;