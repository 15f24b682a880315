"""Jobs: made by services.job_create, edited by services.job_update, operated (pause,
resume, trigger, backfill, replay) through the services."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import OuterRef, Subquery
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from scheduler_app import schedules, services
from scheduler_app.admin import chains, checkins, jobpage
from scheduler_app.admin.common import (
    ACTION_LIMIT,
    AsciiSplitDateTimeField,
    TagsField,
    actor,
    adopt,
    jsonb_safe,
    state_badge,
)
from scheduler_app.admin.retention import IN_FORCE, RETENTION_FIELDS, RETENTION_FIELDSET, RetentionAdminMixin
from scheduler_app.conf import app_settings
from scheduler_app.ledger import checkstatus
from scheduler_app.management.tables import describe_schedule, local_text, shorten, utc_text
from scheduler_app.models import PRIORITY_MAX, PRIORITY_MIN, Calendar, Job, JobRun, TargetKind, db_now
from scheduler_app.observability.errors import answers_server_errors
from scheduler_app.services.edits import check_managed, managed_notice
from scheduler_app.targets import monitor
from scheduler_app.targets import sql as sqljobs
from scheduler_app.targets import task as task_target

NEXT_FIRES = 5

TASK_HELP = (
    f"Any task your Celery app registers (staff only: the API and the command line may name only what "
    f"{task_target.SETTING} allows)"
)
ALLOWED_GROUP = f"Allowed ({task_target.SETTING}: the API and the command line may name these too)"
OTHERS_GROUP = f"Registered with your Celery app, beyond {task_target.SETTING} (staff only)"


def task_choices(*, any_registered: bool, current: str = "") -> list:
    """The admin's task chooser, as django-celery-beat's admin offers the registered tasks:

    - the allowed ones: every registered task the allow-list allows, and each exact entry of it
      (a worker may import a task this web process has not);
    - for staff who may choose beyond the allow-list (`any_registered`), the other registered
      tasks: the issue this answers ("a job can call any task the host's Celery app registers,
      chosen in the admin"), while tenants' API keys and the command line stay within the
      allow-list (targets/task.py). Cronfleet's run tasks and Celery's own are never listed;
    - the job's `current` task when it is neither (a change form keeps what the job has).
    A blank choice first: a check-in job runs no task.
    """
    registered = task_target.registered_tasks()
    allowed = {name for name in registered if task_target.task_allowed(name)}
    allowed.update(entry for entry in app_settings.ALLOWED_TASKS if not task_target.is_pattern(entry))
    others = [name for name in registered if name not in allowed] if any_registered else []
    choices: list = [("", "---------"), (ALLOWED_GROUP, [(name, name) for name in sorted(allowed)])]
    if others:
        choices.append((OTHERS_GROUP, [(name, name) for name in others]))
    if current and current not in allowed and current not in others:
        choices.append(("This job's task", [(current, current)]))
    return choices


def may_choose_any_task(request, obj=None) -> bool:
    """Staff with the job's add (a new job) or change permission may give it any registered task
    (task_choices); the services take that as allow_any_registered=True from here only."""
    user = request.user
    perm = f"{Job._meta.app_label}.{'change' if obj is not None else 'add'}_job"
    return bool(user.is_active and user.is_staff and user.has_perm(perm))


# services.InvalidInput.field -> the add form's field (None: a non-field error).
SPEC_FIELD_TO_FORM = {"task": "task_name", "every": "every_seconds", "at": "run_at", "schedule": None, "anchor": None}


def add_service_error(form: forms.Form, exc: services.InvalidInput) -> None:
    """Show a service's refusal on the form field it names; an item of a list field
    ("tags.1") on the list's field, saying which item."""
    name, _, item = exc.field.partition(".")
    field = SPEC_FIELD_TO_FORM.get(exc.field, name)
    if field in form.fields:
        form.add_error(field, f"{exc.field}: {exc.message}" if item else exc.message)
    else:
        form.add_error(None, exc.message)


def limit_calendars(form: forms.ModelForm, tenant_id: int | None) -> None:
    """Offer and accept only the calendars of the job's tenant (another's id is "not one of
    the available choices" on the calendar field). A new job whose tenant is not chosen yet
    lists every tenant's, each named with its tenant: the admin's staff see every tenant."""
    if "calendar" not in form.fields:
        return
    calendars = Calendar.objects.select_related("tenant").order_by("tenant__slug", "name")
    field = form.fields["calendar"]
    if tenant_id is not None:
        field.queryset = calendars.filter(tenant_id=tenant_id)
        return
    field.queryset = calendars
    field.label_from_instance = lambda calendar: f"{calendar.tenant.slug}/{calendar.name}"


FLEX_SCOPE_HELP = (
    "Whose planned fires the window's placement avoids: the tenant's (blank) or every job's on "
    "the same queue (docs/flexible-windows.md)"
)


class JobAddForm(forms.ModelForm):
    """Creates a job through services.job_create; validated by services.validate_spec."""

    task_name = forms.ChoiceField(
        choices=(),
        label="Task",
        required=False,
        help_text=f"What Cronfleet runs; blank for a check-in job. {TASK_HELP}",
    )
    check_in = forms.BooleanField(
        required=False,
        label="Check-in job",
        help_text="Runs elsewhere and pings its check-in URL (docs/check-ins.md); Cronfleet runs nothing",
    )
    grace_seconds = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=monitor.MAX_GRACE_SECONDS,
        help_text=f"A check-in job's grace after each fire; blank: {monitor.DEFAULT_GRACE_SECONDS}",
    )
    tags = TagsField()
    timezone = forms.CharField(
        required=False, max_length=64, help_text="IANA zone the cron expression is read in; blank: the tenant's zone"
    )

    class Meta:
        model = Job
        fields = (
            "tenant",
            "name",
            "description",
            "tags",
            "cron",
            "timezone",
            "every_seconds",
            "run_at",
            "flex_window",
            "flex_scope",
            "start_at",
            "end_at",
            "jitter_seconds",
            "task_name",
            "args",
            "kwargs",
            "queue",
            "priority",
            "timeout_seconds",
            "max_attempts",
            "retry_backoff_seconds",
            "retry_backoff_max_seconds",
            "misfire_policy",
            "catchup_window_seconds",
            "run_all_cap",
            "overlap_policy",
            "batch",
            "pause_after_failures",
            "calendar",
            "calendar_policy",
            "after_job",
            "after_states",
        )
        help_texts = {
            "cron": "5 fields or a nickname such as @daily",
            "every_seconds": "Counted from now",
            "flex_scope": FLEX_SCOPE_HELP,
        }

    spec: services.JobSpec | None = None
    any_registered = False  # set by JobAdmin.get_form (may_choose_any_task)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["task_name"].choices = task_choices(any_registered=self.any_registered)
        tenant = self.data.get("tenant") or self.initial.get("tenant")
        limit_calendars(self, int(tenant) if str(tenant or "").isdigit() else None)
        chains.limit_parents(self, int(tenant) if str(tenant or "").isdigit() else None)

    def clean_after_states(self):
        return chains.clean_after_states(self)

    def clean_args(self):
        return jsonb_safe(self.cleaned_data.get("args"))

    def clean_kwargs(self):
        return jsonb_safe(self.cleaned_data.get("kwargs"))

    def clean_tags(self):
        tags = jsonb_safe(self.cleaned_data.get("tags"))
        if tags is None:
            return []
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise ValidationError("Give tags separated by commas.")
        return tags

    def clean(self):
        data = super().clean()
        tenant = data.get("tenant")
        if not data.get("timezone"):
            data["timezone"] = tenant.timezone if tenant else "UTC"
        if self.errors or tenant is None:
            return data
        if not target_chosen(self, data):
            return data
        spec = services.JobSpec(
            name=data["name"],
            task_name=data.get("task_name") or "",
            cron=data.get("cron") or "",
            timezone=data["timezone"],
            every=data.get("every_seconds"),
            at=data.get("run_at"),
            start_at=data.get("start_at"),
            end_at=data.get("end_at"),
            args=data.get("args"),
            kwargs=data.get("kwargs"),
            queue=data.get("queue") or "",
            priority=data["priority"],
            timeout_seconds=data["timeout_seconds"],
            max_attempts=data["max_attempts"],
            retry_backoff_seconds=data["retry_backoff_seconds"],
            retry_backoff_max_seconds=data["retry_backoff_max_seconds"],
            misfire_policy=data["misfire_policy"],
            catchup_window_seconds=data["catchup_window_seconds"],
            run_all_cap=data["run_all_cap"],
            overlap_policy=data["overlap_policy"],
            jitter_seconds=data["jitter_seconds"],
            description=data.get("description") or "",
            tags=data.get("tags"),
            batch=bool(data.get("batch")),
            pause_after_failures=data.get("pause_after_failures"),
            calendar=data["calendar"].name if data.get("calendar") else "",
            calendar_policy=data.get("calendar_policy") or "skip",
            after_job=data["after_job"].name if data.get("after_job") else "",
            after_states=data.get("after_states"),
            flex_window=data.get("flex_window") or "",
            flex_scope=data.get("flex_scope") or "",
        )
        if data.get("check_in"):
            grace = data.get("grace_seconds")
            spec.target_kind = TargetKind.MONITOR.value
            spec.monitor = {"grace_seconds": grace if grace is not None else monitor.DEFAULT_GRACE_SECONDS}
        try:
            _, fields = services.validate_spec(tenant, spec, db_now(), allow_any_registered=self.any_registered)
        except services.InvalidInput as exc:
            add_service_error(self, exc)
            return data
        # Show the model validation what job_create will store (normalised cron and so on).
        data.update({name: value for name, value in fields.items() if name in self.fields})
        self.spec = spec
        return data


