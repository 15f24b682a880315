#!/usr/bin/env bash
# Run Cronfleet's test suite against real PostgreSQL and Redis (and MariaDB for SQL jobs).
#   ./test.sh                 everything
#   ./test.sh -m "not slow"   skip the multi-process scenarios
#   ./test.sh unit            the unit tier (tests/unit): no database, server or process needed
#   ./test.sh integration     tests/integration: the real servers, one process
#   ./test.sh system          tests/system: real beats, workers, browsers, builds
#   ./test.sh faults          tests/faults: the fault suite
#   (a tier's name first, then any pytest arguments)
#   ./test.sh --django 6.0 [pytest arguments]
#                             the same in .venv-django6.0 with that Django release (Python 3.12
#                             or newer: python3.12 on PATH, or pyenv's; PYTHON names another)
# Defaults: postgres://postgres@127.0.0.1:5432, redis://127.0.0.1:6379/15 and RabbitMQ at
# amqp://guest:guest@127.0.0.1:5672// (the priority tests run a worker on each broker); set
# DATABASE_URL / CELERY_BROKER_URL / CRONFLEET_TEST_AMQP_URL to use others (pytest creates
# its own test database). SQL jobs' tests also use MariaDB at mysql://root@127.0.0.1:3306/test
# (CRONFLEET_TEST_MARIADB_URL); they are skipped when it does not answer, except with CI=true.
set -euo pipefail
cd "$(dirname "$0")"

venv=.venv django=""
python=${PYTHON:-python3}
if [ "${1:-}" = "--django" ]; then
  django=${2:?"test.sh: --django needs a release, e.g. --django 6.0"}
  shift 2
  venv=".venv-django$django"
  if [ -z "${PYTHON:-}" ]; then  # Django 6 needs Python 3.12: on PATH, or the newest 3.12/3.13 pyenv has
    python=""
    for candidate in python3.13 python3.12 \
        $(ls -d "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.1[23]*/bin/python 2>/dev/null | sort -r); do
      if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        python=$candidate
        break
      fi
    done
    [ -n "$python" ] || { echo "test.sh: --django $django needs Python 3.12 or newer; set PYTHON" >&2; exit 1; }
  fi
fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "test.sh: Python 3.11 or newer is needed (found $("$python" --version 2>&1))" >&2; exit 1; }
  echo "test.sh: making the virtual environment $venv with $("$python" --version 2>&1)"
  "$python" -m venv "$venv"
fi
# Reinstalled when either file changed since the last install. A stamp of its own: demo.sh's
# (.requirements.sha256) records requirements.txt alone, without the test tools.
stamp=$venv/.requirements-dev.sha256
want=$( (cat requirements.txt requirements-dev.txt; echo "$django") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  if ! "$venv/bin/python" -c 'import MySQLdb' 2>/dev/null \
      && ! { command -v pkg-config >/dev/null && { pkg-config --exists libmariadb || pkg-config --exists mysqlclient; }; }; then
    echo "test.sh: mysqlclient (requirements.txt) compiles against MariaDB's client library;" \
         "install it first: apt-get install libmariadb-dev pkg-config" >&2
    exit 1
  fi
  echo "test.sh: installing requirements-dev.txt (requirements.txt and the test tools) into $venv" \
       "(first run: a minute or two)"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -r requirements-dev.txt
  if [ -n "$django" ]; then  # over requirements.txt's pin: the release under test
    echo "test.sh: installing Django $django into $venv"
    "$venv/bin/python" -m pip install --quiet "Django~=$django.0"
  fi
  echo "$want" > "$stamp"
fi

export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/cronfleet}
export CELERY_BROKER_URL=${CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}
tier=""
case "${1:-}" in
  unit|integration|system|faults) tier=$1; shift; set -- "tests/$tier" "$@" ;;
esac
# Outside CI the test database is kept between runs (pytest-django's --reuse-db); CI makes it anew.
[ "${CI:-}" = "true" ] || set -- --reuse-db "$@"
if [ "$tier" = "unit" ]; then  # the unit tier needs no server: nothing to check
  exec "$venv/bin/python" -m pytest "$@"
fi
"$venv/bin/python" - <<'PY'
import os, sys
import psycopg, redis
try:
    url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"
    psycopg.connect(url, connect_timeout=5).close()
except Exception as exc:
    sys.exit(f"test.sh: PostgreSQL is not reachable ({exc}); start it or set DATABASE_URL")
try:
    redis.Redis.from_url(os.environ["CELERY_BROKER_URL"], socket_connect_timeout=5).ping()
except Exception as exc:
    sys.exit(f"test.sh: Redis is not reachable ({exc}); start it or set CELERY_BROKER_URL")
from kombu import Connection
amqp = os.environ.get("CRONFLEET_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
try:
    with Connection(amqp, connect_timeout=5) as conn:
        conn.ensure_connection(max_retries=1)
except Exception as exc:
    sys.exit(f"test.sh: RabbitMQ is not reachable at {amqp} ({exc}); start it or set CRONFLEET_TEST_AMQP_URL")
PY
exec "$venv/bin/python" -m pytest "$@"
