#!/bin/sh
# compose.yaml's check of a profile's required setting, run as the entrypoint of that profile's
# containers before the image's own: compose interpolates every service of the file, whatever
# profiles run, so a `${NAME:?}` there would stop `docker compose up` of any profile. The variable
# is passed with an empty default instead, and refused here, in the container that needs it, with
# the sentence for the person starting it.
#
#   require-env.sh NAME "what to set" -- the image's entrypoint and command...
set -eu
name=$1
sentence=$2
shift 2
[ "${1:-}" = -- ] && shift
eval "value=\${$name:-}"
if [ -z "$value" ]; then
  echo "$sentence" >&2
  exit 1
fi
exec "$@"
