"""The job's add and change forms: what staff state about a job, checked by the services
(services.validate_spec for a new job, services.plan_edit for an edit), each refusal shown on
the field it names."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from scheduler_app import services
from scheduler_app.admin import chains, jobkinds
from scheduler_app.admin.common import TagsField, jsonb_safe
from scheduler_app.conf import app_settings
from scheduler_app.models import Calendar, Job, TargetKind, db_now
from scheduler_app.services.edits import Edit, check_managed
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


# services.InvalidInput.field -> the form's field (None: a non-field error).
SPEC_FIELD_TO_FORM = {
    "task": "task_name",
    "every": "every_seconds",
    "at": "run_at",
    "schedule": None,
    "anchor": None,
    "monitor": "grace_seconds",
    "command": "command_name",
    "command.name": "command_name",
    "sql": "sql_name",
    "sql.name": "sql_name",
}


def form_field_of(field: str) -> str | None:
    """The form field a service's refusal belongs on: "http.url" on http_url, a command's or a
    statement's parameter on its parameters, an item of a list ("tags.1") on the list."""
    if field in SPEC_FIELD_TO_FORM:
        return SPEC_FIELD_TO_FORM[field]
    head, _, rest = field.partition(".")
    if head == "http":
        return "http_" + rest.partition(".")[0]
    if head in ("command", "sql"):
        return f"{head}_params"
    return head


def add_service_error(form: forms.Form, exc: services.InvalidInput) -> None:
    """Show a service's refusal on the form field it names, saying which part of it when the
    refusal names a part of the field ("tags.1", "command.params.day", "http.headers.X-Env")."""
    field = form_field_of(exc.field)
    if field not in form.fields:
        form.add_error(None, exc.message)
        return
    whole = exc.field in SPEC_FIELD_TO_FORM or exc.field.count(".") <= (1 if exc.field.startswith("http.") else 0)
    form.add_error(field, exc.message if whole else f"{exc.field}: {exc.message}")


def broken_parts(form: forms.Form) -> set[str]:
    """The JobSpec keys or groups whose form fields are in error already."""
    return {
        jobkinds.GROUP_OF.get(name, jobkinds.FORM_TO_SPEC.get(name, name)) for name in form.errors if name != "__all__"
    }


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
# The form's fields that are JobSpec values under the same name, outside the kinds.
PLAIN_FIELDS = (
    "name",
    "description",
    "tags",
    "timezone",
    "queue",
    *jobkinds.POLICY_FIELDS,
)
KIND_MODEL_FIELDS = (
    "cron",
    "every_seconds",
    "run_at",
    "flex_window",
    "flex_scope",
    "start_at",
    "end_at",
    "jitter_seconds",
    "calendar",
    "calendar_policy",
    "after_job",
    "after_states",
    "task_name",
    "args",
    "kwargs",
)
JOB_EDITABLE = (*PLAIN_FIELDS, *KIND_MODEL_FIELDS)


class JobFormBase(jobkinds.KindFields, forms.ModelForm):
    """What the add and change forms share: the kinds, the task chooser, the JSON checks."""

    tags = TagsField()
    task_name = forms.ChoiceField(choices=(), label="Task", required=False, help_text=TASK_HELP)
    any_registered = False  # set by JobAdmin.get_form (may_choose_any_task)

    def clean_after_states(self):
        return chains.clean_after_states(self)

    def clean_args(self):
        return jsonb_safe(self.cleaned_data.get("args"))

    def clean_kwargs(self):
        return jsonb_safe(self.cleaned_data.get("kwargs"))

    def clean_kind_values(self) -> tuple[dict, dict]:
        """The chosen kinds' JobSpec values (target, schedule); another kind's fields ignored."""
        target, schedule = self.chosen_kinds()
        self.ignore_other_kinds(target, schedule)
        if target == TargetKind.TASK and not self.cleaned_data.get("task_name") and "task_name" not in self.errors:
            self.add_error("task_name", "Choose a task (or another kind of target).")
        try:
            return self.target_spec(target), self.schedule_spec(schedule)
        except ValidationError as exc:  # NaN or NUL in a JSON field of the target
            self.add_error(f"{target}_params" if target in ("command", "sql") else "http_headers", exc)
            return dict(jobkinds.TARGET_BLANKS), self.schedule_spec(schedule)


