"""Admin for tenants, jobs, the run ledger and the audit trail.

Every write goes through scheduler_app.services, as the CLI's do:

- Tenants and jobs are created by services.tenant_create / services.job_create; the add
  forms check their input first (jobs with services.validate_spec) so mistakes come back
  as form errors naming the field.
- A job's change page saves through services.job_update (validated as a whole, version
  bumped, next_run_at recomputed when the schedule changes, the diff audited). Its target
  kind and an HTTP or command target are edited through the API. Pause, resume and
  trigger are changelist actions calling the services.
- A tenant's change page (name, zone, active flag, quotas, weight) saves through
  services.tenant_update. API keys are made by services.apikey_create: the key is shown
  once, in the confirmation message; afterwards only revoking is possible.
- Deleting a job calls services.job_delete (audited). Tenants are not deleted here.
- Runs and audit events are read-only records.

The ledger and the audit trail grow to millions of rows: their lists never count the
whole table next to the filtered count (show_full_result_count = False), never compute
facet counts, show foreign keys as raw ids, and the action filter lists known actions
instead of asking the table for its distinct values.
"""

from __future__ import annotations

import json

from django import forms
from django.apps import apps
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import slugify

from scheduler_app import schedules, services, validation
from scheduler_app.admin_retention import IN_FORCE, RETENTION_FIELDS, RETENTION_FIELDSET, RetentionAdminMixin
from scheduler_app.management.tables import describe_schedule, local_text, shorten, utc_text
from scheduler_app.models import ApiKey, AuditEvent, Job, JobRun, Tenant, db_now

# Jobs one pause/resume/trigger action works on; select fewer (filter first) beyond this.
ACTION_LIMIT = 500
NEXT_FIRES = 5


def actor(request) -> str:
    return f"admin:{request.user}"


def adopt(obj, created) -> None:
    """Make the admin's unsaved `obj` the row a service just created, so the admin's log
    entry and redirect name the real object."""
    for field in type(created)._meta.concrete_fields:
        setattr(obj, field.attname, getattr(created, field.attname))
    obj._state.adding = False
    obj._state.db = created._state.db


class AsciiSplitDateTimeField(forms.SplitDateTimeField):
    """The admin's date and time boxes, refusing digits other than ASCII 0-9 (strptime
    reads full-width and other scripts' digits as if they were)."""

    def clean(self, value):
        for part in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(part, str):
                try:
                    validation.check_instant_text("", part)
                except validation.InvalidInput as exc:
                    raise ValidationError(exc.message) from None
        return super().clean(value)


