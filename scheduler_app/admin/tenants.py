"""Tenants: made by services.tenant_create, changed by services.tenant_update, never deleted here.

Name, zone and active flag need change_tenant; the quotas, weight and retention (the
operator's bounds on the tenant) also need change_tenant_quotas, as through the API, and are
read-only without it."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import slugify

from scheduler_app import schedules, services
from scheduler_app.admin.common import actor, adopt
from scheduler_app.admin.dashboard import dashboard_url
from scheduler_app.admin.retention import IN_FORCE, RETENTION_FIELDS, RETENTION_FIELDSET, RetentionAdminMixin
from scheduler_app.models import Job, Tenant

TENANT_EDITABLE = ("name", "timezone", "is_active", *services.TENANT_LIMITS)
BOUNDS = (*services.TENANT_LIMITS, *RETENTION_FIELDS)  # change_tenant_quotas


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
        if obj is None:
            return ()
        fixed = ("slug", "created_at", "links", IN_FORCE)
        return fixed if self.has_quota_permission(request) else (*fixed, *BOUNDS)

    def has_quota_permission(self, request) -> bool:
        return request.user.has_perm(f"{Tenant._meta.app_label}.change_tenant_quotas")

    def get_fieldsets(self, request, obj=None):
        # New tenants are active with no quotas: services.tenant_create takes neither.
        if obj is None:
            return [(None, {"fields": ("slug", "name", "timezone")})]
        return [(None, {"fields": ("slug", *TENANT_EDITABLE, "created_at", "links")}), RETENTION_FIELDSET]

    def get_queryset(self, request):
        # A correlated count per listed tenant: only the page's tenants are counted.
        jobs = Job.objects.filter(tenant=OuterRef("pk")).order_by().values("tenant").annotate(n=Count("id")).values("n")
        return (
            super().get_queryset(request).annotate(job_count=Coalesce(Subquery(jobs, output_field=IntegerField()), 0))
        )

    @admin.display(description="jobs")
    def job_count(self, tenant):
        return tenant.job_count

    @admin.display(description="see also")
    def links(self, tenant):
        dashboard = dashboard_url()
        return format_html(
            '{}<a href="{}?tenant__id__exact={}">jobs</a> · <a href="{}?tenant__id__exact={}">runs</a> · '
            '<a href="{}?tenant__id__exact={}">audit events</a>',
            format_html('<a href="{}?tenant={}">dashboard</a> · ', dashboard, tenant.slug) if dashboard else "",
            reverse("admin:scheduler_app_job_changelist"),
            tenant.pk,
            reverse("admin:scheduler_app_jobrun_changelist"),
            tenant.pk,
            reverse("admin:scheduler_app_auditevent_changelist"),
            tenant.pk,
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
