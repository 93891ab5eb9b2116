# syntax=docker/dockerfile:1
# timeout-center image: one image for every role; the verb is the command
# (migrate | coordinator | worker | run | generate | demo | status ...).
#   docker build -t timeout-center:1.0.0 .
#   docker run --rm -e DATABASE_URL=... -e REDIS_URL=... -v ./config.yaml:/etc/timeout-center/config.yaml:ro \
#     -e TIMEOUT_CENTER_CONFIG=/etc/timeout-center/config.yaml timeout-center:1.0.0 worker --port 9464

# It runs what the npm package holds (package.json "files"): dist/ built from a clean slate as
# `npm pack` builds it (prepack), sql/, LICENSE, README.md and CHANGELOG.md, plus the example
# config; the docs pages stay in the npm package.

# --- build: compile TypeScript with the dev dependencies -------------------------------------
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
COPY sql ./sql
RUN npm run build

# --- runtime: production dependencies and the compiled code only, as the unprivileged user ----
FROM node:24-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
# Migrations are read from /app/sql at run time (dist/db/migrate.js looks two levels up).
COPY sql ./sql
COPY config.example.yaml ./config.example.yaml
COPY LICENSE README.md CHANGELOG.md ./
# The demo's embedded database folder must be writable by the unprivileged user.
RUN mkdir -p /app/.demo-data && chown node:node /app/.demo-data
# node (uid 1000) comes with the official image; Kubernetes' runAsNonRoot checks the numeric id.
USER 1000:1000
EXPOSE 9464
ENTRYPOINT ["node", "dist/cli/main.js"]
CMD ["--help"]