def jsonb_safe(value):
    """Refuse JSON that PostgreSQL's jsonb cannot store (NaN, Infinity, NUL characters)."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError:
        raise ValidationError("NaN and Infinity are not allowed") from None
    if "\\u0000" in text:
        raise ValidationError("must not contain NUL (\\u0000) characters")
    return value


# --- tenants --------------------------------------------------------------------------


TENANT_EDITABLE = ("name", "timezone", "is_active", *services.TENANT_LIMITS)


class TenantForm(forms.ModelForm):
    class Meta:
        model = Tenant
        fields = ("slug", *TENANT_EDITABLE)

    def clean_slug(self):
        slug = self.cleaned_data["slug"]
        if slugify(slug) != slug:  # the rule services.tenant_create applies
            raise ValidationError("Use lowercase letters, digits, hyphens or underscores.")
        return slug

    def clean_name(self):
        try:
            return services.check_name("name", self.cleaned_data["name"])
        except services.InvalidInput as exc:
            raise ValidationError(exc.message) from None

    def clean_timezone(self):
        try:
            return schedules.zone(self.cleaned_data["timezone"]).key
        except schedules.InvalidSchedule as exc:
            raise ValidationError(exc.message) from None


@admin.register(Tenant)
class TenantAdmin(RetentionAdminMixin, admin.ModelAdmin):
    form = TenantForm
    list_display = ("slug", "name", "timezone", "is_active", "job_count")
    list_filter = ("is_active",)
    search_fields = ("slug", "name")  # also serves the job form's tenant autocomplete
    ordering = ("slug",)

    def get_readonly_fields(self, request, obj=None):
        # The slug is how the CLI and URLs name a tenant: fixed once created.
        return ("slug", "created_at", "links", IN_FORCE) if obj else ()

    def get_fieldsets(self, request, obj=None):
        # New tenants are active with no quotas: services.tenant_create takes neither.
        if obj is None:
            return [(None, {"fields": ("slug", "name", "timezone")})]
        return [(None, {"fields": ("slug", *TENANT_EDITABLE, "created_at", "links")}), RETENTION_FIELDSET]

    def get_queryset(self, request):
        # A correlated count per listed tenant: only the page's tenants are counted.
        jobs = (Job.objects.filter(tenant=OuterRef("pk")).order_by().values("tenant")
                .annotate(n=Count("id")).values("n"))
        return super().get_queryset(request).annotate(
            job_count=Coalesce(Subquery(jobs, output_field=IntegerField()), 0))

    @admin.display(description="jobs")
    def job_count(self, tenant):
        return tenant.job_count

    @admin.display(description="see also")
    def links(self, tenant):
        return format_html(
            '<a href="{}?tenant__id__exact={}">jobs</a> · <a href="{}?tenant__id__exact={}">runs</a> · '
            '<a href="{}?tenant__id__exact={}">audit events</a>',
            reverse("admin:scheduler_app_job_changelist"), tenant.pk,
            reverse("admin:scheduler_app_jobrun_changelist"), tenant.pk,
            reverse("admin:scheduler_app_auditevent_changelist"), tenant.pk,
        )

    def save_model(self, request, obj, form, change):
        if change:
            changes = {name: form.cleaned_data[name] for name in form.changed_data if name in TENANT_EDITABLE}
            adopt(obj, services.tenant_update(Tenant.objects.get(pk=obj.pk), changes, actor=actor(request)))
            return
        adopt(obj, services.tenant_create(slug=obj.slug, name=obj.name, timezone=obj.timezone, actor=actor(request)))

    def has_delete_permission(self, request, obj=None):
        # Deleting a tenant would cascade to all its jobs, runs and audit events; there is
        # no service for it and it should not be two clicks away.
        return False


# --- jobs -----------------------------------------------------------------------------


def allowed_task_choices():
    return [(name, name) for name in settings.CRONFLEET_ALLOWED_TASKS]


# services.InvalidInput.field -> the add form's field (None: a non-field error).
SPEC_FIELD_TO_FORM = {"task": "task_name", "every": "every_seconds", "at": "run_at", "schedule": None,
                      "anchor": None}


def add_service_error(form: forms.Form, exc: services.InvalidInput) -> None:
    """Show a service's refusal on the form field it names; an item of a list field
    ("tags.1") on the list's field, saying which item."""
    name, _, item = exc.field.partition(".")
    field = SPEC_FIELD_TO_FORM.get(exc.field, name)
    if field in form.fields:
        form.add_error(field, f"{exc.field}: {exc.message}" if item else exc.message)
    else:
        form.add_error(None, exc.message)


