-- Turns across API keys (src/jobs/queue.ts, claimNextJob): key_claims holds when each key last had
-- a job claimed; of the keys with as few jobs running, the one whose turn is oldest goes first.
-- jobs_claim_key_idx holds each key's queued jobs in their order, so that the key's oldest is found
-- at once however many jobs other keys have queued before it.
CREATE TABLE "key_claims" (
	"api_key_id" text PRIMARY KEY NOT NULL,
	"last_claimed_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE INDEX "jobs_claim_key_idx" ON "jobs" USING btree ("api_key_id","created_at") WHERE status = 'queued';