#!/usr/bin/env bash
# A throwaway PostgreSQL server for the sweep tests, on 127.0.0.1 only.
#
#   eval "$(bash .ci/postgres.sh)"     # start (idempotent); exports MUTRANSFER_TEST_POSTGRES_URL
#   bash .ci/postgres.sh stop          # stop it and delete its data directory
#
# Installs the Debian `postgresql` package when no server binaries are found (needs root
# or sudo). The cluster lives in $MUTRANSFER_PG_DIR (default /tmp/mutransfer-pg), listens
# on 127.0.0.1 only (port 5432, or a free one if taken), trusts local connections and holds
# one database, mutransfer_test. Logs go to stderr; stdout is only the export line.
set -euo pipefail

PGDIR="${MUTRANSFER_PG_DIR:-/tmp/mutransfer-pg}"
DB=mutransfer_test
log() { echo "postgres.sh: $*" >&2; }

find_bin() {
    local d
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/pg_ctl" ]; then
        pg_config --bindir; return 0
    fi
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$d" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
    if command -v pg_ctl >/dev/null 2>&1; then dirname "$(command -v pg_ctl)"; return 0; fi
    return 1
}

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

if ! PGBIN=$(find_bin); then
    log "PostgreSQL not found; installing the Debian package"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    PGBIN=$(find_bin) || { log "no pg_ctl after installing postgresql"; exit 1; }
fi

# initdb and the server refuse to run as root: run them as `postgres` when we are root.
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir "$PGDIR" --shell /bin/sh postgres
    as_pg() { runuser -u postgres -- "$@"; }
else
    as_pg() { "$@"; }
fi

if [ "${1:-start}" = "stop" ]; then
    if [ -f "$PGDIR/data/PG_VERSION" ]; then
        as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -m fast -w stop >&2 || true
    fi
    rm -rf "$PGDIR"
    log "stopped"
    exit 0
fi

mkdir -p "$PGDIR"
[ "$(id -u)" -eq 0 ] && chown postgres "$PGDIR"

if [ -f "$PGDIR/port" ] && as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" status >/dev/null 2>&1; then
    PORT=$(cat "$PGDIR/port")
    log "already running on 127.0.0.1:$PORT"
else
    PORT=5432
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    fi
    if [ ! -f "$PGDIR/data/PG_VERSION" ]; then
        as_pg "$PGBIN/initdb" -D "$PGDIR/data" -U postgres -A trust -E UTF8 --no-sync >/dev/null
    fi
    as_pg "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $PGDIR -c fsync=off -c max_connections=200" start >&2
    echo "$PORT" > "$PGDIR/port"
    log "started on 127.0.0.1:$PORT (data $PGDIR/data)"
fi

if ! as_pg "$PGBIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1; then
    as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
fi

echo "export MUTRANSFER_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:$PORT/$DB"