class JobAddForm(forms.ModelForm):
    """Creates a job through services.job_create; validated by services.validate_spec."""

    task_name = forms.ChoiceField(choices=allowed_task_choices, label="Task")
    timezone = forms.CharField(required=False, max_length=64,
                               help_text="IANA zone the cron expression is read in; blank: the tenant's zone")

    class Meta:
        model = Job
        fields = ("tenant", "name", "description", "tags", "cron", "timezone", "every_seconds", "run_at",
                  "start_at", "end_at", "jitter_seconds", "task_name", "args", "kwargs", "queue", "priority",
                  "timeout_seconds", "max_attempts", "retry_backoff_seconds", "retry_backoff_max_seconds",
                  "misfire_policy", "catchup_window_seconds", "run_all_cap", "overlap_policy", "batch")
        help_texts = {"cron": "5 fields or a nickname such as @daily", "every_seconds": "Counted from now",
                      "tags": 'A JSON list of strings, e.g. ["billing"]'}

    spec: services.JobSpec | None = None

    def clean_args(self):
        return jsonb_safe(self.cleaned_data.get("args"))

    def clean_kwargs(self):
        return jsonb_safe(self.cleaned_data.get("kwargs"))

    def clean_tags(self):
        tags = jsonb_safe(self.cleaned_data.get("tags"))
        if tags is None:
            return []
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise ValidationError("Give a JSON list of strings.")
        return tags

    def clean(self):
        data = super().clean()
        tenant = data.get("tenant")
        if not data.get("timezone"):
            data["timezone"] = tenant.timezone if tenant else "UTC"
        if self.errors or tenant is None:
            return data
        spec = services.JobSpec(
            name=data["name"], task_name=data["task_name"], cron=data.get("cron") or "",
            timezone=data["timezone"], every=data.get("every_seconds"), at=data.get("run_at"),
            start_at=data.get("start_at"), end_at=data.get("end_at"), args=data.get("args"),
            kwargs=data.get("kwargs"), queue=data.get("queue") or "", priority=data["priority"],
            timeout_seconds=data["timeout_seconds"], max_attempts=data["max_attempts"],
            retry_backoff_seconds=data["retry_backoff_seconds"],
            retry_backoff_max_seconds=data["retry_backoff_max_seconds"], misfire_policy=data["misfire_policy"],
            catchup_window_seconds=data["catchup_window_seconds"], run_all_cap=data["run_all_cap"],
            overlap_policy=data["overlap_policy"], jitter_seconds=data["jitter_seconds"],
            description=data.get("description") or "", tags=data.get("tags"), batch=bool(data.get("batch")),
        )
        try:
            _, fields = services.validate_spec(tenant, spec, db_now())
        except services.InvalidInput as exc:
            add_service_error(self, exc)
            return data
        # Show the model validation what job_create will store (normalised cron and so on).
        data.update({name: value for name, value in fields.items() if name in self.fields})
        self.spec = spec
        return data


# The change form's fields -> JobSpec names (the others have the same name in both).
FORM_TO_SPEC = {"every_seconds": "every", "run_at": "at"}
JOB_EDITABLE = ("name", "description", "tags", "cron", "timezone", "every_seconds", "run_at", "start_at", "end_at",
                "task_name", "args", "kwargs", "queue", "priority", "timeout_seconds", "max_attempts",
                "retry_backoff_seconds",
                "retry_backoff_max_seconds", "misfire_policy", "catchup_window_seconds", "run_all_cap",
                "overlap_policy", "jitter_seconds", "batch")


class JobChangeForm(forms.ModelForm):
    """Edits a saved job through services.job_update; services.plan_edit validates."""

    class Meta:
        model = Job
        fields = JOB_EDITABLE

    changes: dict | None = None

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
        # Retention fields are saved apart (admin_retention), not through job_update.
        changes = {FORM_TO_SPEC.get(name, name): data.get(name) for name in self.changed_data
                   if name not in RETENTION_FIELDS}
        for text_field in ("cron", "description", "queue", "task_name", "timezone"):
            if text_field in changes and changes[text_field] is None:
                changes[text_field] = ""
        try:
            services.plan_edit(self.instance, changes, db_now())
        except services.InvalidInput as exc:
            add_service_error(self, exc)
            return data
        self.changes = changes
        return data


