#!/bin/sh
# Run by npm at install (package.json `postinstall`): puts the CLI on node_modules/.bin, so that the
# documented `npx source-fetch ...` runs this checkout's built CLI (dist/cli/main.js) at once.
#
# package.json declares no `bin` on purpose: asked for a command that is the bin of the package in
# the current folder, npx (npm 10 and 11: libnpmexec) installs that package into its own cache and
# runs its `prepare` there, a full rebuild (33 s), and `npx --no-install` fails; a command found on
# node_modules/.bin runs as it is. The package is private and never installed elsewhere.
#
# The entry is a small script, not a symlink: it finds dist/ beside the node_modules it was reached
# through ($0, as PATH lookup gives it), which also holds when node_modules is itself a link to
# another checkout's.
set -eu
cd "$(dirname "$0")/.."
bin=node_modules/.bin
mkdir -p "$bin"
staged="$bin/.source-fetch.$$"
cat > "$staged" <<'EOF'
#!/bin/sh
# source-fetch's CLI in this checkout (written by scripts/link-cli.sh at npm install).
cli="$(dirname "$0")/../../dist/cli/main.js"
if [ ! -f "$cli" ]; then
  echo "source-fetch: $cli is missing: build the checkout first (npm run build)" >&2
  exit 4
fi
exec node "$cli" "$@"
EOF
chmod 755 "$staged"
mv -f "$staged" "$bin/source-fetch"
