#!/usr/bin/env bash
# Run Cronfleet's test suite against real PostgreSQL and Redis (and MariaDB for SQL jobs).
#   ./test.sh                 every tier: unit, then integration, then system and faults side by
#                             side, stopping at the first step that fails
#   ./test.sh -m "not slow"   the same without the tests that start processes (system, faults)
#   ./test.sh unit            the unit tier (tests/unit): no database, server or process needed
#   ./test.sh integration     tests/integration: the real servers, one process per xdist worker
#   ./test.sh system          tests/system: real beats, workers, browsers, builds
#   ./test.sh faults          tests/faults: the fault suite
#   ./test.sh PATH...         those tests, in one pytest run (no xdist unless -n is given)
#   (a tier's name or paths, then any pytest arguments: -x, --lf, -k, -n 4, -p no:xdist ...)
#   ./test.sh --repeat N ...  any of the above N times in a row, stopping at the first failure
#   ./test.sh --django 6.0 ...
#                             the same in .venv-django6.0 with that Django release (Python 3.12
#                             or newer: python3.12 on PATH, or pyenv's; PYTHON names another);
#                             --django comes first, then --repeat
#   ./test.sh [--django 6.0] --setup
#                             make the virtual environment and install into it, run no test
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
if [ "${1:-}" = "--setup" ]; then
  echo "test.sh: $venv is ready"
  exit 0
fi

export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/cronfleet}
export CELERY_BROKER_URL=${CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}
# Bytecode is written: with PYTHONDONTWRITEBYTECODE set (some machines set it for everyone),
# every beat, worker and manage.py the tests start would compile the project's modules again.
unset PYTHONDONTWRITEBYTECODE
# The servers the integration, system and fault tiers use: each one missing is named with the
# command that starts it (the unit tier needs none).
check_servers() {
  "$venv/bin/python" - <<'PY'
import os, sys
import psycopg, redis
from kombu import Connection
missing = []
try:
    url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"
    psycopg.connect(url, connect_timeout=5).close()
except Exception as exc:
    missing.append(f"PostgreSQL ({exc}): pg_ctlcluster <version> main start, or set DATABASE_URL")
try:
    redis.Redis.from_url(os.environ["CELERY_BROKER_URL"], socket_connect_timeout=5).ping()
except Exception as exc:
    missing.append(f"Redis ({exc}): redis-server --daemonize yes, or set CELERY_BROKER_URL")
amqp = os.environ.get("CRONFLEET_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
try:
    with Connection(amqp, connect_timeout=5) as conn:
        conn.ensure_connection(max_retries=1)
except Exception as exc:
    missing.append(f"RabbitMQ at {amqp} ({exc}): rabbitmq-server -detached, or set CRONFLEET_TEST_AMQP_URL")
for line in missing:
    print(f"test.sh: not reachable: {line}", file=sys.stderr)
sys.exit(1 if missing else 0)
PY
}

# pytest-xdist workers per tier on two cores: the unit tier's tests keep a core busy each, the
# integration tier's wait on the database, the system and fault tiers' on the processes they
# start (the fault scenarios' lag bounds hold beside a bench, so beside one another too). An
# -n, -p no:xdist or --pdb of the caller's wins.
workers_for() {
  case $1 in
    unit) echo "-n 2" ;;
    integration) echo "-n 2" ;;
    system) echo "-n 3 --dist loadfile" ;;
    faults) echo "-n 2" ;;
  esac
}

run_pytest() {  # run_pytest TIER [pytest arguments]: TIER "" for paths of the caller's
  local tier=$1
  shift
  local -a extra=()
  # Outside CI the test database is kept between runs (pytest-django's --reuse-db); CI makes it anew.
  [ "${CI:-}" = "true" ] || extra+=(--reuse-db)
  local own="" previous="" argument
  for argument in "$@"; do
    case $argument in
      -n|-n*|--numprocesses*|--pdb|-pno:xdist) own=1 ;;
      no:xdist) [ "$previous" = "-p" ] && own=1 ;;
    esac
    previous=$argument
  done
  if [ -n "$tier" ] && [ -z "$own" ]; then
    # shellcheck disable=SC2207
    extra+=($(workers_for "$tier"))
  fi
  "$venv/bin/python" -m pytest "${extra[@]}" "$@"
}

repeat=1
if [ "${1:-}" = "--repeat" ]; then  # ./test.sh --repeat N [tier or paths] [pytest arguments]
  repeat=${2:?"test.sh: --repeat needs a count, e.g. --repeat 10 tests/system/dispatch"}
  shift 2
