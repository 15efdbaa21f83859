-- Born-done jobs submitted at the same time, in one round trip and one commit (src/jobs/queue.ts,
-- insertBornDoneJobsLocked): born_done_job() for a JSON array of them, in a few statements
-- rather than a few per job. Each content's shared 'use' lock is taken in lockContent's order
-- (src/store/pins.ts: sorted ids, which are ASCII: byte order), so that no two lockers wait for
-- each other in a cycle. After the locks, a job is made where its URL's alias still points to its
-- content and the content is still stored; each such content's use is recorded as recordUse does
-- (src/store/usage.ts), except that when several contents are used together each is written, so
-- that none ranks below another used at the same time. Returns the jobs made.
CREATE FUNCTION "born_done_jobs"("p_jobs" jsonb)
  RETURNS SETOF "jobs" LANGUAGE plpgsql AS $$
DECLARE
  "content" text;
BEGIN
  FOR "content" IN SELECT "contentId" COLLATE "C" FROM jsonb_to_recordset("p_jobs") AS "item"("contentId" text) GROUP BY 1 ORDER BY 1 LOOP
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('store:' || "content", 0));
  END LOOP;
  RETURN QUERY
  WITH "items" AS (
    SELECT * FROM jsonb_to_recordset("p_jobs") AS "item"("id" text, "url" text, "urlKey" text, "contentId" text, "at" bigint, "requestId" text)
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
  INSERT INTO "jobs" ("id", "url", "url_key", "status", "born_done", "created_at", "started_at", "finished_at", "content_id", "request_id")
    SELECT "id", "url", "urlKey", 'done', true, "at", "at", "at", "contentId", "requestId" FROM "aliased"
    RETURNING *;
END;
$$;
