"""The job's add and change forms: what staff state about a job, checked by the services
(services.validate_spec for a new job, services.plan_edit for an edit), each refusal shown on
the field it names."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from scheduler_app import services
from scheduler_app.admin import chains
from scheduler_app.admin.common import TagsField, jsonb_safe
from scheduler_app.admin.retention import RETENTION_FIELDS
from scheduler_app.conf import app_settings
from scheduler_app.models import Calendar, Job, TargetKind, db_now
from scheduler_app.services.edits import check_managed
from scheduler_app.targets import monitor
from scheduler_app.targets import task as task_target

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
