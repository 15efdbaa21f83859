#!/bin/sh
# As the official nginx image does at start-up (and with its variables for the folders): each
# template in $NGINX_ENVSUBST_TEMPLATE_DIR is rendered into $NGINX_ENVSUBST_OUTPUT_DIR with
# envsubst, filling only the variables set in the environment (others, like nginx's own `${...}`
# in regexes, stay as they are); then the command runs (nginx in the foreground).
# test/unit/compose.test.ts runs this very script against the tests' rendering.
set -eu
template_dir=${NGINX_ENVSUBST_TEMPLATE_DIR:-/etc/nginx/templates}
output_dir=${NGINX_ENVSUBST_OUTPUT_DIR:-/etc/nginx/conf.d}
defined=$(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/${\1}/p' | tr '\n' ' ')
for template in "$template_dir"/*.template; do
  [ -e "$template" ] || continue
  envsubst "$defined" < "$template" > "$output_dir/$(basename "$template" .template)"
done
exec "$@"