@admin.register(Job)
class JobAdmin(RetentionAdminMixin, admin.ModelAdmin):
    list_display = ("name", "tenant", "schedule", "enabled", "priority", "next_run_at", "last_run_state")
    list_filter = ("tenant", "enabled", "priority", "misfire_policy")
    list_select_related = ("tenant",)
    search_fields = ("name",)
    autocomplete_fields = ("tenant",)
    show_facets = admin.ShowFacets.NEVER
    actions = ("pause_jobs", "resume_jobs", "trigger_jobs")
    formfield_overrides = {models.DateTimeField: {"form_class": AsciiSplitDateTimeField}}
    add_fieldsets = (
        (None, {"fields": ("tenant", "name", "description", "tags")}),
        ("Schedule", {"fields": ("cron", "timezone", "every_seconds", "run_at", "start_at", "end_at",
                                 "jitter_seconds"),
                      "description": "Give exactly one of cron, every seconds or run at. "
                                     f"Datetimes are in the site's zone ({settings.TIME_ZONE})."}),
        ("Target", {"fields": ("task_name", "args", "kwargs", "queue", "priority", "timeout_seconds", "batch")}),
        ("Retries, misfires and overlap", {"fields": ("max_attempts", "retry_backoff_seconds",
                                                      "retry_backoff_max_seconds", "misfire_policy",
                                                      "catchup_window_seconds", "run_all_cap", "overlap_policy")}),
    )
    fieldsets = (
        (None, {"fields": ("tenant", "name", "description", "tags", "enabled", "paused_note", "version",
                           "created_at", "updated_at")}),
        ("Schedule", {"fields": ("schedule", "cron", "timezone", "every_seconds", "run_at", "anchor_at",
                                 "start_at", "end_at", "jitter_seconds", "next_run_at", "next_fires")}),
        ("Target", {"fields": ("target_kind", "target_config", "task_name", "args", "kwargs", "queue",
                               "priority", "timeout_seconds", "batch")}),
        ("Retries, misfires and overlap", {"fields": ("max_attempts", "retry_backoff_seconds",
                                                      "retry_backoff_max_seconds", "misfire_policy",
                                                      "catchup_window_seconds", "run_all_cap", "overlap_policy")}),
        RETENTION_FIELDSET,
        ("History", {"fields": ("links",)}),
    )
    readonly_fields = ("tenant", "enabled", "paused_note", "anchor_at", "target_kind", "target_config", "next_run_at",
                       "version", "created_at", "updated_at", "schedule", "next_fires", "links", IN_FORCE)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(last_run_state=last_run_state())

    def get_fieldsets(self, request, obj=None):
        return self.add_fieldsets if obj is None else self.fieldsets

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def get_form(self, request, obj=None, **kwargs):
        kwargs["form"] = JobAddForm if obj is None else JobChangeForm
        return super().get_form(request, obj, **kwargs)

    # -- display --

    @admin.display(description="schedule")
    def schedule(self, job):
        return describe_schedule(job.cron, job.timezone, job.every_seconds, job.run_at)

    @admin.display(description="last run")
    def last_run_state(self, job):
        return job.last_run_state or "-"

    @admin.display(description=f"next {NEXT_FIRES} fires")
    def next_fires(self, job):
        # The saved job: a change form shown again with errors holds the rejected values.
        job = Job.objects.get(pk=job.pk)
        fires = services.job_preview(job, count=NEXT_FIRES)
        if not fires:
            return "none left"
        rows = format_html_join("", "<li>{} &nbsp; ({})</li>",
                                ((local_text(fire, job.timezone), utc_text(fire)) for fire in fires))
        note = "" if job.enabled else "Paused: these fire only if the job is resumed before them."
        return format_html("<ol style='margin:0'>{}</ol>{}", rows, note)

    @admin.display(description="see also")
    def links(self, job):
        return format_html(
            '<a href="{}?job__id__exact={}">runs</a> · <a href="{}?job__id__exact={}">audit events</a>',
            reverse("admin:scheduler_app_jobrun_changelist"), job.pk,
            reverse("admin:scheduler_app_auditevent_changelist"), job.pk,
        )

    # -- writes: all through services --

    def has_operate_permission(self, request):
        return request.user.has_perm(f"{Job._meta.app_label}.change_job")

    def save_model(self, request, obj, form, change):
        if change:
            job = Job.objects.select_related("tenant").get(pk=obj.pk)
            adopt(obj, services.job_update(job, form.changes or {}, actor=actor(request)))
            return
        adopt(obj, services.job_create(obj.tenant, form.spec, actor=actor(request)))

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
            self.message_user(request, f"Select at most {ACTION_LIMIT} jobs at a time (filter first).",
                              messages.ERROR)
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
        runs = []
        for job in self._selected(request, queryset):
            run, error = services.job_trigger_reporting(job, actor=actor(request))
            runs.append(run.pk)
            if error is not None:
                self.message_user(request, f"Run {run.pk} of {job.tenant.slug}/{job.name} is recorded but was not "
                                           f"sent to the broker: {shorten(str(error), 200)}", messages.ERROR)
        if runs:
            self.message_user(request, f"Triggered {len(runs)} job(s): run(s) {', '.join(map(str, runs))}.")


# --- API keys -------------------------------------------------------------------------


class ApiKeyForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ("tenant", "name")
        help_texts = {"tenant": "Blank makes a staff key, which administers every tenant."}

    def clean_name(self):
        try:
            return services.check_name("name", self.cleaned_data["name"])
        except services.InvalidInput as exc:
            raise ValidationError(exc.message) from None

    def clean(self):
        data = super().clean()
        if data.get("tenant") is not None:
            try:
                services.check_key_quota(data["tenant"])
            except services.InvalidInput as exc:
                self.add_error("tenant", exc.message)
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ("prefix", "tenant", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = ("tenant",)
    list_select_related = ("tenant",)
    search_fields = ("prefix", "name")
    autocomplete_fields = ("tenant",)
    show_facets = admin.ShowFacets.NEVER
    actions = ("revoke_keys",)

    def get_fields(self, request, obj=None):
        return ("tenant", "name") if obj is None else ("prefix", "tenant", "name", "created_at", "last_used_at",
                                                       "revoked_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.get_fields(request, obj)

    def save_model(self, request, obj, form, change):
        if change:  # every field of a saved key is read-only
            return
        key, raw = services.apikey_create(tenant=obj.tenant, name=obj.name, actor=actor(request))
        adopt(obj, key)
        messages.warning(request, f"The new key (copy it now: it is shown only this once): {raw}")

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the audit trail keeps naming the key

    @admin.action(description="Revoke selected keys")
    def revoke_keys(self, request, queryset):
        keys = [key for key in queryset[:ACTION_LIMIT] if key.revoked_at is None]
        for key in keys:
            services.apikey_revoke(key, actor=actor(request))
        self.message_user(request, f"Revoked {len(keys)} key(s).")


def last_run_state() -> Subquery:
    """The state of a job's latest run (by fire time): one probe of the (job, scheduled_at)
    unique index per listed job."""
    latest = JobRun.objects.filter(job=OuterRef("pk")).order_by("-scheduled_at").values("state")[:1]
    return Subquery(latest)



# --- the ledger and the audit trail: read-only ----------------------------------------


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False  # one count of the filtered rows, not a second of the table
    show_facets = admin.ShowFacets.NEVER  # facet counts would count the table once per filter choice

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_link", "tenant", "scheduled_at", "trigger", "state", "attempt", "short_reason",
                    "started_at", "finished_at")
    list_filter = ("state", "trigger", "tenant")
    list_select_related = ("job", "tenant")
    raw_id_fields = ("job", "tenant")
    # Newest first by primary key: the unfiltered ledger of millions of rows pages from the
    # primary key index. (No date hierarchy: its distinct-years query scans the table.)
    ordering = ("-id",)

    @admin.display(description="job", ordering="job__name")
    def job_link(self, run):
        url = reverse("admin:scheduler_app_job_change", args=[run.job_id])
        return format_html('<a href="{}">{}/{}</a>', url, run.tenant.slug, run.job.name)

    @admin.display(description="reason / error")
    def short_reason(self, run):
        return shorten(run.reason or run.error, 80) or "-"


class ActionFilter(admin.SimpleListFilter):
    """Known actions, without a SELECT DISTINCT over the whole audit trail."""

    title = "action"
    parameter_name = "action"
    KNOWN = ("job.created", "job.paused", "job.resumed", "job.triggered", "job.deleted", "run.started",
             "run.succeeded", "run.failed", "run.retrying", "run.dead", "run.lost", "run.requeued",
             "run.duplicate_delivery", "run.stale_write_rejected")

    def lookups(self, request, model_admin):
        return [("job.*", "any job.* action"), ("run.*", "any run.* action"), *((a, a) for a in self.KNOWN)]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if value.endswith(".*"):
            return queryset.filter(action__startswith=value[:-1])
        return queryset.filter(action=value)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "action", "actor", "tenant", "job_name", "run_link", "short_detail")
    list_filter = (ActionFilter, "tenant")
    list_select_related = ("tenant",)
    raw_id_fields = ("tenant", "job")

    @admin.display(description="run")
    def run_link(self, event):
        if event.run_id is None:
            return "-"
        return format_html('<a href="{}">{}</a>', reverse("admin:scheduler_app_jobrun_change", args=[event.run_id]),
                           event.run_id)

    @admin.display(description="detail")
    def short_detail(self, event):
        return shorten(json.dumps(event.detail, ensure_ascii=False), 80)


# django_celery_beat is installed so that manage.py import_beat can read its tables; its admin
# pages would invite editing PeriodicTasks that nothing in a Cronfleet deployment runs.
for beat_model in apps.get_app_config("django_celery_beat").get_models():
    if admin.site.is_registered(beat_model):
        admin.site.unregister(beat_model)
