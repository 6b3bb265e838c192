# A real PostgreSQL for the store tests (PgStore, the many-writers and
# fault tests): Debian's postgresql-15, a throwaway cluster in a temporary
# directory owned by an unprivileged user (PostgreSQL refuses to run as
# root), listening on a free port on 127.0.0.1 only, with TLS from a
# throwaway CA so every store connection of the tests goes through rustls
# and verifies the server.
#
# Exports LIONAGI_PG_URL (the tests' database, sslmode=require; each test
# makes its own schema or database in it), PGSSLROOTCERT (the CA the store
# trusts), LIONAGI_PG_OTHER_CA (a CA that did not sign the server, for the
# refusal test), LIONAGI_PG_PASSWORD_URL and LIONAGI_PG_PASSWORD (a role
# that must give a password, for the password-source tests),
# LIONAGI_PG_CTL (pg_ctl for the restart test) and LIONAGI_PG_REQUIRED=1,
# so a missing server fails the tests.

pg_bin=/usr/lib/postgresql/15/bin
if [ ! -x "$pg_bin/initdb" ]; then
    apt-get install -y postgresql-15 >/dev/null
fi
if ! command -v openssl >/dev/null; then
    apt-get install -y openssl >/dev/null
fi
pg_user=lionagi-pg
if ! id "$pg_user" >/dev/null 2>&1; then
    useradd -r -M -s /usr/sbin/nologin "$pg_user"
fi
pg_dir="$(mktemp -d "${TMPDIR:-/tmp}/lionagi-pg.XXXXXX")"
chmod 755 "$pg_dir"
pg_port="$(free_port)"
pg_as() { runuser -u "$pg_user" -- "$@"; }

# The throwaway CA, the server's certificate for 127.0.0.1, and a second
# CA that signed nothing.
(
    cd "$pg_dir"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=lionagi test CA" \
        -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=unrelated CA" \
        -keyout other.key -out other.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
        -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile server.ext -out server.crt 2>/dev/null
    rm -f ca.key other.key server.csr ca.srl
)
chown "$pg_user" "$pg_dir" "$pg_dir/server.key" "$pg_dir/server.crt"
chmod 600 "$pg_dir/server.key"

pg_as "$pg_bin/initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
# One role must authenticate with a password (SCRAM); the rest is trusted.
pg_hba="$pg_dir/data/pg_hba.conf"
{ echo "host all lionagi_pw 127.0.0.1/32 scram-sha-256"; cat "$pg_hba"; } >"$pg_hba.new"
mv "$pg_hba.new" "$pg_hba"
chown "$pg_user" "$pg_hba"
# Sockets in the cluster's own directory: the system one belongs to the
# distribution's cluster and may not exist. fsync off: a test cluster.
pg_as "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $pg_dir -c max_connections=200 -c fsync=off -c ssl=on -c ssl_cert_file=$pg_dir/server.crt -c ssl_key_file=$pg_dir/server.key" \
    start >/dev/null
stop_postgres() {
    runuser -u lionagi-pg -- "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast -w stop >/dev/null || true
    rm -rf "$pg_dir"
}
on_exit stop_postgres
pg_as "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres lionagi_test
pg_password="$(openssl rand -hex 16)"
pg_as "$pg_bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -d lionagi_test \
    -c "CREATE ROLE lionagi_pw LOGIN PASSWORD '$pg_password'" >/dev/null
pg_as "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres -O lionagi_pw lionagi_pw

export LIONAGI_PG_URL="postgres://postgres@127.0.0.1:$pg_port/lionagi_test?sslmode=require"
export PGSSLROOTCERT="$pg_dir/ca.crt"
export LIONAGI_PG_PASSWORD_URL="postgres://lionagi_pw@127.0.0.1:$pg_port/lionagi_pw?sslmode=require"
export LIONAGI_PG_PASSWORD="$pg_password"
export LIONAGI_PG_OTHER_CA="$pg_dir/other.crt"
# The restart test runs `pg_ctl restart` as the cluster's owner.
export LIONAGI_PG_CTL="runuser -u $pg_user -- $pg_bin/pg_ctl -D $pg_dir/data -l $pg_dir/log"
export LIONAGI_PG_REQUIRED=1
echo "postgresql up on 127.0.0.1:$pg_port with TLS (data $pg_dir/data, log $pg_dir/log)"
