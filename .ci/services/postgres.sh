# A real PostgreSQL for the store tests (PgStore, the many-writers and
# fault tests): Debian's postgresql-15, a throwaway cluster in a temporary
# directory owned by an unprivileged user (PostgreSQL refuses to run as
# root), listening on a free port on 127.0.0.1 only.
#
# Exports LIONAGI_PG_URL (the tests' database; each test makes its own
# schema or database in it), LIONAGI_PG_BIN (for the restart test) and
# LIONAGI_PG_REQUIRED=1, so a missing server fails the tests.

pg_bin=/usr/lib/postgresql/15/bin
if [ ! -x "$pg_bin/initdb" ]; then
    apt-get install -y postgresql-15 >/dev/null
fi
pg_user=lionagi-pg
if ! id "$pg_user" >/dev/null 2>&1; then
    useradd -r -M -s /usr/sbin/nologin "$pg_user"
fi
pg_dir="$(mktemp -d "${TMPDIR:-/tmp}/lionagi-pg.XXXXXX")"
chown "$pg_user" "$pg_dir"
pg_port="$(free_port)"
pg_as() { runuser -u "$pg_user" -- "$@"; }

pg_as "$pg_bin/initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
# Sockets in the cluster's own directory: the system one belongs to the
# distribution's cluster and may not exist.
pg_as "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $pg_dir -c max_connections=200 -c fsync=off" start
stop_postgres() {
    runuser -u lionagi-pg -- "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast -w stop || true
    rm -rf "$pg_dir"
}
on_exit stop_postgres
pg_as "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres lionagi_test

export LIONAGI_PG_URL="postgres://postgres@127.0.0.1:$pg_port/lionagi_test"
# The restart test runs `pg_ctl restart` as the cluster's owner.
export LIONAGI_PG_CTL="runuser -u $pg_user -- $pg_bin/pg_ctl -D $pg_dir/data -l $pg_dir/log"
export LIONAGI_PG_REQUIRED=1
echo "postgresql up on 127.0.0.1:$pg_port (data $pg_dir/data, log $pg_dir/log)"