def target_chosen(form: JobAddForm, data: dict) -> bool:
    """A task, or a check-in job (which has none): exactly one, each error on its field."""
    if data.get("check_in") and data.get("task_name"):
        form.add_error("task_name", "A check-in job runs no task: leave Task blank.")
    elif not data.get("check_in") and not data.get("task_name"):
        form.add_error("task_name", "Choose a task, or tick Check-in job.")
    elif not data.get("check_in") and data.get("grace_seconds") is not None:
        form.add_error("grace_seconds", "Grace is for check-in jobs only.")
    else:
        return True
    return False


# The change form's fields -> JobSpec names (the others have the same name in both).
FORM_TO_SPEC = {"every_seconds": "every", "run_at": "at"}
JOB_EDITABLE = (
    "name",
    "description",
    "tags",
    "cron",
    "timezone",
    "every_seconds",
    "run_at",
    "flex_window",
    "flex_scope",
    "start_at",
    "end_at",
    "task_name",
    "args",
    "kwargs",
    "queue",
    "priority",
    "timeout_seconds",
    "max_attempts",
    "retry_backoff_seconds",
    "retry_backoff_max_seconds",
    "misfire_policy",
    "catchup_window_seconds",
    "run_all_cap",
    "overlap_policy",
    "jitter_seconds",
    "batch",
    "pause_after_failures",
    "calendar",
    "calendar_policy",
    "after_job",
    "after_states",
)


