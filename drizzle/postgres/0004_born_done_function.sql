-- A born-done job in one round trip (src/jobs/queue.ts, insertBornDoneJobLocked): under the
-- content's shared 'use' lock (the key is lockContent's, src/store/pins.ts), if the URL's alias
-- still points to this content and the content is still stored, its use is recorded (as
-- recordUse, src/store/usage.ts) and the job inserted. Each statement of a volatile function
-- sees what committed before it began, as the statements of a READ COMMITTED transaction do:
-- the alias is read after the lock is taken. Returns the job, or nothing.
CREATE FUNCTION "born_done_job"("p_id" text, "p_url" text, "p_url_key" text, "p_content_id" text, "p_at" bigint, "p_request_id" text)
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
  RETURN QUERY INSERT INTO "jobs" ("id", "url", "url_key", "status", "born_done", "created_at", "started_at", "finished_at", "content_id", "request_id")
    VALUES ("p_id", "p_url", "p_url_key", 'done', true, "p_at", "p_at", "p_at", "p_content_id", "p_request_id")
    RETURNING *;
END;
$$;
