"""A host project that installs Cronfleet as an app (tests/system/api/test_api_host_settings.py runs
it in a process of its own): Django REST Framework at its defaults but for a site-wide policy a host
may well have, Cronfleet's API mounted under /cron/ by the URLconf in
tests/integration/api/test_api_host_settings.py, and none of
Cronfleet's deployment (no ApiErrorMiddleware, no REST_FRAMEWORK or SPECTACULAR_SETTINGS of
Cronfleet's). Nothing here connects to a database: the requests it serves are refused first.
"""

SECRET_KEY = "host-project-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_results",  # the worker's results backend, which scheduler_app imports
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "scheduler_app",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.integration.api.test_api_host_settings"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
# The host's own API: open to anyone, by session or Basic credentials, with its own parsers,
# renderers, filters, throttles and no DEFAULT_SCHEMA_CLASS (DRF's, not drf-spectacular's).
REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.FormParser", "rest_framework.parsers.MultiPartParser"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.BrowsableAPIRenderer",
        "rest_framework.renderers.JSONRenderer",
    ],
    "DEFAULT_FILTER_BACKENDS": ["rest_framework.filters.OrderingFilter"],
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": "1/day"},
    "UNICODE_JSON": False,
    "COMPACT_JSON": False,
}
# A host's schema of its own API, which must neither rename nor reshape Cronfleet's.
SPECTACULAR_SETTINGS = {
    "TITLE": "Host API",
    "DESCRIPTION": "The host's own API",
    "SCHEMA_PATH_PREFIX": "/host/",
    "SERVE_INCLUDE_SCHEMA": True,
    "SWAGGER_UI_DIST": "https://cdn.example.com/swagger-ui",
    "COMPONENT_SPLIT_REQUEST": False,
}
