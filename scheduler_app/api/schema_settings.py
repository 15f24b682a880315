"""Cronfleet's drf-spectacular settings: what the API's schema and docs views (docs.py) use,
whatever the host project's SPECTACULAR_SETTINGS say.

Nothing is imported here, so a settings module may import it too (the standalone project's
`manage.py spectacular` reads SPECTACULAR_SETTINGS). The paths' prefix is not written down:
it is where the host mounts the API, which docs.ApiSchemaGenerator finds from the routes.
"""

SETTINGS = {
    "TITLE": "Cronfleet API",
    "DESCRIPTION": "Jobs, runs and tenants of a Cronfleet scheduler. Authenticate with "
    "`Authorization: Bearer cf_<prefix>_<secret>`. Errors are "
    '`{"errors": [{"field": "schedule.cron", "message": "..."}]}`.',
    "VERSION": "1",
    # None: drf-spectacular takes the common prefix of the API's own paths (docs.py generates
    # only those), so tags and operation ids are "jobs", "jobs_list" under any mount.
    "SCHEMA_PATH_PREFIX": None,
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "TaskKindEnum": ["task"],
        "HttpKindEnum": ["http"],
        "CommandKindEnum": ["command"],
        "SqlKindEnum": ["sql"],
        "RunStateEnum": "scheduler_app.models.RunState",
        "TriggerEnum": "scheduler_app.models.Trigger",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "scheduler_app.api.schema.refuse_unknown_request_fields",
        "scheduler_app.api.schema.add_error_responses",
    ],
    # Swagger UI's files come from drf-spectacular-sidecar (served as static files), not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
}
