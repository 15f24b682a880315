#!/usr/bin/env bash
# Cronfleet demo: from a bare checkout to a running scheduler in one command.
#
#   ./demo.sh                 # web on 127.0.0.1:8000, beat, worker; Ctrl-C stops all
#   ./demo.sh --port 8001     # another port
#   ./demo.sh --no-web        # no web server
#
# Needs only Python 3.11+ (override with PYTHON=/path/to/python3). With no DATABASE_URL
# or CELERY_BROKER_URL set, data lives in an SQLite file and a folder broker under var/
# (or $CRONFLEET_VAR_DIR): no PostgreSQL, Redis or other server is needed.
set -euo pipefail

cd -- "$(dirname -- "${BASH_SOURCE[0]}")"

# A local demo asks for debug explicitly (settings default it to off): the development secret
# key and Django's debug pages. Never serve this to a network.
export DJANGO_DEBUG="${DJANGO_DEBUG:-true}"

PYTHON="${PYTHON:-python3}"
VENV=.venv
VENV_PY="$VENV/bin/python"
STAMP="$VENV/.requirements.sha256"
VERSION_CHECK='import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'

say() { printf '==> %s\n' "$*"; }
die() { printf 'demo.sh: %s\n' "$*" >&2; exit 1; }

python_version() { "$1" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo "unknown"; }

if [ ! -x "$VENV_PY" ]; then
    command -v "$PYTHON" >/dev/null 2>&1 \
        || die "$PYTHON not found. Install Python 3.11 or newer (or set PYTHON=/path/to/python3)."
    "$PYTHON" -c "$VERSION_CHECK" 2>/dev/null \
        || die "Python 3.11 or newer is required; $PYTHON is $(python_version "$PYTHON"). Install a newer Python or set PYTHON=/path/to/python3.11."
    say "Creating virtual environment in $VENV with $PYTHON ($(python_version "$PYTHON"))"
    if ! "$PYTHON" -m venv "$VENV"; then
        rm -rf -- "$VENV"  # a half-made venv would be taken for a good one next time
        die "could not create $VENV. On Debian/Ubuntu install the venv module first: sudo apt install python3-venv"
    fi
fi
"$VENV_PY" -c "$VERSION_CHECK" 2>/dev/null \
    || die "$VENV uses Python $(python_version "$VENV_PY"); 3.11 or newer is required. Remove $VENV and run ./demo.sh again."

# Install requirements only when requirements.txt changed since the last successful install.
want="$("$VENV_PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' requirements.txt)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
    say "Installing requirements (first run can take a minute)"
    requirements=requirements.txt
    # mysqlclient (SQL jobs on MariaDB) compiles against MariaDB's client library; without it
    # the demo installs the rest (and tries again next time).
    if ! "$VENV_PY" -c 'import MySQLdb' 2>/dev/null \
        && ! { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libmariadb 2>/dev/null; }; then
        say "Leaving out mysqlclient (SQL jobs on MariaDB): apt-get install libmariadb-dev pkg-config to have it"
        requirements="$VENV/requirements-without-mysqlclient.txt"
        grep -v '^mysqlclient' requirements.txt > "$requirements"
    fi
    "$VENV_PY" -m pip install --quiet --disable-pip-version-check -r "$requirements" \
        || die "pip install failed (see above). Check your network connection and run ./demo.sh again."
    if [ "$requirements" = requirements.txt ]; then
        printf '%s\n' "$want" > "$STAMP"
    fi
fi

say "Applying database migrations"
"$VENV_PY" manage.py migrate --noinput -v 0

say "Starting the demo"
exec "$VENV_PY" manage.py demo "$@"