fi

case "${1:-}" in
  unit|integration|system|faults)  # one tier
    tier=$1
    shift
    [ "$tier" = "unit" ] || check_servers
    for ((run = 1; run <= repeat; run++)); do
      [ "$repeat" = 1 ] || echo "test.sh: run $run of $repeat"
      run_pytest "$tier" "tests/$tier" "$@"
    done
    exit 0
    ;;
esac

has_paths=""
for argument in "$@"; do
  case $argument in
    tests|tests/*|*::*) has_paths=1 ;;
  esac
done
if [ -n "$has_paths" ]; then  # paths of the caller's: one pytest run, as they asked
  check_servers
  for ((run = 1; run <= repeat; run++)); do
    [ "$repeat" = 1 ] || echo "test.sh: run $run of $repeat"
    run_pytest "" "$@"
  done
  exit 0
fi

# No paths: every tier with the caller's pytest arguments: unit, then integration, then the
# system and fault tiers side by side, stopping at the first step that fails (a tier whose
# tests the arguments all deselect is no failure).
run_tier() {  # run_tier TIER [pytest arguments]: its --repeat runs, stopping at the first failure
  local tier=$1 run status
  shift
  for ((run = 1; run <= repeat; run++)); do
    [ "$repeat" = 1 ] || echo "test.sh: the $tier tier, run $run of $repeat"
    status=0
    run_pytest "$tier" "tests/$tier" "$@" || status=$?
    if [ "$status" != 0 ] && [ "$status" != 5 ]; then
      echo "test.sh: the $tier tier failed (pytest exit $status)" >&2
      return "$status"
    fi
  done
}

started=$SECONDS
for tier in unit integration; do
  [ "$tier" = "unit" ] || check_servers
  echo "test.sh: the $tier tier (tests/$tier)"
  tier_started=$SECONDS
  status=0
  run_tier "$tier" "$@" || status=$?
  if [ "$status" != 0 ]; then
    echo "test.sh: the tiers after $tier were not run" >&2
    exit "$status"
  fi
  echo "test.sh: the $tier tier passed in $((SECONDS - tier_started)) s ($((SECONDS - started)) s so far)"
done

# The fault scenarios mostly wait (on leases, windows and the servers they restart) while the
# system tier mostly computes, so the two run side by side: together they take little more
# than the system tier alone. The fault tier has a test database of its own and Redis
# databases eight below the system tier's (each tier's xdist workers take the ones below its
# own); its output follows the system tier's.
broker_db=${CELERY_BROKER_URL##*/}
if ! [[ $broker_db =~ ^[0-9]+$ ]] || [ "$broker_db" -lt 10 ]; then
  echo "test.sh: CELERY_BROKER_URL must end in a Redis database of 10 or more (the fault tier" \
       "takes the ones eight below it), not ${CELERY_BROKER_URL}" >&2
  exit 2
fi
check_servers
echo "test.sh: the system and faults tiers side by side (tests/system, tests/faults)"
tier_started=$SECONDS
faults_log=$(mktemp)
# A process group of its own (set -m), so that an interrupt reaches it through the trap below
# and its tests tear down their servers as they do when run alone.
set -m
(
  export CRONFLEET_TEST_DB_SUFFIX="${CRONFLEET_TEST_DB_SUFFIX:-}_faults"
  export CELERY_BROKER_URL="${CELERY_BROKER_URL%/*}/$((broker_db - 8))"
  run_tier faults "$@"
) >"$faults_log" 2>&1 &
faults=$!
set +m
trap 'kill -INT -- -$faults 2>/dev/null' INT TERM
system_status=0
run_tier system "$@" || system_status=$?
faults_status=0
wait "$faults" || faults_status=$?
while kill -0 "$faults" 2>/dev/null; do  # the trap ended the wait: its tests are tearing down
  wait "$faults" || faults_status=$?
done
trap - INT TERM
echo "test.sh: the faults tier's output"
cat "$faults_log"
rm -f "$faults_log"
if [ "$system_status" != 0 ] || [ "$faults_status" != 0 ]; then
  echo "test.sh: the system tier exited $system_status and the faults tier $faults_status" >&2
  [ "$system_status" != 0 ] && exit "$system_status"
  exit "$faults_status"
fi
echo "test.sh: the system and faults tiers passed in $((SECONDS - tier_started)) s ($((SECONDS - started)) s so far)"
