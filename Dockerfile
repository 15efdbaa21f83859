# The app image for compose.yaml. Debian bookworm, like the machines the tests run on: the same
# ffmpeg and yt-dlp packages (see the README for a newer yt-dlp). Node 22 LTS: Node 20 reached its
# end of life in April 2026 (the suite runs under both).
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
RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg yt-dlp ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data /artifacts \
 && chown node:node /data /artifacts
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY drizzle ./drizzle
# Run inside the tools' network namespaces (src/sandbox): confine.py for each tool started on its
# own, resident.py for the resident sandbox that imports yt-dlp once. Python 3 comes with yt-dlp.
COPY src/sandbox/confine.py src/sandbox/resident.py ./src/sandbox/
USER node
ENV NODE_ENV=production HOST=0.0.0.0 DATA_DIR=/data ARTIFACT_ROOT=/artifacts
EXPOSE 8080
CMD ["node", "dist/main.js"]
