#!/usr/bin/env bash
# Fetches yt-dlp from Debian's archive (the newest version it offers, or a pinned one) and unpacks
# it into a folder of its own, ready to be YTDLP_PATH. Debian's yt-dlp package is
# architecture-independent Python and runs on bookworm's python3 (3.11); its dependencies
# are optional for direct media links and HLS (yt-dlp reports the ones it lacks or finds too old
# with -v and does without them).
#
#   scripts/fetch-current-ytdlp.sh                  # the newest, into .cache/yt-dlp/<version>/
#   scripts/fetch-current-ytdlp.sh --version 2026.10.26-1 --sha256 <hex> --into /opt/yt-dlp
#   scripts/fetch-current-ytdlp.sh --version 2026.10.26-1 --sha256 <hex> --or-newest --into /opt/yt-dlp
#
# The folder holds the package's own launcher script, `yt-dlp` (`from yt_dlp import main`), beside
# its `yt_dlp` module: run as a script, Python puts the script's folder first on sys.path, and the
# resident sandbox imports yt_dlp from the launcher's folder too (src/sandbox/resident.py), so the
# launcher needs nothing installed system-wide. The module is byte-compiled here, once: a folder
# the service cannot write would otherwise be compiled again by every process that imports it.
#
# With the default destination and the newest version, .cache/yt-dlp/current is then switched
# (atomically) to the new version's folder; a folder in use is never changed, so a running service
# keeps the version it started with (docs/yt-dlp.md: updating without downtime).
#
# Nothing of the system's apt configuration is read or changed: apt runs with a sources list and a
# state folder of this script's own, removed at exit, and trusts only Debian's archive keyring.
# apt checks the package against the signed index; --sha256 pins its bytes as well. The folder
# keeps the package's SHA-256 (debian-package.sha256), so that a second run checks a pin against
# what is there without downloading it again.
#
# Prints the launcher's absolute path on stdout, and what was fetched on stderr.
#
# Debian's unstable keeps only its current upload of a package: a pinned version leaves the archive
# with the next one. With --or-newest (the image's build, Dockerfile; .ci/run), a pin no longer
# offered is replaced by the newest version offered, unpinned, with a line on stderr that says so
# and gives that package's SHA-256 (test/unit/fetch-current-ytdlp.test.ts runs this against an
# archive of its own). A pinned version still offered whose package is not the pinned one is
# refused all the same.
#
# Options:
#   --version newest|VERSION   the Debian version to fetch (default: newest)
#   --sha256 HEX               the .deb's SHA-256 (refused if it differs)
#   --or-newest                a --version no longer offered: take the newest instead
#   --into DIR                 where to unpack (default: .cache/yt-dlp/<version>, then the link)
# Environment:
#   DEBIAN_MIRROR              default http://deb.debian.org/debian (file:/... for a local archive)
#   YTDLP_SUITES               the suites looked in, default "unstable experimental"
#   DEBIAN_ARCHIVE_KEYRING     the keyring the archive is checked with, default Debian's
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
want=newest
sha256=
into=
or_newest=false
while [ $# -gt 0 ]; do
  case "$1" in
    --version) want=${2:?--version needs a value}; shift 2 ;;
    --sha256) sha256=${2:?--sha256 needs a value}; shift 2 ;;
    --into) into=${2:?--into needs a value}; shift 2 ;;
    --or-newest) or_newest=true; shift ;;
    *) echo "fetch-current-ytdlp: unknown argument $1" >&2; exit 2 ;;
  esac
