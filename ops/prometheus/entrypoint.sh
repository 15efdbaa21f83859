#!/bin/sh
# Prometheus's entrypoint in compose.yaml's monitoring profile: writes the first key of
# SCRAPE_API_KEYS (the nodes' API_KEYS), without spaces, to the file prometheus.yml reads its
# bearer credentials from (SCRAPE_KEY_FILE), then runs the command. The key reaches no log.
set -eu
key_file=${SCRAPE_KEY_FILE:-/tmp/source-fetch-api-key}
umask 077
printf '%s' "${SCRAPE_API_KEYS%%,*}" | tr -d ' \t\n' > "$key_file"
if [ ! -s "$key_file" ]; then
  echo "SCRAPE_API_KEYS is empty: set API_KEYS for the monitoring profile" >&2
  exit 1
fi
exec "$@"
