"""The retention fields on the admin's tenant and job change pages.

The tenant and job admins list the fields in their change pages and mix this in: the form
checks them as the services will (a job's within its tenant's bound:
services.check_job_retention; an error shows on the field it names), and they are saved
through services.tenant_set_retention / job_set_retention after the admin's own save, which
goes through the services and leaves them alone. A tenant's are the operator's bound: the
tenant admin shows them read-only to staff without change_tenant_quotas.
"""

from __future__ import annotations

from django.contrib import admin

from scheduler_app import services
from scheduler_app.ledger import policy as retention_policy
from scheduler_app.models import Job
from scheduler_app.validation import InvalidInput

RETENTION_FIELDS = retention_policy.FIELDS
IN_FORCE = "retention_in_force"
SECTION_HELP = (
    "Finished runs are deleted this many days after they finished (failed and dead ones after "
    "the failed days), except each job's newest runs (keep last). Blank: inherited. 0 days: kept "
    "forever; keep last 0: no such floor. Runs still going are never deleted."
)


class RetentionAdminMixin:
    """For the Tenant and Job admins: validates and saves the retention fields."""

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if obj is None:
            return form

        class RetentionForm(form):
            retention_changes: dict = {}

            def clean(self):
                data = super().clean()
                changes = {name: data.get(name) for name in RETENTION_FIELDS if name in self.changed_data}
                check = (
                    services.check_job_retention if isinstance(self.instance, Job) else retention_policy.check_retention
                )
                try:
                    self.retention_changes = check(self.instance, changes)
                except InvalidInput as exc:
                    self.add_error(exc.field if exc.field in self.fields else None, exc.message)
                return data

        return RetentionForm

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        changes = getattr(form, "retention_changes", None)
        if not (change and changes):
            return
        actor = f"admin:{request.user}"
        if isinstance(form.instance, Job):
            services.job_set_retention(
                Job.objects.select_related("tenant").get(pk=form.instance.pk), changes, actor=actor
            )
        else:
            services.tenant_set_retention(type(form.instance).objects.get(pk=form.instance.pk), changes, actor=actor)

    @admin.display(description="in force")
    def retention_in_force(self, obj):
        if obj is None or obj.pk is None:
            return "-"
        fresh = type(obj).objects.get(pk=obj.pk)  # the saved values, not a rejected form's
        effective = retention_policy.describe(fresh)["effective"]
        sources = effective["sources"]

        def days(n: int) -> str:
            return "forever" if n == 0 else f"{n} days"

        return (
            f"finished runs {days(effective['days'])} ({sources['days']}), failed and dead "
            f"{days(effective['failed_days'])} ({sources['failed_days']}), each job's newest "
            f"{effective['keep_last']} whatever their age ({sources['keep_last']})"
        )


RETENTION_FIELDSET = (
    "Retention of finished runs",
    {"fields": (*RETENTION_FIELDS, IN_FORCE), "description": SECTION_HELP},
)