done
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suites=${YTDLP_SUITES:-unstable experimental}
keyring=${DEBIAN_ARCHIVE_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
[ -r "$keyring" ] || { echo "fetch-current-ytdlp: $keyring is missing (package debian-archive-keyring)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Readable by apt's _apt user, which downloads the indexes and the package when run as root.
chmod 755 "$work"
mkdir -p "$work/state/lists/partial" "$work/cache/archives/partial" "$work/parts" "$work/download"
: > "$work/status"
for suite in $suites; do
  echo "deb [signed-by=$keyring] $mirror $suite main"
done > "$work/sources.list"
apt_opts=(
  -o "Dir::State=$work/state" -o "Dir::State::status=$work/status" -o "Dir::Cache=$work/cache"
  -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/parts"
  -o "Dir::Etc::Preferences=$work/none" -o "Dir::Etc::PreferencesParts=$work/parts"
  -o Acquire::Languages=none -o Debug::NoLocking=1
)
# As root, apt downloads as its _apt user: let that user write where the files land.
if [ "$(id -u)" = 0 ] && id _apt >/dev/null 2>&1; then chown -R _apt "$work/download"; fi
apt-get "${apt_opts[@]}" -qq update >&2

# Every version the suites offer (`yt-dlp | VERSION | SOURCE`), the highest by Debian's ordering.
mapfile -t offered < <(apt-cache "${apt_opts[@]}" madison yt-dlp | awk -F' [|] ' '{ print $2 }')
[ ${#offered[@]} -gt 0 ] || { echo "fetch-current-ytdlp: no yt-dlp in $mirror ($suites)" >&2; exit 1; }
newest=${offered[0]}
for v in "${offered[@]}"; do
  if dpkg --compare-versions "$v" gt "$newest"; then newest=$v; fi
done
if [ "$want" = newest ]; then
  version=$newest
else
  version=$want
  if ! printf '%s\n' "${offered[@]}" | grep -qxF -- "$version"; then
    if [ "$or_newest" != true ]; then
      echo "fetch-current-ytdlp: yt-dlp $version is not in $mirror ($suites), which offers $newest: move the pin (docs/yt-dlp.md)" >&2
      exit 1
    fi
    echo "fetch-current-ytdlp: yt-dlp $version, the pin, is no longer in $mirror ($suites): taking the newest it offers, $newest, unpinned (move the pin: docs/yt-dlp.md)" >&2
    version=$newest
    sha256=
  fi
fi
# The upstream version: no epoch, no Debian revision (2026.10.26-1 → 2026.10.26).
upstream=${version#*:}
upstream=${upstream%-*}

into=${into:-$root/.cache/yt-dlp/$version}
into=$(realpath -m "$into")
launcher=$into/yt-dlp
# Already there (a second run): the same folder, left as it is.
if [ -x "$launcher" ] && [ -f "$into/debian-package.sha256" ] && [ "$("$launcher" --version 2>/dev/null)" = "$upstream" ]; then
  had=$(cut -d' ' -f1 "$into/debian-package.sha256")
  if [ -n "$sha256" ] && [ "$had" != "$sha256" ]; then
    echo "fetch-current-ytdlp: yt-dlp $version in $into came from a package whose SHA-256 is $had, not the pinned $sha256" >&2
    exit 1
  fi
  echo "yt-dlp $upstream (Debian $version, $had) already in $into" >&2
else
  (cd "$work/download" && apt-get "${apt_opts[@]}" -qq download "yt-dlp=$version" >&2)
  deb=$(echo "$work"/download/yt-dlp_*.deb)
  if [ -n "$sha256" ] && ! echo "$sha256  $deb" | sha256sum -c --quiet - >/dev/null 2>&1; then
    echo "fetch-current-ytdlp: yt-dlp $version's package is not the pinned one (SHA-256 $(sha256sum "$deb" | cut -d' ' -f1), pinned $sha256)" >&2
    exit 1
  fi
  dpkg-deb -x "$deb" "$work/root"
  staged=$into.partial
  rm -rf "$staged"
  mkdir -p "$staged"
  cp -a "$work/root/usr/lib/python3/dist-packages/." "$staged/"
  install -m 755 "$work/root/usr/bin/yt-dlp" "$staged/yt-dlp"
  install -m 644 "$work/root/usr/share/doc/yt-dlp/copyright" "$staged/copyright"
  (cd "$work/download" && sha256sum "$(basename "$deb")") > "$staged/debian-package.sha256"
  # The package's own launcher, moved beside its module: nothing else on sys.path is needed.
  grep -qxE 'from yt_dlp import main' "$staged/yt-dlp" || { echo "fetch-current-ytdlp: the package's /usr/bin/yt-dlp is not the launcher script it used to be" >&2; exit 1; }
  rm -rf "$into"
  mv -T "$staged" "$into"
  # By the launcher's own interpreter (#! /usr/bin/python3), for whose version the bytecode is.
  interpreter=$(sed -n '1s/^#! *\([^ ]*\).*/\1/p' "$launcher")
  "$interpreter" -m compileall -q -j 0 "$into" >/dev/null
  printed=$("$launcher" --version)
  if [ "$printed" != "$upstream" ]; then
    echo "fetch-current-ytdlp: $launcher --version printed '$printed', not $upstream" >&2
    exit 1
  fi
  echo "yt-dlp $upstream (Debian $version, $(sha256sum "$deb" | cut -d' ' -f1)) unpacked into $into" >&2
fi
if [ "$want" = newest ] && [ "$into" = "$root/.cache/yt-dlp/$version" ]; then
  ln -sfn "$version" "$root/.cache/yt-dlp/current.new"
  mv -T "$root/.cache/yt-dlp/current.new" "$root/.cache/yt-dlp/current"
fi
echo "$launcher"
