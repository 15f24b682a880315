FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt
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