class JobAddForm(JobFormBase):
    """Creates a job through services.job_create; validated by services.validate_spec."""

    task_name = forms.ChoiceField(
        choices=(), label="Task", required=False, help_text=f"What Cronfleet runs. {TASK_HELP}"
    )
    timezone = forms.CharField(
        required=False, max_length=64, help_text="IANA zone the schedule is read in; blank: the tenant's zone"
    )

    class Meta:
        model = Job
        fields = ("tenant", *JOB_EDITABLE)
        help_texts = {
            "cron": "5 fields or a nickname such as @daily",
            "every_seconds": "Counted from now",
            "flex_scope": FLEX_SCOPE_HELP,
        }

    spec: services.JobSpec | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["task_name"].choices = task_choices(any_registered=self.any_registered)
        self.offer_kinds(None)
        tenant = self.data.get("tenant") or self.initial.get("tenant")
        limit_calendars(self, int(tenant) if str(tenant or "").isdigit() else None)
        chains.limit_parents(self, int(tenant) if str(tenant or "").isdigit() else None)

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
        target, schedule = self.clean_kind_values()
        if tenant is None:
            return data
        values = {name: data[name] for name in PLAIN_FIELDS if data.get(name) is not None}
        values.update(target, **schedule)
        now = db_now()

        def check(spec: dict) -> tuple[services.JobSpec, dict]:
            job_spec = services.JobSpec(**spec)
            _, fields = services.validate_spec(tenant, job_spec, now, allow_any_registered=self.any_registered)
            return job_spec, fields

        checked, refusals = jobkinds.collect_refusals(
            check, values, jobkinds.aside_for_new(now), broken=broken_parts(self)
        )
        for exc in refusals:
            add_service_error(self, exc)
        if checked is None:
            return data
        self.spec, fields = checked
        # Show the model validation what job_create will store (normalised cron and so on).
        data.update({name: value for name, value in fields.items() if name in self.fields})
        return data


class JobChangeForm(JobFormBase):
    """Edits a saved job through services.job_update; services.plan_edit validates."""

    class Meta:
        model = Job
        fields = JOB_EDITABLE
        help_texts = {
            "cron": "5 fields or a nickname such as @daily",
            "flex_scope": FLEX_SCOPE_HELP,
        }

    changes: dict | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["task_name"].choices = task_choices(
            any_registered=self.any_registered, current=self.instance.task_name
        )
        self.offer_kinds(self.instance)
        self.initial.setdefault("target_kind", self.instance.target_kind)
        limit_calendars(self, self.instance.tenant_id)
        chains.limit_parents(self, self.instance.tenant_id, self.instance.id)

    def clean_tags(self):
        return jsonb_safe(self.cleaned_data.get("tags")) or []

    def clean(self):
        data = super().clean()
        target, schedule = self.clean_kind_values()
        changed = set(self.changed_data)
        # Retention fields are saved apart (admin/retention.py), not through job_update.
        changes = {name: data.get(name) for name in PLAIN_FIELDS if name in changed}
        for text_field in ("description", "queue", "timezone"):
            if text_field in changes and changes[text_field] is None:
                changes[text_field] = ""
        chosen_target, chosen_schedule = self.chosen_kinds()
        if changed & {"target_kind", *jobkinds.TARGET_KINDS[chosen_target]}:
            changes.update(target)  # a target given replaces the old one whole, as in the API
        if changed & {"schedule_kind", *jobkinds.SCHEDULE_KINDS[chosen_schedule]}:
            changes.update(schedule)
        now = db_now()

        def check(edit: dict) -> Edit:
            return services.plan_edit(self.instance, edit, now, allow_any_registered=self.any_registered)

        edit, refusals = jobkinds.collect_refusals(check, changes, jobkinds.aside_for_edit, broken=broken_parts(self))
        for exc in refusals:
            add_service_error(self, exc)
        if edit is None:
            return data
        try:
            if edit.diff and app_settings.MANAGED_JOBS_READ_ONLY:
                check_managed(self.instance, actor="admin")  # refuses a job managed by schedules as code
        except services.InvalidInput as exc:
            add_service_error(self, exc)
            return data
        self.changes = changes
        return data
