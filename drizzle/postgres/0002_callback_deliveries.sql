CREATE TABLE "callback_deliveries" (
	"id" text PRIMARY KEY NOT NULL,
	"job_id" text NOT NULL,
	"url" text NOT NULL,
	"status" text NOT NULL,
	"created_at" bigint NOT NULL,
	"next_attempt_at" bigint NOT NULL,
	"attempt_count" integer DEFAULT 0 NOT NULL,
	"attempt_log" text NOT NULL,
	"lock_owner" text,
	"lease_expires_at" bigint,
	"finished_at" bigint
);
--> statement-breakpoint
CREATE UNIQUE INDEX "callback_deliveries_job_idx" ON "callback_deliveries" USING btree ("job_id");--> statement-breakpoint
CREATE INDEX "callback_deliveries_due_idx" ON "callback_deliveries" USING btree ("next_attempt_at") WHERE status = 'pending';