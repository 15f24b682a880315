"""The benchmarks' Django app (its only content is the `bench` management command).

Installed by bench/settings.py alone, which manage.py uses for `manage.py bench`: the
product's settings never install it.
"""

from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    verbose_name = "Cronfleet benchmarks"
