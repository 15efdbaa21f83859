-- Content the store removed (evicted, or found gone at start-up) and when: a job done with it
-- says so in its record (src/jobs/job-service.ts). Cleared when the same content is stored again.
CREATE TABLE "evicted_content" (
	"content_id" text PRIMARY KEY NOT NULL,
	"evicted_at" bigint NOT NULL
);
