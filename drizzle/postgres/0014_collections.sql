-- Collections (issue 47, src/jobs/collection/parent.ts): a job of kind 'collection' lists a playlist,
-- album or feed; each entry becomes an item, and an entry that passes the submission policy a child
-- job (parent_id). The collection's counts of children, and its end once its listing has ended
-- ('listed') and every child has ended, are written by a trigger in the very transaction that
-- links or ends a child, on whichever node: no end can be missed and none counted twice.
CREATE TABLE "collection_items" (
	"parent_id" text NOT NULL,
	"idx" integer NOT NULL,
	"url" text NOT NULL,
	"title" text,
	"job_id" text,
	"problem" text,
	CONSTRAINT "collection_items_parent_id_idx_pk" PRIMARY KEY("parent_id","idx")
);
--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "kind" text DEFAULT 'source' NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "parent_id" text;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "max_items" integer;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "collection_title" text;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "entries_found" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "items_refused" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "children" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "children_done" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "children_failed" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "children_canceled" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "truncated" boolean DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX "jobs_parent_idx" ON "jobs" USING btree ("parent_id") WHERE parent_id is not null;;--> statement-breakpoint
CREATE FUNCTION "jobs_collection_counts"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- The first statement locks the collection's row: children ending at once are counted one after
  -- the other, and the second statement (a new snapshot) sees every count committed before it.
  UPDATE "jobs" SET
    "children" = "children" + (OLD."parent_id" IS NULL)::int,
    "children_done" = "children_done" + (NEW."status" = 'done' AND (OLD."parent_id" IS NULL OR OLD."status" <> 'done'))::int,
    "children_failed" = "children_failed" + (NEW."status" = 'failed' AND (OLD."parent_id" IS NULL OR OLD."status" <> 'failed'))::int,
    "children_canceled" = "children_canceled" + (NEW."status" = 'canceled' AND (OLD."parent_id" IS NULL OR OLD."status" <> 'canceled'))::int
    WHERE "id" = NEW."parent_id";
  UPDATE "jobs" SET "status" = 'done', "finished_at" = coalesce(NEW."finished_at", "finished_at")
    WHERE "id" = NEW."parent_id" AND "status" = 'listed'
      AND "children_done" + "children_failed" + "children_canceled" >= "children";
  RETURN NULL;
END;
$$;--> statement-breakpoint
CREATE TRIGGER "jobs_collection_counts" AFTER UPDATE OF "status", "parent_id" ON "jobs"
  FOR EACH ROW WHEN (NEW."parent_id" IS NOT NULL) EXECUTE FUNCTION "jobs_collection_counts"();