"""manage.py cronfleet: which Cronfleet this is, and under which settings.

    manage.py cronfleet --version   cronfleet 0.9.0
    manage.py cronfleet             the version, the settings module in effect, Django's and Python's versions

Other commands' --version is Django's (BaseCommand.get_version); this one answers for the
installed app, which a host upgrades apart from its Django.
"""

from __future__ import annotations

import platform

import django
from django.conf import settings
from django.core.management.base import BaseCommand

import scheduler_app


def version_line() -> str:
    return f"cronfleet {scheduler_app.__version__}"


class Command(BaseCommand):
    help = "Show Cronfleet's version and the settings module in effect."
    # No checks: this is what one runs to find out what is installed, including when the
    # settings are wrong enough for a check to fail.
    requires_system_checks: list[str] = []

    def get_version(self) -> str:
        # What --version prints, as is: the distribution's name and version.
        return version_line()

    def handle(self, *args, **options) -> None:
        # SETTINGS_MODULE is None when the host called settings.configure() itself.
        module = getattr(settings, "SETTINGS_MODULE", None) or "(settings.configure(), no module)"
        self.stdout.write(
            f"{version_line()}\nsettings: {module}\nDjango {django.get_version()}, Python {platform.python_version()}"
        )
