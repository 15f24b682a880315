"""Alert rules (one per job, written through alerts.rule_set) and the alerts raised (read-only)."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from scheduler_app import alerts
from scheduler_app.admin.common import ReadOnlyAdmin, actor, adopt, when
from scheduler_app.management import tables
from scheduler_app.management.tables import shorten
from scheduler_app.models import Alert, AlertRule
from scheduler_app.validation import InvalidInput


class AlertRuleForm(forms.ModelForm):
    emails = forms.CharField(
        required=False,
        help_text="Comma-separated addresses mailed each alert",
        widget=forms.TextInput(attrs={"size": 60}),
    )

    class Meta:
        model = AlertRule
        fields = ("job", *alerts.RULE_FIELDS)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["emails"] = ", ".join(self.instance.emails or [])

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            self.values = alerts.validate_rule({name: data.get(name) for name in alerts.RULE_FIELDS})
        except InvalidInput as exc:
            name = exc.field.partition(".")[0]
            self.add_error(name if name in self.fields else None, exc.message)
        return data


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    form = AlertRuleForm
    list_display = ("job", "enabled", "conditions", "channels", "cooldown_seconds", "last_success_at")
    list_select_related = ("job__tenant",)
    autocomplete_fields = ("job",)
    show_facets = admin.ShowFacets.NEVER
    fieldsets = (
        (None, {"fields": ("job", "enabled")}),
        (
            "When",
            {
                "fields": (
                    "no_success_seconds",
                    "grace_seconds",
                    "on_failure",
                    "max_start_lag_seconds",
                    "max_duration_seconds",
                    "min_duration_seconds",
                ),
                "description": "Seconds. Leave a box empty to not watch that condition.",
            },
        ),
        ("Where", {"fields": ("webhook_url", "chat_url", "emails", "cooldown_seconds")}),
    )

    def get_readonly_fields(self, request, obj=None):
        return ("job",) if obj else ()

    def get_changeform_initial_data(self, request):
        return {**super().get_changeform_initial_data(request), "cooldown_seconds": 3600}

    @admin.display(description="watches")
    def conditions(self, rule):
        return describe_rule(rule)

    @admin.display(description="tells")
    def channels(self, rule):
        # A rule without one still records its alerts (listed here, on the dashboard and by the CLI).
        return (
            ", ".join(
                filter(None, [rule.webhook_url and "webhook", rule.chat_url and "Slack hook", *(rule.emails or [])])
            )
            or "no channel"
        )

    def save_model(self, request, obj, form, change):
        adopt(obj, alerts.rule_set(obj.job, form.values, actor=actor(request)))

    def delete_model(self, request, obj):
        alerts.rule_delete(obj.job, actor=actor(request))

    def delete_queryset(self, request, queryset):
        for rule in queryset.select_related("job"):
            alerts.rule_delete(rule.job, actor=actor(request))


def describe_rule(rule: AlertRule) -> str:
    parts = []
    if rule.no_success_seconds is not None:
        parts.append(
            f"a success every {alerts.describe_seconds(rule.no_success_seconds)}"
            f" + {alerts.describe_seconds(rule.grace_seconds)} grace"
        )
    if rule.on_failure:
        parts.append("failed or dead runs")
    if rule.max_start_lag_seconds is not None:
        parts.append(f"start lag over {rule.max_start_lag_seconds:g} s")
    if rule.max_duration_seconds is not None:
        parts.append(f"runs over {rule.max_duration_seconds:g} s")
    if rule.min_duration_seconds is not None:
        parts.append(f"runs under {rule.min_duration_seconds:g} s")
    return "; ".join(parts) or "nothing"


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = ("raised_at", "job_link", "kind_label", "short_message", "delivery", "suppressed")
    list_filter = ("kind",)
    list_select_related = ("job__tenant",)
    raw_id_fields = ("job", "tenant", "rule")

    @admin.display(description="job")
    def job_link(self, alert):
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:scheduler_app_job_change", args=[alert.job_id]), alert.job
        )

    @admin.display(description="kind", ordering="kind")
    def kind_label(self, alert):
        return kind_text(alert)

    @admin.display(description="message")
    def short_message(self, alert):
        return message_html(alert.message, 90)

    @admin.display(description="delivered")
    def delivery(self, alert):
        return delivery_text(alert)


def kind_text(alert: Alert) -> str:
    """An alert's kind in words ('too long', not too_long)."""
    return alert.get_kind_display().lower()


def message_html(message: str, width: int):
    """An alert's message for a list: its reason whole (it may wrap), then the context after
    it, which alone may be cut (by `width` characters and by the cell's width)."""
    reason, context = alerts.split_message(message)
    if not reason:  # recorded before messages led with their reason
        return format_html('<span class="cf-cut" title="{}">{}</span>', message, shorten(message, width))
    return format_html(
        '<span class="cf-reason">{}</span> <span class="cf-cut" title="{}">— {}</span>',
        reason,
        message,
        shorten(context, max(20, width - len(reason))),
    )


def delivery_text(alert: Alert) -> str:
    return tables.delivery_text(alert, when)


def panel_context(job, now) -> dict:
    """The job page's alerts panel: the rule, what it watches, the latest alerts."""
    rule = AlertRule.objects.filter(job=job).first()
    found = alerts.recent_alerts(job)
    return {
        "cf_alert_rule": rule,
        "cf_alert_rule_text": describe_rule(rule) if rule else "",
        "cf_alert_rule_url": (
            reverse("admin:scheduler_app_alertrule_change", args=[rule.pk])
            if rule
            else reverse("admin:scheduler_app_alertrule_add") + f"?job={job.pk}"
        ),
        "cf_alerts": [
            {
                "alert": alert,
                "raised": when(alert.raised_at),
                "kind": kind_text(alert),
                "delivery": delivery_text(alert),
                "message": message_html(alert.message, 200),
            }
            for alert in found
        ],
    }


DASHBOARD_ALERTS = 8  # the dashboard's latest alerts
DASHBOARD_ALERTS_SINCE = timedelta(days=1)


def dashboard_alerts(now, tenant_id: int | None) -> list[dict]:
    """The dashboard's latest alerts of the last day (all tenants', or one tenant's through
    alert_tenant_recent_idx), each with its job as tenant/job and its delivery."""
    found = Alert.objects.filter(raised_at__gte=now - DASHBOARD_ALERTS_SINCE).select_related("job__tenant")
    if tenant_id is not None:
        found = found.filter(tenant_id=tenant_id)
    return [
        {
            "alert": alert,
            "raised": when(alert.raised_at),
            "delivery": delivery_text(alert),
            "job": str(alert.job),
            "href": reverse("admin:scheduler_app_job_change", args=[alert.job_id]),
        }
        for alert in found.order_by("-raised_at", "-id")[:DASHBOARD_ALERTS]
    ]
