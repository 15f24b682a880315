FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY requirements.txt .
# mysqlclient (SQL jobs on MariaDB) compiles against MariaDB's client library; the compiler
# and headers go again once it is built, the library stays.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config libmariadb-dev libmariadb3 \
    && pip install -r requirements.txt \
    && apt-get purge -y gcc libc6-dev pkg-config libmariadb-dev && apt-get autoremove -y \
    && rm -rf /var/lib/apt/lists/*
COPY . .
# Static files (the admin's, the API docs') for WhiteNoise to serve. The key is a build-time
# stand-in: collectstatic signs nothing, and the image holds no secret.
RUN DJANGO_SECRET_KEY=collectstatic-at-build-time-only-not-a-secret python manage.py collectstatic --noinput -v 0 \
    && useradd --create-home cronfleet && chown -R cronfleet /app/var
USER cronfleet
EXPOSE 8000
# Gunicorn: bounded processes and threads, one pooled database connection per thread
# (project/gunicorn.conf.py). Debug is off, so the settings refuse to start without
# DJANGO_SECRET_KEY: pass it (and DATABASE_URL, CELERY_BROKER_URL) in the environment.
CMD ["gunicorn", "-c", "project/gunicorn.conf.py"]
