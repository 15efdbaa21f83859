#!/usr/bin/env bash
# Fetches Docker Compose v2 from Debian's archive (the docker-compose package of Debian stable: the
# Compose CLI plugin, one Go binary that runs on bookworm too) and unpacks it into
# .cache/docker-compose/, so that CI can run `docker compose config` on compose.yaml where no Docker
# engine runs (test/unit/compose-config.test.ts): `config` loads, interpolates and validates the file
# with the same code as `docker compose up`, and needs no engine. Bookworm's own docker-compose is
# the retired Python Compose v1, which loads files its own way.
#
# As scripts/fetch-current-ytdlp.sh does, apt runs with a sources list and state of this script's
# own, removed at exit, trusting only Debian's archive keyring; nothing of the system's apt is
# read or changed. A second run with the same version in place downloads nothing.
#
# Prints the binary's path on stdout, and what was fetched on stderr.
#
#   scripts/fetch-docker-compose.sh               # into .cache/docker-compose/
#   scripts/fetch-docker-compose.sh --into DIR
# Environment:
#   DEBIAN_MIRROR     default http://deb.debian.org/debian
#   COMPOSE_SUITE     the suite taken from, default stable
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
into=$root/.cache/docker-compose
while [ $# -gt 0 ]; do
  case "$1" in
    --into) into=$(realpath -m "${2:?--into needs a value}"); shift 2 ;;
    *) echo "fetch-docker-compose: unknown argument $1" >&2; exit 2 ;;
  esac
done
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=${COMPOSE_SUITE:-stable}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || { echo "fetch-docker-compose: $keyring is missing (package debian-archive-keyring)" >&2; exit 1; }
binary=$into/docker-compose

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -p "$work/state/lists/partial" "$work/cache/archives/partial" "$work/parts" "$work/download"
: > "$work/status"
echo "deb [signed-by=$keyring] $mirror $suite main" > "$work/sources.list"
apt_opts=(
  -o "Dir::State=$work/state" -o "Dir::State::status=$work/status" -o "Dir::Cache=$work/cache"
  -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/parts"
  -o "Dir::Etc::Preferences=$work/none" -o "Dir::Etc::PreferencesParts=$work/parts"
  -o Acquire::Languages=none -o Debug::NoLocking=1
)
if [ "$(id -u)" = 0 ] && id _apt >/dev/null 2>&1; then chown -R _apt "$work/download"; fi
apt-get "${apt_opts[@]}" -qq update >&2
version=$(apt-cache "${apt_opts[@]}" madison docker-compose | awk -F'|' 'NR == 1 { gsub(/ /, "", $2); print $2 }')
[ -n "$version" ] || { echo "fetch-docker-compose: no docker-compose in $mirror ($suite)" >&2; exit 1; }

if [ -x "$binary" ] && [ "$(cat "$into/debian-version" 2>/dev/null)" = "$version" ]; then
  echo "docker-compose $version already in $into" >&2
else
  (cd "$work/download" && apt-get "${apt_opts[@]}" -qq download "docker-compose=$version" >&2)
  dpkg-deb -x "$work"/download/docker-compose_*.deb "$work/root"
  staged=$into.partial
  rm -rf "$staged"
  mkdir -p "$staged"
  install -m 755 "$work/root/usr/libexec/docker/cli-plugins/docker-compose" "$staged/docker-compose"
  install -m 644 "$work/root/usr/share/doc/docker-compose/copyright" "$staged/copyright"
  echo "$version" > "$staged/debian-version"
  rm -rf "$into"
  mv -T "$staged" "$into"
  echo "docker-compose $version (Debian $suite) unpacked into $into: $("$binary" version)" >&2
fi
echo "$binary"
