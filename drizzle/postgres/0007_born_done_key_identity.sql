-- born_done_job() and born_done_jobs() (0004, 0005) record the submitting key's identity
-- (jobs.api_key_id, 0006) as the other submissions do; otherwise unchanged. born_done_job takes
-- it as a seventh argument (a new signature: the six-argument one goes); born_done_jobs reads it
-- from each item's "apiKeyId" ('' when absent).
DROP FUNCTION "born_done_job"(text, text, text, text, bigint, text);--> statement-breakpoint
CREATE FUNCTION "born_done_job"("p_id" text, "p_url" text, "p_url_key" text, "p_content_id" text, "p_at" bigint, "p_request_id" text, "p_api_key_id" text)
  RETURNS SETOF "jobs" LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(hashtextextended('store:' || "p_content_id", 0));
  PERFORM 1 FROM "aliases" INNER JOIN "cache_entries" ON "cache_entries"."content_id" = "aliases"."content_id"
    WHERE "aliases"."kind" = 'url' AND "aliases"."key" = "p_url_key" AND "aliases"."content_id" = "p_content_id";
  IF NOT FOUND THEN
    RETURN;
  END IF;
  UPDATE "cache_entries" SET "last_used_at" = "p_at"
    WHERE "content_id" = "p_content_id" AND "last_used_at" < "p_at"
      AND "last_used_at" < (SELECT max("last_used_at") FROM "cache_entries");
  RETURN QUERY INSERT INTO "jobs" ("id", "url", "url_key", "status", "born_done", "created_at", "started_at", "finished_at", "content_id", "request_id", "api_key_id")
    VALUES ("p_id", "p_url", "p_url_key", 'done', true, "p_at", "p_at", "p_at", "p_content_id", "p_request_id", coalesce("p_api_key_id", ''))
    RETURNING *;
END;
$$;--> statement-breakpoint
CREATE OR REPLACE FUNCTION "born_done_jobs"("p_jobs" jsonb)
  RETURNS SETOF "jobs" LANGUAGE plpgsql AS $$
DECLARE
  "content" text;
BEGIN
  FOR "content" IN SELECT "contentId" COLLATE "C" FROM jsonb_to_recordset("p_jobs") AS "item"("contentId" text) GROUP BY 1 ORDER BY 1 LOOP
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('store:' || "content", 0));
  END LOOP;
  RETURN QUERY
  WITH "items" AS (
    SELECT * FROM jsonb_to_recordset("p_jobs") AS "item"("id" text, "url" text, "urlKey" text, "contentId" text, "at" bigint, "requestId" text, "apiKeyId" text)
  ), "aliased" AS (
    SELECT "items".* FROM "items" WHERE EXISTS (
      SELECT 1 FROM "aliases" INNER JOIN "cache_entries" ON "cache_entries"."content_id" = "aliases"."content_id"
        WHERE "aliases"."kind" = 'url' AND "aliases"."key" = "items"."urlKey" AND "aliases"."content_id" = "items"."contentId")
  ), "uses" AS (
    SELECT "contentId", max("at") AS "at", count(*) OVER () AS "contents" FROM "aliased" GROUP BY "contentId"
  ), "used" AS (
    UPDATE "cache_entries" SET "last_used_at" = "uses"."at" FROM "uses"
      WHERE "cache_entries"."content_id" = "uses"."contentId" AND "cache_entries"."last_used_at" < "uses"."at"
        AND ("uses"."contents" > 1 OR "cache_entries"."last_used_at" < (SELECT max("last_used_at") FROM "cache_entries"))
  )
  INSERT INTO "jobs" ("id", "url", "url_key", "status", "born_done", "created_at", "started_at", "finished_at", "content_id", "request_id", "api_key_id")
    SELECT "id", "url", "urlKey", 'done', true, "at", "at", "at", "contentId", "requestId", coalesce("apiKeyId", '') FROM "aliased"
    RETURNING *;
END;
$$;
