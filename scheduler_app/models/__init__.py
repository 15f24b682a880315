"""The app's models, one module a family: tenants (tenants and API keys), core (jobs, the run
ledger and audit), console (alert rules, alerts, the dashboard's minutes), ledger (the hourly rollup),
nodes (beats and workers), objectives (fleet objectives and their events by hour), pauses (bulk
pause requests), calendars (business-day calendars). Every room imports them from here."""

from scheduler_app.models.calendars import Calendar, business_calendars, public_holidays, supported_countries
from scheduler_app.models.checkins import CHECKIN_PREFIX, DEFAULT_GRACE_SECONDS, STARTED_REASON, WAITING_REASON, Monitor
from scheduler_app.models.console import Alert, AlertKind, AlertRule, RunMinute
from scheduler_app.models.core import (
    ACTIVE_STATES,
    ERROR_IN_HISTORY,
    JOB_NAME_UNIQUE,
    JOB_RETENTION_SET,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    TERMINAL_STATES,
    AuditEvent,
    Job,
    JobQuerySet,
    JobRun,
    OverlapPolicy,
    RunState,
    TargetKind,
    Trigger,
    append_attempt,
    celery_task_id,
    db_now,
    fire_key,
    misfire_rules_of,
    schedule_of,
)
from scheduler_app.models.ledger import RunHour
from scheduler_app.models.nodes import Node, NodeKind
from scheduler_app.models.objectives import Objective, ObjectiveHour, ObjectiveKind
from scheduler_app.models.pauses import PauseRequest, PauseRequestState
from scheduler_app.models.tenants import ApiKey, Tenant
from scheduler_app.models.windows import MaintenanceWindow, RunningPolicy, WindowAction

__all__ = [
    "CHECKIN_PREFIX",
    "DEFAULT_GRACE_SECONDS",
    "STARTED_REASON",
    "WAITING_REASON",
    "Monitor",
    "ACTIVE_STATES",
    "ERROR_IN_HISTORY",
    "JOB_NAME_UNIQUE",
    "JOB_RETENTION_SET",
    "PRIORITY_DEFAULT",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "TERMINAL_STATES",
    "Alert",
    "AlertKind",
    "AlertRule",
    "ApiKey",
    "AuditEvent",
    "Calendar",
    "Job",
    "JobQuerySet",
    "JobRun",
    "Node",
    "NodeKind",
    "Objective",
    "ObjectiveHour",
    "ObjectiveKind",
    "OverlapPolicy",
    "PauseRequest",
    "PauseRequestState",
    "RunHour",
    "RunMinute",
    "RunState",
    "TargetKind",
    "Tenant",
    "Trigger",
    "append_attempt",
    "celery_task_id",
    "db_now",
    "business_calendars",
    "fire_key",
    "misfire_rules_of",
    "public_holidays",
    "schedule_of",
    "supported_countries",
    "MaintenanceWindow",
    "RunningPolicy",
    "WindowAction",
]
