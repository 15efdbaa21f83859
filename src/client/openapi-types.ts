// Generated from openapi.json by openapi-typescript: `npm run openapi:generate`. Do not edit.

export interface paths {
    "/healthz": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Whether the service can fetch: downloader, ffmpeg, database, artifact root. No key needed. */
        get: operations["getHealth"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/artifacts/{cid}/{name}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A stored file. Needs the API key or a signed URL. Supports Range, If-None-Match, If-Range and HEAD. */
        get: operations["getArtifact"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Prometheus metrics (text exposition format). Prometheus scrapes with the API key as a bearer token. */
        get: operations["getMetrics"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/store/scrub": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** This node's scrub pass: the one running, or else the last one that ended. */
        get: operations["getStoreScrub"];
        put?: never;
        /**
         * Check every stored artifact against its content id now; corrupt ones leave the store for the quarantine folder.
         * @description Starts a scrub pass on this node, or joins the one running here, and answers its report once it ends, or after `wait_s` with the report so far (202; follow it with getStoreScrub on the same node). Every stored file is read (at SCRUB_BYTES_PER_S) and its SHA-256 compared with its content id; a corrupt one is moved to DATA_DIR/quarantine, and its cache row and aliases are dropped, so its artifact answers 404 and the next submission of its URL downloads it again.
         */
        post: operations["scrubStore"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/webhook-secret": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The secrets that sign the callbacks of this key's jobs, for its receivers to verify them.
         * @description Each API key has secrets of its own, derived from the service's: a callback verifies under the secret of the key that submitted its job, and under no other key's, so a receiver that holds only its key's secret can tell that a callback is about a job of that key. Answered with `Cache-Control: no-store`.
         */
        get: operations["getWebhookSecret"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sources": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Fetch the best audio of a URL as a 44.1 kHz WAV, asynchronously. */
        post: operations["submitSource"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/sources/batch": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Submit up to 100 URLs at once: one job each, under the same rules as submitSource.
         * @description A well-formed batch is answered 200 whatever became of each URL: `results` has one item per URL, in the order given, either accepted (with its job record) or refused (with the problem document submitSource would have answered for it alone: 400, 422, 429 queue_full, 503 confinement_unavailable). A URL given twice gets one download that both jobs share. The whole batch is refused (400, 413, 415, 422) only when the body itself is: not JSON, not 1 to 100 strings, or a callback_url that is malformed or refused.
         */
        post: operations["submitSourceBatch"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The job record: status, progress, and the result or the error. */
        get: operations["getJob"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}/cancel": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Cancel a queued or running job; its tools are killed and nothing is stored. */
        post: operations["cancelJob"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}/items": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * A collection's entries, in playlist order: each accepted with its child job, or refused with its problem.
         * @description Pages of at most 100 items (`limit`, default 50), after the index `after`; a page that is full gives `next_after` for the next. Entries appear as the collection lists them.
         */
        get: operations["listJobItems"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/jobs/{id}/events": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The job's record as Server-Sent Events, each time its status or progress changes, until it ends.
         * @description A `text/event-stream`: one `job` event per change, whose `data` is the job record (the same JSON as getJob) and whose `id` names that state; the first event is the current state, the last one the final state (done, failed or canceled), after which the stream ends. Comment lines (`: keep-alive`) keep an idle stream open. Reconnecting with `Last-Event-ID` sends the current state only if it differs from that one; 204 when that was the final state already. Answers the same on every node, whichever node runs the job. getEvents follows many jobs in one stream. A collection's record is sent at each change of its counts; and, for each of its entries whose child job ends while the stream is open, an `item` event whose `data` is the item as listJobItems shows it (index, title, URL, the child's final record: its content id or error), one per entry (two entries of the same URL: two events for their one child), after the collection's record that counts that child, with that record's `id`. Children that had ended when the stream opened are told by the counts only: listJobItems has every item. Item events are never dropped while the stream is open: past what the stream queues unread they wait, and are sent as the client reads.
         */
        get: operations["getJobEvents"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/events": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The records of many jobs as one stream of Server-Sent Events, each time one of them changes, until all have ended.
         * @description The stream of getJobEvents for up to 200 jobs at once, on one connection: the same `job` events, each the whole record of one job (its `job_id` says which) with the same `id` as that job's own stream would give it. First the state of each job now, in the order named; a job that has ended sends its final state and nothing more; then every change of the others, until the last of them has ended, when the stream ends. Counts as one stream against the limits per key and per node. Reconnecting with `Last-Event-ID` sends every job's current state but that one (a client loses nothing but repeats): name only the jobs not yet ended. 204 when there is nothing to send: every job has ended and the one state left is the Last-Event-ID. A collection's record is sent at each change of its counts; and, for each of its entries whose child job ends while the stream is open, an `item` event whose `data` is the item as listJobItems shows it (index, title, URL, the child's final record: its content id or error), one per entry (two entries of the same URL: two events for their one child), after the collection's record that counts that child, with that record's `id`. Children that had ended when the stream opened are told by the counts only: listJobItems has every item. Item events are never dropped while the stream is open: past what the stream queues unread they wait, and are sent as the client reads.
         */
        get: operations["getEvents"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        Health: {
            /** @enum {string} */
            status: "ok" | "degraded" | "unavailable";
            can_fetch: boolean;
            downloader: {
                present: boolean;
                path: string | null;
                version: string | null;
                /** @description The release date in the downloader's version (yt-dlp's are dates), YYYY-MM-DD; null when the version names none. */
                released_on: string | null;
                /** @description Days since that date. */
                age_days: number | null;
                /** @description Older than 90 days: sites change, and an old yt-dlp falls behind them. A warning only: it does not change `status`. */
                outdated: boolean;
            };
            ffmpeg: {
                present: boolean;
                path: string | null;
                version: string | null;
            };
            /** @description This node, among the nodes sharing the database. */
            node_id: string;
            database: {
                ok: boolean;
                /** @enum {string} */
                kind: "sqlite" | "postgres";
            };
            artifact_root: {
                writable: boolean;
                /** @description Bytes free on the artifact root's volume (null: it cannot be asked). */
                free_bytes: number | null;
                /** @description What one job can need (STORE_MIN_FREE_BYTES); eviction keeps at least this much free. */
                min_free_bytes: number;
                /** @description False when less than min_free_bytes is free: this node takes no job, and `status` is `degraded`. */
                can_store: boolean;
                /** @description Bytes of content the store holds, what eviction can free (null: the database cannot be asked). Below min_free_bytes with less stored than is short, eviction cannot make room: files that are not the store's fill the volume. */
                stored_bytes: number | null;
            };
            confinement: {
                /**
                 * @description How the tools are confined to the egress guard; 'off' only when the operator chose it.
                 * @enum {string}
                 */
                mode: "netns" | "off";
                ok: boolean;
                /** @description Why the tools cannot be confined (or that confinement is turned off). */
                reason: string | null;
            };
            /** @description What an operator should look at although the service works (`downloader_outdated`, `store_low_on_space`). */
            warnings: {
                code: string;
                message: string;
            }[];
        };
        Problem: {
            type: string;
            title: string;
            status: number;
            detail: string;
            code: components["schemas"]["ApiErrorCode"];
            request_id?: string;
            errors?: {
                path: string;
                message: string;
            }[];
        };
        /**
         * @description Why a request was refused: a stable code from one closed list, whose statuses and meanings are in docs/api.md's API error codes. A client may match on it; new codes can be added.
         * @enum {string}
         */
        ApiErrorCode: "validation_failed" | "invalid_json" | "url_invalid" | "url_host_missing" | "url_scheme_not_allowed" | "url_credentials_not_allowed" | "url_smuggled_data" | "url_too_long" | "host_invalid" | "port_invalid" | "callback_url_required" | "too_many_jobs" | "artifact_path_invalid" | "unauthorized" | "signature_invalid" | "signature_expired" | "job_not_found" | "job_not_collection" | "artifact_not_found" | "scrub_not_found" | "route_not_found" | "job_already_finished" | "scrub_running_elsewhere" | "body_too_large" | "unsupported_media_type" | "range_not_satisfiable" | "host_localhost" | "host_unresolvable" | "collection_nested" | "address_invalid" | "address_unspecified" | "address_loopback" | "address_private" | "address_link_local" | "address_cgnat" | "address_broadcast" | "address_multicast" | "address_documentation" | "address_benchmarking" | "address_reserved" | "address_as112" | "address_amt" | "address_orchid" | "address_unique_local" | "address_site_local" | "address_nat64_local" | "address_ipv4_compatible" | "address_ipv4_translated" | "address_six_to_four" | "address_teredo" | "rate_limited" | "queue_full" | "too_many_event_streams" | "internal_error" | "shutting_down" | "database_unavailable" | "storage_full" | "confinement_unavailable";
        ScrubReport: {
            pass_id: string;
            /** @description The node that runs the pass. */
            node_id: string;
            /**
             * @description Asked for (scrubStore), or the background pass (SCRUB_INTERVAL_S).
             * @enum {string}
             */
            trigger: "request" | "schedule";
            /**
             * @description stopped: the node shut down during the pass.
             * @enum {string}
             */
            status: "running" | "done" | "failed" | "stopped";
            started_at: string;
            finished_at: string | null;
            /** @description Artifacts read whole and compared with their content id so far. */
            checked: number;
            bytes_read: number;
            corrupt: number;
            /** @description Corrupt artifacts moved to the quarantine folder. */
            moved: number;
            missing: number;
            unreadable: number;
            /** @description Each problem found, in the order found: the first 1000. */
            findings: components["schemas"]["ScrubFinding"][];
            /** @description Problems found beyond those listed. */
            findings_omitted: number;
            /** @description Why a failed pass stopped. */
            error: string | null;
        };
        ScrubFinding: {
            content_id: string;
            name: string;
            /**
             * @description corrupt: the file's bytes do not hash to its content id; missing: its cache row names a file that is gone; unreadable: reading it failed (`error`).
             * @enum {string}
             */
            problem: "corrupt" | "missing" | "unreadable";
            /** @description corrupt: the SHA-256 of the bytes read. */
            sha256: string | null;
            /** @description unreadable: the error code of the read (EIO, EISDIR, ...). */
            error: string | null;
            /**
             * @description quarantined: the file left the store for the quarantine folder (DATA_DIR/quarantine), its cache row and aliases went, so the next submission of its URL downloads it again; deferred: a job was storing that content at that moment, so it stays for the next pass; none: reported only.
             * @enum {string}
             */
            action: "quarantined" | "deferred" | "none";
            /** @description Where under the quarantine folder: `<content id>.<unix ms>/<name>`. */
            quarantined_as: string | null;
        };
        WebhookSecrets: {
            /** @description This key's signing secrets, Standard Webhooks' `whsec_` form, the current one first: one per secret the service signs with (more than one while it rotates them). A callback carries a signature for each. */
            secrets: string[];
        };
        Job: {
            job_id: string;
            /**
             * @description `source`: one URL fetched. `collection`: a playlist, album or feed whose entries are child jobs.
             * @enum {string}
             */
            kind: "source" | "collection";
            /** @description A child job's collection; else null. */
            parent_id: string | null;
            /**
             * @description queued, running, done, failed, canceled; a collection is `expanding` while it lists its entries, then `running` until its last child ends.
             * @enum {string}
             */
            status: "queued" | "expanding" | "running" | "done" | "failed" | "canceled";
            url: string;
            /** @description True when the URL was already stored and nothing was downloaded. */
            born_done: boolean;
            created_at: string;
            started_at: string | null;
            finished_at: string | null;
            attempts: number;
            progress: {
                bytes_done: number;
                bytes_total: number | null;
                percent: number | null;
            } | null;
            media: components["schemas"]["Media"] | null;
            result: {
                content_id: string;
                artifacts: components["schemas"]["Artifact"][];
                loudness: components["schemas"]["Loudness"] | null;
                evicted: components["schemas"]["Evicted"] | null;
            } | null;
            error: components["schemas"]["JobError"];
            callback: components["schemas"]["Callback"] | null;
            collection: components["schemas"]["Collection"] | null;
        };
        /** @description What the downloader said of the source, and for a file found by yt-dlp's generic extraction what its own tags add: every text without control characters, bidirectional overrides or markup (HTML tags are removed, and a `<` that could open one becomes `＜`), cut at its bound with `…`. A job born done shows what the job that stored its URL knew. Null until the downloader has read the media, and for jobs that never got that far. */
        Media: {
            /**
             * @description The downloader's extractor (`Generic` for a direct link to a file).
             * @example Generic
             */
            extractor: string;
            /** @description The media id the extractor gave (for a direct link, the file name). */
            id: string;
            /** @description The media's title; for a direct link to a file, its own title tag (ID3, Vorbis comment, ...) rather than its file name when it has one. At most 300 characters. */
            title: string | null;
            /** @description The artist, else the creator, else the uploader; for a file found by the generic extractor, its own artist tag when the downloader had none. At most 200 characters. */
            artist: string | null;
            /** @description The album; for a file found by the generic extractor, its album tag when the downloader had none. At most 200 characters. */
            album: string | null;
            /** @description The track's title, as music sites give it. At most 200 characters. */
            track: string | null;
            /** @description Seconds, as the downloader gave them before the download (the WAV's own is its artifact's `duration`). */
            duration: number | null;
            /**
             * @description YYYY-MM-DD.
             * @example 2026-11-30
             */
            upload_date: string | null;
            /** @description The media's page, http or https only, without user or password. At most 2048 characters (a longer one is left out). */
            webpage_url: string | null;
        };
        /** @description One file of the content. `sample_rate`, `channels` and `duration` are those of the WAV, null for `peaks.json`. */
        Artifact: {
            /**
             * @description `audio.wav`: the PCM WAV. `peaks.json`: its waveform peaks in BBC audiowaveform's JSON format (version 2: `channels`, `sample_rate`, `samples_per_pixel`, `bits` 8, `length`, `data` as min,max per channel per pixel), which peaks.js, waveform-data and wavesurfer.js read as they are; absent for content stored before peaks were kept.
             * @example audio.wav
             */
            name: string;
            /**
             * @description The name to save the file under: the source's title (`media.title`) with the artifact's suffix (`My Song.wav`, `My Song.peaks.json`), made safe for every common file system (docs/delivery.md); the artifact's `name` when there is no title. `signed_url` answers with a `Content-Disposition` naming it; a keyed request gets it with `?filename=` and the name.
             * @example My Song.wav
             */
            download_name: string;
            /** @description Path of getArtifact; needs the API key. */
            path: string;
            /** @description Path with an expiring signature, usable without a key (e.g. <audio src>); it carries `download_name` as `filename` (covered by the signature) when that is not the artifact's `name`. */
            signed_url: string;
            signed_url_expires_at: string;
            bytes: number;
            content_type: string;
            sample_rate: number | null;
            channels: number | null;
            /** @description Seconds. */
            duration: number | null;
        };
        /** @description The WAV's loudness per EBU R128 (ITU-R BS.1770), measured from its bytes as the store hashes them. Null when unknown: content stored before loudness was measured, or with LOUDNESS=off, or silent (no true peak). */
        Loudness: {
            /**
             * @description Integrated loudness, LUFS.
             * @example -23
             */
            integrated_lufs: number;
            /**
             * @description Loudness range, LU.
             * @example 4.2
             */
            range_lu: number;
            /**
             * @description True peak of the loudest channel, dBTP.
             * @example -1.5
             */
            true_peak_dbtp: number;
        };
        /** @description Set on a done job whose content the store no longer holds: evicted (least recently used first, to keep the store within its bounds) or found gone at start-up. `artifacts` is then empty. Null while the content is stored (again). */
        Evicted: {
            /** @description When the store removed the content. */
            at: string;
            /** @description What happened, and that submitting the URL again fetches it again. */
            message: string;
        };
        /** @description Why a failed job failed; null for any other status. */
        JobError: {
            code: components["schemas"]["JobErrorCode"];
            /** @description The code's sentence, for people: plain words, one sentence, its values (a limit, a status, a host) filled in. */
            message: string;
            /** @description The specifics, in the words of the part that met the failure (the downloader's or converter's own text, trimmed, without secrets or server paths; the egress guard's reason), or null. */
            detail: string | null;
            /** @description The origin's HTTP status for the `http_*` codes (404 for `http_not_found`...); else null. */
            http_status: number | null;
        } | null;
        /**
         * @description Why a job failed: a stable code from one closed list, whose meanings and sentences are in docs/api.md's job error codes. A client may match on it; new codes can be added.
         * @enum {string}
         */
        JobErrorCode: "host_not_found" | "host_lookup_failed" | "connection_refused" | "connect_timeout" | "no_answer" | "network_error" | "destination_refused" | "http_not_found" | "http_access_denied" | "http_gone" | "http_rate_limited" | "http_server_error" | "http_error" | "not_media" | "unsupported_url" | "unsupported_protocol" | "playlist_not_supported" | "collection_nested" | "not_a_collection" | "live_stream" | "metadata_invalid" | "not_audio" | "media_corrupt" | "download_failed" | "conversion_failed" | "file_too_large" | "output_too_large" | "duration_exceeded" | "listing_too_large" | "listing_timeout" | "metadata_timeout" | "download_stalled" | "fetch_timeout" | "memory_exceeded" | "cpu_time_exceeded" | "process_limit_exceeded" | "key_storage_quota_exceeded" | "attempts_exhausted" | "storage_full" | "downloader_missing" | "converter_missing" | "confinement_unavailable" | "direct_connection_refused" | "internal_error";
        /** @description The callback of a job submitted with a callback_url (the job record's `callback` is null otherwise). */
        Callback: {
            url: string;
            /** @description Sent as Webhook-Id on every attempt of this delivery: the receiver de-duplicates on it. */
            delivery_id: string;
            /**
             * @description pending: waiting for the job to end or for the next attempt; delivered: the receiver answered 2xx; failed: no attempt succeeded within WEBHOOK_RETRY_FOR_S of the job's end.
             * @enum {string}
             */
            status: "pending" | "delivered" | "failed";
            /** @description Attempts made so far. */
            attempt_count: number;
            /** @description While pending after the job ended: the earliest time of the next attempt. */
            next_attempt_at: string | null;
            /** @description The latest 10 attempts, oldest first. */
            attempts: components["schemas"]["CallbackAttempt"][];
        };
        CallbackAttempt: {
            /** @description When the attempt started. */
            at: string;
            /** @description The receiver's HTTP status; only 2xx delivers (a redirect is not followed). */
            status: number | null;
            /** @description Why there was no answer: timeout, connect_failed, tls_failed, no_response, or a refusal of the address policy at connect time (host_localhost, host_unresolvable, address_<range>). */
            error: string | null;
        };
        /** @description A collection's listing and children (`kind` `collection`); null for a source's job. The job is `done` once its listing has ended and every child has ended, however each ended. */
        Collection: {
            /** @description The collection's own title, once listed. */
            title: string | null;
            /** @description At most this many entries are listed. */
            max_items: number;
            /** @description Entries listed so far: one item each. */
            entries_found: number;
            /** @description Child jobs made (entries of the same URL share one; born-done ones count). */
            children: number;
            /** @description Children done. */
            done: number;
            /** @description Children failed. */
            failed: number;
            /** @description Children canceled. */
            canceled: number;
            /** @description Entries refused as items (their problem is in listJobItems). */
            refused: number;
            /** @description The listing stopped at `max_items` while more entries may exist. */
            truncated: boolean;
            listing_error: components["schemas"]["JobError"] & unknown;
        };
        SubmitSource: {
            /**
             * @description http or https URL of the media to fetch (at most 2048 characters; a longer one is refused with url_too_long).
             * @example https://media.example.org/talk.m4a
             */
            url: string;
            playlist?: components["schemas"]["PlaylistOption"];
            /**
             * @description http or https URL that gets the job record in a signed POST when the job ends (done, failed or canceled); see docs/webhooks.md. Its destination must pass the same address policy as a source URL.
             * @example https://hooks.example.org/source-fetch
             */
            callback_url?: string;
        };
        /** @description Opt in to a collection: the URL is a playlist, album, channel page or feed, and the job is a parent (`kind` `collection`) that lists it and submits each entry as a child job of its own. Without it a playlist's job fails `playlist_not_supported`. */
        PlaylistOption: {
            /**
             * @description List at most this many entries (PLAYLIST_MAX_ITEMS, if lower, wins).
             * @example 50
             */
            max_items?: number;
            /** @description Each child job also gets a callback of its own when it ends, to the submission's `callback_url` (required with it: else 400 `callback_url_required`), signed as any callback; a child shared by several entries gets one. Without it only the collection's own end is called back. */
            item_callbacks?: boolean;
        };
        BatchResult: {
            /** @description How many URLs got a job. */
            accepted: number;
            /** @description How many did not. */
            refused: number;
            /** @description One item per URL, in the order given. */
            results: components["schemas"]["BatchItem"][];
        };
        BatchItem: {
            /** @enum {string} */
            outcome: "accepted";
            /** @description The URL as given. */
            url: string;
            job: components["schemas"]["Job"];
        } | {
            /** @enum {string} */
            outcome: "refused";
            /** @description The URL as given. */
            url: string;
            problem: components["schemas"]["Problem"] & unknown;
        };
        SubmitSourceBatch: {
            /**
             * @description 1 to 100 URLs (a string, or an object with `url` and `playlist`), each treated as one submitSource; a URL given twice gets one download.
             * @example [
             *       "https://media.example.org/a.m4a",
             *       "https://media.example.org/b.m4a"
             *     ]
             */
            urls: (string | components["schemas"]["BatchSource"])[];
            /**
             * @description http or https URL that gets the job record in a signed POST when the job ends (done, failed or canceled); see docs/webhooks.md. Its destination must pass the same address policy as a source URL.
             * @example https://hooks.example.org/source-fetch
             */
            callback_url?: string;
        };
        /** @description A URL with its options: `playlist` makes it a collection. */
        BatchSource: {
            /**
             * @description http or https URL of the media to fetch (at most 2048 characters; a longer one is refused with url_too_long).
             * @example https://media.example.org/talk.m4a
             */
            url: string;
            playlist?: components["schemas"]["PlaylistOption"];
        };
        CollectionItems: {
            /** @description Items in playlist order. */
            items: components["schemas"]["CollectionItem"][];
            /** @description Pass as `after` for the next page; null when this page is the last listed so far. */
            next_after: number | null;
        };
        /** @description One entry of a collection, in the batch's per-URL shape: accepted with its child job (entries of the same URL share one), or refused with its problem. */
        CollectionItem: {
            /** @description The entry's place in the collection, from 1. */
            index: number;
            /** @description The entry's title as listed, or null. */
            title: string | null;
            /** @description The entry's URL as listed. */
            url: string;
            /** @enum {string} */
            outcome: "accepted";
            job: components["schemas"]["Job"];
        } | {
            /** @description The entry's place in the collection, from 1. */
            index: number;
            /** @description The entry's title as listed, or null. */
            title: string | null;
            /** @description The entry's URL as listed. */
            url: string;
            /** @enum {string} */
            outcome: "refused";
            problem: components["schemas"]["Problem"] & unknown;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    getHealth: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The service can fetch. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Health"];
                };
            };
            /** @description The service cannot fetch now. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Health"];
                };
            };
        };
    };
    getArtifact: {
        parameters: {
            query?: {
                /** @description Expiry of a signed URL (Unix seconds). */
                expires?: string;
                /** @description Signature of a signed URL. */
                sig?: string;
                /** @description The name the answer's `Content-Disposition` gives the file (an artifact's `download_name`). In a signed URL it is covered by the signature; with the API key any name may be asked for, and it is made safe (characters Windows refuses become `_`, control and direction characters go, the artifact's extension is added when missing, at most 200 bytes). Without it the file is named as the artifact (`audio.wav`). */
                filename?: string;
            };
            header?: never;
            path: {
                /** @description Content id: lowercase hex SHA-256 of the file. */
                cid: string;
                name: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The file: `audio.wav` as audio/wav, `peaks.json` (its waveform peaks) as application/json. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "audio/wav": string;
                    "application/json": Record<string, never>;
                };
            };
            /** @description A byte range of the file. */
            206: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description Not modified. */
            304: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description Malformed content id or name. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No key and no signature. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Signature invalid or expired. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No such artifact. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Range not satisfiable. */
            416: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    getMetrics: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Every series, prefixed source_fetch_. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/plain": string;
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests; see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    getStoreScrub: {
        parameters: {
            query?: {
                /** @description Seconds to wait for the pass to end before answering 202 with the report so far (0 to 50). */
                wait_s?: number | null;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The last pass has ended: its report. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ScrubReport"];
                };
            };
            /** @description A pass runs on (waited for up to `wait_s`): its report so far. */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ScrubReport"];
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No scrub pass has run on this node since it started (`scrub_not_found`). */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests; see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    scrubStore: {
        parameters: {
            query?: {
                /** @description Seconds to wait for the pass to end before answering 202 with the report so far (0 to 50). */
                wait_s?: number | null;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The pass has ended (done, failed or stopped): its report. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ScrubReport"];
                };
            };
            /** @description The pass runs on: its report so far. */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ScrubReport"];
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Another node is scrubbing the store (`scrub_running_elsewhere`, with its `node_id`). */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests; see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    getWebhookSecret: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description This key's signing secrets. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["WebhookSecrets"];
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests; see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    submitSource: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SubmitSource"];
            };
        };
        responses: {
            /** @description Accepted: the job record. Poll Location. A URL already stored gives a job that is born done. */
            202: {
                headers: {
                    /** @description /jobs/{id} */
                    Location?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Job"];
                };
            };
            /** @description Malformed body, URL or callback_url. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Body larger than 8 KiB. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Body is not JSON. */
            415: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description The URL's or the callback_url's destination is refused by the address policy. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests; see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    submitSourceBatch: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SubmitSourceBatch"];
            };
        };
        responses: {
            /** @description The batch was taken: which URLs got a job and which were refused, and why. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["BatchResult"];
                };
            };
            /** @description Malformed body (not 1 to 100 strings, unknown members) or callback_url. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Body larger than 256 KiB. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Body is not JSON. */
            415: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description The callback_url's destination is refused by the address policy. */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests; see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    getJob: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The job. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Job"];
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No such job. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests; see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    cancelJob: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The canceled job (also when it was canceled before). */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Job"];
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No such job. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description The job is already done or failed. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests; see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    listJobItems: {
        parameters: {
            query?: {
                /** @description Items after this index (a page's `next_after`). */
                after?: number | null;
                /** @description Items per page, 1 to 100. */
                limit?: number;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description A page of items. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["CollectionItems"];
                };
            };
            /** @description `after` or `limit` is not a number in range. */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No such job (job_not_found), or it is not a collection (job_not_collection). */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests; see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    getJobEvents: {
        parameters: {
            query?: never;
            header?: {
                /** @description The `id` of the last event received, to resume from. */
                "last-event-id"?: string;
            };
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The event stream. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": string;
                };
            };
            /** @description The client has the final state already (its Last-Event-ID is the last event): nothing more will come. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No such job. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests (`rate_limited`), or too many event streams open for this key or on this node (`too_many_event_streams`, with `limit`: `per_key` or `per_node`); see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    getEvents: {
        parameters: {
            query: {
                /** @description The job ids, separated by commas (`,` or `%2C`): 1 to 200, each named once or more (carried once). */
                jobs: string;
            };
            header?: {
                /** @description The `id` of the last event received, to resume from. */
                "last-event-id"?: string;
            };
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The event stream. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": string;
                };
            };
            /** @description Nothing to send: every job named has ended, and the only state left is the one Last-Event-ID names. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description `validation_failed` (no `jobs`, an empty or over-long id), or `too_many_jobs` (more than 200 ids: `max_jobs` says how many a stream takes; open another stream for the rest). */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description No valid API key. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description `job_not_found`: some of the ids name no job; `job_ids` lists them. Nothing is streamed: name only jobs that exist. */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Too many requests (`rate_limited`), or too many event streams open for this key or on this node (`too_many_event_streams`, with `limit`: `per_key` or `per_node`); see Retry-After. */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description Internal error. */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
}
