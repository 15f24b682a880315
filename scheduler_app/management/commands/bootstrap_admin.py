"""The first admin user, from the environment: `manage.py bootstrap_admin`.

Safe to run on every deployment (docker-compose.yml runs it once per `up`, after migrate):
while no superuser exists it makes one from DJANGO_SUPERUSER_USERNAME and
DJANGO_SUPERUSER_PASSWORD (and DJANGO_SUPERUSER_EMAIL), the variables Django's
`createsuperuser --noinput` reads; once one exists it changes nothing, so a password changed
in the admin is never reset from the environment.
"""

from __future__ import annotations

import os

from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction


class Command(BaseCommand):
    help = "Make the first superuser from DJANGO_SUPERUSER_USERNAME/_PASSWORD/_EMAIL; nothing if one exists."

    def handle(self, *args, **options) -> None:
        User = get_user_model()
        with transaction.atomic():
            if User.objects.filter(is_superuser=True).exists():
                self.stdout.write("bootstrap_admin: a superuser exists; nothing to do")
                return
            username = os.environ.get("DJANGO_SUPERUSER_USERNAME", "").strip()
            password = os.environ.get("DJANGO_SUPERUSER_PASSWORD", "")
            email = os.environ.get("DJANGO_SUPERUSER_EMAIL", "").strip()
            for name, value in (("DJANGO_SUPERUSER_USERNAME", username), ("DJANGO_SUPERUSER_PASSWORD", password)):
                if not value:
                    raise CommandError(f"bootstrap_admin: no superuser yet and {name} is not set")
            if User.objects.filter(username=username).exists():
                raise CommandError(f"bootstrap_admin: a user {username!r} exists but is not a superuser")
            user = User(username=username, email=email)
            try:
                password_validation.validate_password(password, user)
            except ValidationError as exc:
                raise CommandError(f"bootstrap_admin: DJANGO_SUPERUSER_PASSWORD: {' '.join(exc.messages)}") from None
            User.objects.create_superuser(username=username, email=email, password=password)
        self.stdout.write(f"bootstrap_admin: created superuser {username!r}")
