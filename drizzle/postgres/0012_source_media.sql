-- What the downloader (and, for a file found by yt-dlp's generic extraction, the file's own tags)
-- said of a job's source, as the job record's `media` in JSON (src/tools/media-metadata.ts); and
-- on a URL's alias, what the job that stored its content knew. Null for jobs and aliases made
-- before. born_done_job() and born_done_jobs() (0007) copy the alias's `media` onto the job they
-- make, read under the content's lock with the alias itself; otherwise unchanged.
ALTER TABLE "aliases" ADD COLUMN "media" text;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "media" text;--> statement-breakpoint
CREATE OR REPLACE FUNCTION "born_done_job"("p_id" text, "p_url" text, "p_url_key" text, "p_content_id" text, "p_at" bigint, "p_request_id" text, "p_api_key_id" text)
  RETURNS SETOF "jobs" LANGUAGE plpgsql AS $$
DECLARE
  "v_media" text;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(hashtextextended('store:' || "p_content_id", 0));
  SELECT "aliases"."media" INTO "v_media" FROM "aliases" INNER JOIN "cache_entries" ON "cache_entries"."content_id" = "aliases"."content_id"
    WHERE "aliases"."kind" = 'url' AND "aliases"."key" = "p_url_key" AND "aliases"."content_id" = "p_content_id"
    LIMIT 1;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  UPDATE "cache_entries" SET "last_used_at" = "p_at"
    WHERE "content_id" = "p_content_id" AND "last_used_at" < "p_at"
      AND "last_used_at" < (SELECT max("last_used_at") FROM "cache_entries");
  RETURN QUERY INSERT INTO "jobs" ("id", "url", "url_key", "status", "born_done", "created_at", "started_at", "finished_at", "content_id", "request_id", "api_key_id", "media")
    VALUES ("p_id", "p_url", "p_url_key", 'done', true, "p_at", "p_at", "p_at", "p_content_id", "p_request_id", coalesce("p_api_key_id", ''), "v_media")
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
    -- One alias at most per item: (kind, key) is the aliases' primary key.
    SELECT "items".*, "aliases"."media" FROM "items" INNER JOIN "aliases"
      ON "aliases"."kind" = 'url' AND "aliases"."key" = "items"."urlKey" AND "aliases"."content_id" = "items"."contentId"
      WHERE EXISTS (SELECT 1 FROM "cache_entries" WHERE "cache_entries"."content_id" = "items"."contentId")
  ), "uses" AS (
    SELECT "contentId", max("at") AS "at", count(*) OVER () AS "contents" FROM "aliased" GROUP BY "contentId"
  ), "used" AS (
    UPDATE "cache_entries" SET "last_used_at" = "uses"."at" FROM "uses"
      WHERE "cache_entries"."content_id" = "uses"."contentId" AND "cache_entries"."last_used_at" < "uses"."at"
        AND ("uses"."contents" > 1 OR "cache_entries"."last_used_at" < (SELECT max("last_used_at") FROM "cache_entries"))
  )
  INSERT INTO "jobs" ("id", "url", "url_key", "status", "born_done", "created_at", "started_at", "finished_at", "content_id", "request_id", "api_key_id", "media")
    SELECT "id", "url", "urlKey", 'done', true, "at", "at", "at", "contentId", "requestId", coalesce("apiKeyId", ''), "media" FROM "aliased"
    RETURNING *;
END;
$$;
