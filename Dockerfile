# The app image for compose.yaml. Debian bookworm, like the machines the tests run on: the same
# ffmpeg, and a current yt-dlp beside Debian's (docs/yt-dlp.md). Node 22 LTS: Node 20
# reached its end of life in April 2026 (the suite runs under both).
FROM node:22-bookworm-slim AS build
WORKDIR /app
# better-sqlite3 builds from source when no prebuilt binary can be fetched.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json .npmrc ./
# Fixes to dependencies, applied by `postinstall` (patches/README.md), which also puts the CLI on
# node_modules/.bin (scripts/link-cli.sh).
COPY patches ./patches
COPY scripts/link-cli.sh ./scripts/link-cli.sh
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# `prepare` compiles src/ to dist/; dev dependencies go afterwards.
RUN npm ci && npm prune --omit=dev

FROM node:22-bookworm-slim
# Debian's yt-dlp (2023.03.04) stays as the fallback (YTDLP_PATH=/usr/bin/yt-dlp) and brings
# Python and the libraries a current one uses too (brotli, certifi, mutagen, pycryptodomex,
# websockets), kept up to date by Debian.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg yt-dlp ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data /artifacts /nginx-usage \
 && chown node:node /data /artifacts /nginx-usage
# The yt-dlp the service runs: Debian's package of a current release (from unstable; it is
# architecture-independent Python that runs on bookworm's), pinned by version and by the SHA-256
# of its .deb: the pin .ci/run tests besides the newest one. Unpacked into /opt/yt-dlp by the
# script CI fetches it with (apt with a sources list and state of its own: this image's apt
# configuration stays as it is). To update, set both arguments to the version and SHA-256 that
# .ci/run printed; `--build-arg YTDLP_DEB_VERSION=newest --build-arg YTDLP_DEB_SHA256=` takes the
# newest at build time, untested. Unstable keeps only its current upload: once the pin has left
# the archive, the build takes the newest version it offers instead (--or-newest), unpinned, and
# says so in the build log ("... the pin, is no longer in ...: taking the newest ..."), as CI does
# with the same script. docs/yt-dlp.md says more; /healthz warns 90 days after the release.
ARG YTDLP_DEB_VERSION=2026.10.26-1
ARG YTDLP_DEB_SHA256=43dc7dd74a341c6ceaf6aa810c42dfa6313c843ebf4187998251b9a4f616a645
COPY scripts/fetch-current-ytdlp.sh /tmp/fetch-current-ytdlp.sh
RUN /tmp/fetch-current-ytdlp.sh --version "$YTDLP_DEB_VERSION" ${YTDLP_DEB_SHA256:+--sha256 "$YTDLP_DEB_SHA256"} --or-newest --into /opt/yt-dlp \
 && rm /tmp/fetch-current-ytdlp.sh \
 && /opt/yt-dlp/yt-dlp --version
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY drizzle ./drizzle
# The web page at / (src/http/web-page.ts reads it beside dist/; its waveform module comes from
# node_modules/wavesurfer.js, a production dependency).
COPY web ./web
# Run inside the tools' network namespaces (src/sandbox): confine.py for each tool started on its
# own, resident.py for the resident sandbox that imports yt-dlp once. Python 3 comes with yt-dlp.
COPY src/sandbox/confine.py src/sandbox/resident.py ./src/sandbox/
# The loudness meter's WebAssembly kernels (src/audio/loudness.ts reads them from src/, as above).
COPY src/audio/wasm/loudness-kernels.wasm ./src/audio/wasm/
USER node
ENV NODE_ENV=production HOST=0.0.0.0 DATA_DIR=/data ARTIFACT_ROOT=/artifacts YTDLP_PATH=/opt/yt-dlp/yt-dlp
EXPOSE 8080
CMD ["node", "dist/main.js"]