class JobChangeForm(forms.ModelForm):
    """Edits a saved job through services.job_update; services.plan_edit validates."""

    tags = TagsField()
    task_name = forms.ChoiceField(choices=(), label="Task", required=False, help_text=TASK_HELP)

    class Meta:
        model = Job
        fields = JOB_EDITABLE
        help_texts = {
            "cron": "5 fields or a nickname such as @daily. For a job with a window, the minute placed "
            "in it: a cron given here replaces the window",
            "flex_scope": FLEX_SCOPE_HELP,
        }

    changes: dict | None = None
    any_registered = False  # set by JobAdmin.get_form (may_choose_any_task)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["task_name"].choices = task_choices(
            any_registered=self.any_registered, current=self.instance.task_name
        )
        limit_calendars(self, self.instance.tenant_id)
        chains.limit_parents(self, self.instance.tenant_id, self.instance.id)

    def clean_after_states(self):
        return chains.clean_after_states(self)

    def clean_args(self):
        return jsonb_safe(self.cleaned_data.get("args"))

    def clean_kwargs(self):
        return jsonb_safe(self.cleaned_data.get("kwargs"))

    def clean_tags(self):
        return jsonb_safe(self.cleaned_data.get("tags")) or []

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        # Retention fields are saved apart (admin/retention.py), not through job_update.
        changes = {
            FORM_TO_SPEC.get(name, name): data.get(name) for name in self.changed_data if name not in RETENTION_FIELDS
        }
        for text_field in ("cron", "description", "queue", "task_name", "timezone"):
            if text_field in changes and changes[text_field] is None:
                changes[text_field] = ""
        if "calendar" in changes:  # the service takes the calendar by name, in the job's tenant
            changes["calendar"] = changes["calendar"].name if changes["calendar"] else ""
        if "after_job" in changes:  # and the parent job by name, in the job's tenant
            changes["after_job"] = changes["after_job"].name if changes["after_job"] else ""
        if changes.get("flex_window") == "" and "cron" not in changes and data.get("cron"):
            changes["cron"] = data["cron"]  # a window cleared: the job stays at the minute placed in it
        try:
            edit = services.plan_edit(self.instance, changes, db_now(), allow_any_registered=self.any_registered)
            if edit.diff and app_settings.MANAGED_JOBS_READ_ONLY:
                check_managed(self.instance, actor="admin")  # refuses a job managed by schedules as code
        except services.InvalidInput as exc:
            add_service_error(self, exc)
            return data
        self.changes = changes
        return data


