"""Jobs: made by services.job_create, edited by services.job_update, operated (pause,
resume, trigger, backfill, replay) through the services."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.db import models
from django.db.models import OuterRef, Subquery
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from scheduler_app import schedules, services
from scheduler_app.admin import checkins, jobpage
from scheduler_app.admin.common import (
    ACTION_LIMIT,
    AsciiSplitDateTimeField,
    actor,
    adopt,
    state_badge,
)
from scheduler_app.admin.jobform import JobAddForm, JobChangeForm, may_choose_any_task
from scheduler_app.admin.retention import IN_FORCE, RETENTION_FIELDSET, RetentionAdminMixin
from scheduler_app.admin.schedulelabel import schedule_label
from scheduler_app.conf import app_settings
from scheduler_app.ledger import checkstatus
from scheduler_app.management.tables import fire_text, shorten
from scheduler_app.models import PRIORITY_MAX, PRIORITY_MIN, Job, JobRun, TargetKind
from scheduler_app.observability.errors import answers_server_errors
from scheduler_app.services.edits import managed_notice
from scheduler_app.targets import sql as sqljobs

NEXT_FIRES = 5


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


SCHEDULE_FIELDSET = (
    "Schedule",
    {
        "fields": (
            "schedule_kind",
            "cron",
            "every_seconds",
            "run_at",
            "flex_window",
            "flex_scope",
            "after_job",
            "after_states",
            "timezone",
            "start_at",
            "end_at",
            "jitter_seconds",
            "calendar",
            "calendar_policy",
        ),
        "description": "Choose how the job is scheduled: only that kind's fields count. "
        f"Datetimes are in the site's zone ({settings.TIME_ZONE}). A chain runs the job when a run of "
        "another job of the tenant ends in one of its after states (a JSON list of succeeded, failed, "
        "dead; blank: succeeded).",
    },
)
TARGET_FIELDSET = (
    "Target",
    {
        "fields": (
            "target_kind",
            "task_name",
            "args",
            "kwargs",
            "http_method",
            "http_url",
            "http_headers",
            "http_body",
            "command_name",
            "command_params",
            "sql_name",
            "sql_params",
            "grace_seconds",
            "queue",
            "priority",
            "timeout_seconds",
            "batch",
        ),
        "description": "Choose what the job runs: only that kind's fields count.",
    },
)
RETRIES_FIELDSET = (
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
)


@admin.register(Job)
class JobAdmin(RetentionAdminMixin, admin.ModelAdmin):
    list_display = ("title", "schedule", "status", "checkin", "priority", "next_run_at", "last_run_state", "managed")
    list_filter = ("tenant", "enabled", PausedFilter, PriorityFilter, "misfire_policy", ManagedFilter)
    list_select_related = ("tenant", "after_job")
    search_fields = ("name",)
    autocomplete_fields = ("tenant",)
    show_facets = admin.ShowFacets.NEVER
    show_full_result_count = False  # a second count of the whole job table on every view
    actions = ("pause_jobs", "resume_jobs", "trigger_jobs")
    formfield_overrides = {models.DateTimeField: {"form_class": AsciiSplitDateTimeField}}
    add_fieldsets = (
        (None, {"fields": ("tenant", "name", "description", "tags")}),
        SCHEDULE_FIELDSET,
        TARGET_FIELDSET,
        RETRIES_FIELDSET,
        (PAUSE_TITLE, {"fields": ("pause_after_failures",), "description": PAUSE_DESCRIPTION}),
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
                    "paused_by",
                    "paused_at",
                    "paused_until",
                    "pause_expiry",
                    "version",
                    "created_at",
                    "updated_at",
                )
            },
        ),
        (
            "Schedule",
            {
                **SCHEDULE_FIELDSET[1],
                "fields": (
                    "schedule",
                    *SCHEDULE_FIELDSET[1]["fields"],
                    "anchor_at",
                    "placement",
                    "next_run_at",
                    "next_fires",
                ),
            },
        ),
        ("Target", {"fields": (*TARGET_FIELDSET[1]["fields"], "sql_statement", "check_in_url")}),
        RETRIES_FIELDSET,
        (
            PAUSE_TITLE,
            {
                "fields": ("pause_after_failures", "consecutive_failures", "auto_paused_at"),
                "description": PAUSE_DESCRIPTION,
            },
        ),
        RETENTION_FIELDSET,
        ("History", {"fields": ("links",)}),
    )
    readonly_fields = (
        "tenant",
        "enabled",
        "paused_note",
        "paused_by",
        "paused_at",
        "paused_until",
        "pause_expiry",
        "anchor_at",
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
        js = ("scheduler_app/jobform.js",)  # shows the chosen kinds' fields only

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
        return schedule_label(job)

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
            "<li>{} <b class='cf-dst'>{}</b> <i class='cf-calendar'>{}</i></li>",
            (
                (
                    fire_text(fire, job.timezone),
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
        """Through services/pauses.py: more jobs than CRONFLEET_BULK_PAUSE_APPROVAL_OVER wait
        for a second person (Pause requests)."""
        ids = [job.id for job in self._selected(request, queryset)]
        if not ids:
            return
        done = services.pause_bulk(
            None, scope="selection", job_ids=ids, note=f"paused in the admin by {request.user}", actor=actor(request)
        )
        if done.request is None:
            self.message_user(request, f"Paused {done.count} job(s).")
            return
        waiting = done.request
        self.message_user(
            request,
            f"Pausing {len(waiting.job_ids)} jobs needs a second person: pause request {waiting.id} "
            f"(fingerprint {waiting.fingerprint}) waits for another user's approval.",
            messages.WARNING,
        )

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
