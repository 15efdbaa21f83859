# The app image for compose.yaml. Debian bookworm, like the machines the tests run on: the same
# ffmpeg, and a current yt-dlp beside Debian's (README: A current yt-dlp). Node 22 LTS: Node 20
# reached its end of life in April 2026 (the suite runs under both).
FROM node:22-bookworm-slim AS build
WORKDIR /app
# better-sqlite3 builds from source when no prebuilt binary can be fetched.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json .npmrc ./
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# `prepare` compiles src/ to dist/; dev dependencies go afterwards.
RUN npm ci && npm prune --omit=dev

FROM node:22-bookworm-slim
# Debian's yt-dlp stays as the fallback (YTDLP_PATH=yt-dlp) and brings the Python libraries a
# current one uses too (brotli, certifi, mutagen, pycryptodomex, websockets), kept up to date by
# Debian; python3-venv for the current one below.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg yt-dlp python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data /artifacts /nginx-usage \
 && chown node:node /data /artifacts /nginx-usage
# The yt-dlp the service runs: a release from PyPI, pinned by version and by the SHA-256 of its
# wheel (pip refuses any other file), into a venv that also sees Debian's libraries. It has no
# required dependencies (--no-deps keeps pip from fetching any). To update, set both arguments
# from the release's page on PyPI (pypi.org/project/yt-dlp/<version>/#files, the .whl's SHA256);
# /healthz warns 90 days after the pinned release.
ARG YTDLP_VERSION=2026.8.19
ARG YTDLP_WHEEL_SHA256=1d57897e94c6665a0a6f9bc54b34e584284e32c034ffab3a7df25d8f7b24eedf
RUN python3 -m venv --system-site-packages /opt/yt-dlp \
 && printf 'yt-dlp==%s --hash=sha256:%s\n' "$YTDLP_VERSION" "$YTDLP_WHEEL_SHA256" > /tmp/yt-dlp-requirements.txt \
 && /opt/yt-dlp/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes -r /tmp/yt-dlp-requirements.txt \
 && rm /tmp/yt-dlp-requirements.txt \
 && /opt/yt-dlp/bin/python -c 'import sys, importlib.metadata as m; sys.exit(m.version("yt-dlp") != sys.argv[1])' "$YTDLP_VERSION" \
 && /opt/yt-dlp/bin/yt-dlp --version
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY drizzle ./drizzle
# Run inside the tools' network namespaces (src/sandbox): confine.py for each tool started on its
# own, resident.py for the resident sandbox that imports yt-dlp once. Python 3 comes with yt-dlp.
COPY src/sandbox/confine.py src/sandbox/resident.py ./src/sandbox/
USER node
ENV NODE_ENV=production HOST=0.0.0.0 DATA_DIR=/data ARTIFACT_ROOT=/artifacts YTDLP_PATH=/opt/yt-dlp/bin/yt-dlp
EXPOSE 8080
CMD ["node", "dist/main.js"]