class PriorityFilter(admin.SimpleListFilter):
    """The priorities a job may have, listed without asking the job table for its distinct
    values (a whole-table read per page view: 54-60 ms at 10,000 jobs on a loaded machine)."""

    title = "priority"
    parameter_name = "priority__exact"

    def lookups(self, request, model_admin):
        return [(str(value), str(value)) for value in range(PRIORITY_MAX, PRIORITY_MIN - 1, -1)]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        if not self.value().isdigit():
            raise IncorrectLookupParameters(f"priority: not a number: {self.value()!r}")
        return queryset.filter(priority=int(self.value()))


PAUSE_TITLE = "Pause after repeated failure"
PAUSE_DESCRIPTION = (
    "The job pauses itself once this many of its runs in a row ended failed or dead (blank: never); "
    "resuming it starts the count again."
)


class PausedFilter(admin.SimpleListFilter):
    """Paused jobs by who paused them: a person, or the job itself after repeated failure."""

    title = "paused"
    parameter_name = "paused"

    def lookups(self, request, model_admin):
        return [("auto", "paused itself (auto)"), ("hand", "paused by hand")]

    def queryset(self, request, queryset):
        if self.value() == "auto":
            return queryset.filter(enabled=False, auto_paused_at__isnull=False)
        if self.value() == "hand":
            return queryset.filter(enabled=False, auto_paused_at__isnull=True)
        return queryset


class ManagedFilter(admin.SimpleListFilter):
    """Jobs made by hand, or managed by schedules as code (by owner)."""

    title = "managed by"
    parameter_name = "managed_by"

    def lookups(self, request, model_admin):
        # Fixed choices: listing the owners would read the whole job table (?managed_by=<owner> works too).
        return [("-", "made by hand"), ("+", "schedules as code")]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if value == "+":
            return queryset.exclude(managed_by="")
        return queryset.filter(managed_by="" if value == "-" else value)


