"""The Celery app `bench peers` runs its peers' beats with: the project's app (same broker,
serializer, priority steps and routing as Cronfleet's beats), with django_celery_beat
installed (peer_settings) and RedBeat's keys under their own prefix.

    celery -A bench.peer_app beat -S django_celery_beat.schedulers:DatabaseScheduler
    celery -A bench.peer_app beat -S redbeat.RedBeatScheduler
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.peer_settings")

import django  # noqa: E402

django.setup()

from project.celery import app  # noqa: E402

REDBEAT_PREFIX = "bench-peers-redbeat:"

app.conf.update(
    redbeat_redis_url=app.conf.broker_url,
    redbeat_redis_options={},
    redbeat_key_prefix=REDBEAT_PREFIX,
)
