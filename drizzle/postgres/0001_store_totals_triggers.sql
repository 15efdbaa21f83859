-- The store's exact byte and artifact counts (one row, id 1), kept by triggers in the same
-- transaction as every change to cache_entries, as in the SQLite schema: the cap check never
-- sums the whole table.
INSERT INTO "store_totals" ("id", "bytes", "artifacts")
  SELECT 1, coalesce(sum("bytes"), 0), count(*) FROM "cache_entries";
--> statement-breakpoint
CREATE FUNCTION "cache_entries_totals"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE "store_totals" SET "bytes" = "bytes" + NEW."bytes", "artifacts" = "artifacts" + 1 WHERE "id" = 1;
  ELSIF TG_OP = 'DELETE' THEN
    UPDATE "store_totals" SET "bytes" = "bytes" - OLD."bytes", "artifacts" = "artifacts" - 1 WHERE "id" = 1;
  ELSIF NEW."bytes" IS DISTINCT FROM OLD."bytes" THEN
    UPDATE "store_totals" SET "bytes" = "bytes" - OLD."bytes" + NEW."bytes" WHERE "id" = 1;
  END IF;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "cache_entries_totals" AFTER INSERT OR DELETE OR UPDATE OF "bytes" ON "cache_entries"
  FOR EACH ROW EXECUTE FUNCTION "cache_entries_totals"();