@admin.register(Job)
class JobAdmin(RetentionAdminMixin, admin.ModelAdmin):
    list_display = ("title", "schedule", "status", "checkin", "priority", "next_run_at", "last_run_state", "managed")
    list_filter = ("tenant", "enabled", PausedFilter, PriorityFilter, "misfire_policy", ManagedFilter)
    list_select_related = ("tenant",)
    search_fields = ("name",)
    autocomplete_fields = ("tenant",)
    show_facets = admin.ShowFacets.NEVER
    show_full_result_count = False  # a second count of the whole job table on every view
    actions = ("pause_jobs", "resume_jobs", "trigger_jobs")
    formfield_overrides = {models.DateTimeField: {"form_class": AsciiSplitDateTimeField}}
    add_fieldsets = (
        (None, {"fields": ("tenant", "name", "description", "tags")}),
        (
            "Schedule",
            {
                "fields": (
                    "cron",
                    "timezone",
                    "every_seconds",
                    "run_at",
                    "flex_window",
                    "flex_scope",
                    "start_at",
                    "end_at",
                    "jitter_seconds",
                    "calendar",
                    "calendar_policy",
                ),
                "description": "Give exactly one of cron, every seconds, run at or flex window. "
                f"Datetimes are in the site's zone ({settings.TIME_ZONE}).",
            },
        ),
        (
            "Target",
            {
                "fields": (
                    "task_name",
                    "args",
                    "kwargs",
                    "queue",
                    "priority",
                    "timeout_seconds",
                    "batch",
                    "check_in",
                    "grace_seconds",
                )
            },
        ),
        (
            "Retries, misfires and overlap",
            {
                "fields": (
                    "max_attempts",
                    "retry_backoff_seconds",
                    "retry_backoff_max_seconds",
                    "misfire_policy",
                    "catchup_window_seconds",
                    "run_all_cap",
                    "overlap_policy",
                )
            },
        ),
        (PAUSE_TITLE, {"fields": ("pause_after_failures",), "description": PAUSE_DESCRIPTION}),
        chains.CHAIN_FIELDSET,
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "tenant",
                    "name",
                    "description",
                    "tags",
                    "enabled",
                    "paused_note",
                    "version",
                    "created_at",
                    "updated_at",
                )
            },
        ),
        (
            "Schedule",
            {
                "fields": (
                    "schedule",
                    "cron",
                    "timezone",
                    "every_seconds",
                    "run_at",
                    "anchor_at",
                    "flex_window",
                    "flex_scope",
                    "placement",
                    "start_at",
                    "end_at",
                    "jitter_seconds",
                    "calendar",
                    "calendar_policy",
                    "next_run_at",
                    "next_fires",
                )
            },
        ),
        (
            "Target",
            {
                "fields": (
                    "target_kind",
                    "target_config",
                    "sql_statement",
                    "check_in_url",
                    "task_name",
                    "args",
                    "kwargs",
                    "queue",
                    "priority",
                    "timeout_seconds",
                    "batch",
                )
            },
        ),
        (
            "Retries, misfires and overlap",
            {
                "fields": (
                    "max_attempts",
                    "retry_backoff_seconds",
                    "retry_backoff_max_seconds",
                    "misfire_policy",
                    "catchup_window_seconds",
                    "run_all_cap",
                    "overlap_policy",
                )
            },
        ),
        (
            PAUSE_TITLE,
            {
                "fields": ("pause_after_failures", "consecutive_failures", "auto_paused_at"),
                "description": PAUSE_DESCRIPTION,
            },
        ),
        RETENTION_FIELDSET,
        chains.CHAIN_FIELDSET,
        ("History", {"fields": ("links",)}),
    )
    readonly_fields = (
        "tenant",
        "enabled",
        "paused_note",
        "anchor_at",
        "target_kind",
        "target_config",
        "next_run_at",
        "version",
        "created_at",
        "updated_at",
        "schedule",
        "next_fires",
        "links",
        "sql_statement",
        "consecutive_failures",
        "auto_paused_at",
        IN_FORCE,
        "check_in_url",
        "placement",
    )

    class Media:
        css = {"all": ("scheduler_app/console.css",)}

    def get_queryset(self, request):
        # The check-in status's fields in the list's own statement (sub-selects, not a query a row).
        return checkstatus.with_check_fields(super().get_queryset(request).annotate(last_run_state=last_run_state()))

    def get_urls(self):
        return [
            path(
                "<path:object_id>/console/<str:action>/",
                self.admin_site.admin_view(answers_server_errors(self.console_view)),
                name="scheduler_app_job_console",
            ),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = self.get_object(request, object_id)
        shown = job is not None and jobpage.may_see_console(request.user)
        extra = jobpage.console_context(job, can_operate=self.has_operate_permission(request)) if shown else {}
        if job is not None and job.managed_by and request.method == "GET":
            read_only = app_settings.MANAGED_JOBS_READ_ONLY
            self.message_user(
                request,
                managed_notice(job)
                + (
                    "; edits here are refused"
                    if read_only
                    else "; an edit here is drift, which the next apply sets back"
                ),
                messages.WARNING,
            )
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})

    def console_view(self, request, object_id, action):
        """The job page's buttons: pause, resume, trigger, backfill (or its dry run), replay."""
        return jobpage.operate(self, request, object_id, action)

    def get_fieldsets(self, request, obj=None):
        return self.add_fieldsets if obj is None else self.fieldsets

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def get_form(self, request, obj=None, **kwargs):
        kwargs["form"] = JobAddForm if obj is None else JobChangeForm
        form = super().get_form(request, obj, **kwargs)  # a class made for this request
        form.any_registered = may_choose_any_task(request, obj)
        return form

    # -- display --

    @admin.display(description="job", ordering="name")
    def title(self, job):
        return str(job)  # tenant/job, as the CLI says it

    @admin.display(description="managed by", ordering="managed_by")
    def managed(self, job):
        return job.managed_by or "-"  # the owner under schedules as code; '-' made by hand

    @admin.display(description="status", ordering="enabled")
    def status(self, job):
        """enabled, paused (by a person) or paused (auto): the job paused itself after repeated failure."""
        if job.enabled:
            return "enabled"
        if job.auto_paused_at is not None:
            return format_html('<span title="{}">paused (auto)</span>', job.paused_note)
        return "paused"

    @admin.display(description="schedule")
    def schedule(self, job):
        placed = describe_schedule(job.cron, job.timezone, job.every_seconds, job.run_at)
        return f"window {job.flex_window}, placed at {placed}" if job.flex_window else placed

    @admin.display(description="placement")
    def placement(self, job):
        """Where the job's window placed it and why (services/flexible.py); '-' without a window."""
        return job.flex_note if job.flex_window else "-"

    @admin.display(description="SQL statement")
    def sql_statement(self, job):
        return sqljobs.describe(job.target_config) if job.target_kind == "sql" else "-"

    @admin.display(description="check-in URL")
    def check_in_url(self, job):
        """A monitored job's ping URL (docs/check-ins.md): its key is the only credential a ping needs."""
        monitor = getattr(job, "monitor", None) if job.target_kind == "monitor" else None
        return services.ping_url(monitor) if monitor is not None else "-"

    @admin.display(description="check-in")
    def checkin(self, job):
        """A monitored job's status (new, up, late, down, paused; ledger/checkstatus.py); '-' for others."""
        return checkins.status_badge(checkstatus.status_of(job))

    @admin.display(description="last run")
    def last_run_state(self, job):
        return state_badge(job.last_run_state) if job.last_run_state else "-"  # coloured as in the ledger

    @admin.display(description=f"next {NEXT_FIRES} fires")
    def next_fires(self, job):
        # The saved job: a change form shown again with errors holds the rejected values.
        job = Job.objects.get(pk=job.pk)
        # From the fire the beats will record next (a late one included); a paused job's
        # next_run_at is stale until it is resumed, so from now.
        after = job.next_run_at - timedelta(microseconds=1) if job.enabled and job.next_run_at else None
        fires = services.job_preview(job, count=NEXT_FIRES, after=after)
        if not fires:
            return "none left"
        schedule = job.schedule
        rows = format_html_join(
            "",
            "<li>{} &nbsp; ({}) <b class='cf-dst'>{}</b> <i class='cf-calendar'>{}</i></li>",
            (
                (
                    local_text(fire, job.timezone),
                    utc_text(fire),
                    schedules.fire_anomaly(schedule, fire) or "",
                    schedules.calendar_note(schedule, fire) or "",
                )
                for fire in fires
            ),
        )
        note = "" if job.enabled else "Paused: these fire only if the job is resumed before them."
        return format_html("<ol style='margin:0'>{}</ol>{}", rows, note)

    @admin.display(description="see also")
    def links(self, job):
        return format_html(
            '<a href="{}?job__id__exact={}">runs</a> · <a href="{}?job__id__exact={}">audit events</a>',
            reverse("admin:scheduler_app_jobrun_changelist"),
            job.pk,
            reverse("admin:scheduler_app_auditevent_changelist"),
            job.pk,
        )

    # -- writes: all through services --

    def has_operate_permission(self, request):
        return request.user.has_perm(f"{Job._meta.app_label}.change_job")

    def save_model(self, request, obj, form, change):
        if change:
            job = Job.objects.select_related("tenant").get(pk=obj.pk)
            adopt(
                obj,
                services.job_update(
                    job, form.changes or {}, actor=actor(request), allow_any_registered=form.any_registered
                ),
            )
            if job.managed_by and form.changes:
                self.message_user(
                    request,
                    managed_notice(job) + "; this edit shows as drift in the next plan, "
                    "and the next apply sets it back",
                    messages.WARNING,
                )
            return
        adopt(
            obj,
            services.job_create(obj.tenant, form.spec, actor=actor(request), allow_any_registered=form.any_registered),
        )

    def delete_model(self, request, obj):
        services.job_delete(obj, actor=actor(request))

    def delete_queryset(self, request, queryset):
        for job in queryset:
            services.job_delete(job, actor=actor(request))

    def get_deleted_objects(self, objs, request):
        """A summary instead of every run of every job (a ledger can hold millions), and
        no refusal because runs themselves cannot be deleted one by one here."""
        is_queryset = hasattr(objs, "query")
        jobs = list(objs.select_related("tenant")[:101]) if is_queryset else list(objs)
        shown = [f"{job.tenant.slug}/{job.name} (id {job.pk}), with all its runs" for job in jobs[:100]]
        count = objs.count() if is_queryset else len(jobs)
        if count > len(shown):
            shown.append(f"... and {count - len(shown)} more jobs")
        return shown, {Job._meta.verbose_name_plural: count}, set(), []

    def _selected(self, request, queryset):
        jobs = list(queryset.select_related("tenant").order_by("id")[: ACTION_LIMIT + 1])
        if len(jobs) > ACTION_LIMIT:
            self.message_user(request, f"Select at most {ACTION_LIMIT} jobs at a time (filter first).", messages.ERROR)
            return []
        return jobs

    @admin.action(description="Pause selected jobs", permissions=["operate"])
    def pause_jobs(self, request, queryset):
        done = 0
        for job in self._selected(request, queryset):
            if job.enabled:
                services.job_pause(job, note=f"paused in the admin by {request.user}", actor=actor(request))
                done += 1
        self.message_user(request, f"Paused {done} job(s).")

    @admin.action(description="Resume selected jobs", permissions=["operate"])
    def resume_jobs(self, request, queryset):
        done = 0
        for job in self._selected(request, queryset):
            if not job.enabled:
                services.job_resume(job, actor=actor(request))
                done += 1
        self.message_user(request, f"Resumed {done} job(s).")

    @admin.action(description="Trigger selected jobs now", permissions=["operate"])
    def trigger_jobs(self, request, queryset):
        runs, monitored = [], []
        for job in self._selected(request, queryset):
            if job.target_kind == TargetKind.MONITOR:  # runs elsewhere: services refuse a trigger
                monitored.append(f"{job.tenant.slug}/{job.name}")
                continue
            run, error = services.job_trigger_reporting(job, actor=actor(request))
            runs.append(run.pk)
            if error is not None:
                self.message_user(
                    request,
                    f"Run {run.pk} of {job.tenant.slug}/{job.name} is recorded but was not "
                    f"sent to the broker: {shorten(str(error), 200)}",
                    messages.ERROR,
                )
        if runs:
            self.message_user(request, f"Triggered {len(runs)} job(s): run(s) {', '.join(map(str, runs))}.")
        if monitored:
            self.message_user(
                request,
                f"Not triggered: {', '.join(monitored)}: a monitored job runs elsewhere and checks in.",
                messages.WARNING,
            )


def last_run_state() -> Subquery:
    """The state of a job's latest run (by fire time): one probe of the (job, scheduled_at)
    unique index per listed job."""
    latest = JobRun.objects.filter(job=OuterRef("pk")).order_by("-scheduled_at").values("state")[:1]
    return Subquery(latest)
