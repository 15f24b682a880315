import os
import sys

from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
try:
    application = get_wsgi_application()
except ImproperlyConfigured as exc:
    # One line naming the variable, not a traceback per gunicorn worker; gunicorn then stops
    # ("Worker failed to boot") instead of retrying a configuration that cannot work.
    print(f"wsgi: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
    sys.exit(3)  # gunicorn's WORKER_BOOT_ERROR
