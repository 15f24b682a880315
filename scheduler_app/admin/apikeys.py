"""API keys: made by services.apikey_create (the key is shown once), then only revoked.

Making one needs add_apikey and mint_apikey (a key acts as its tenant; the API asks the
same), a staff key (no tenant, which may do everything) a superuser; revoking needs
change_apikey."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from scheduler_app import services
from scheduler_app.admin.common import ACTION_LIMIT, actor, adopt
from scheduler_app.models import ApiKey


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

    may_make_staff_keys = False  # ApiKeyAdmin.get_form: superusers only

    def clean(self):
        data = super().clean()
        if "tenant" in data and data["tenant"] is None and not self.may_make_staff_keys:
            self.add_error(
                "tenant", "Only a superuser makes a staff key (it administers every tenant); choose a tenant."
            )
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
        return (
            ("tenant", "name")
            if obj is None
            else ("prefix", "cell", "tenant", "name", "created_at", "last_used_at", "revoked_at")
        )

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.get_fields(request, obj)

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"may_make_staff_keys": request.user.is_superuser})

    def has_add_permission(self, request):
        return super().has_add_permission(request) and request.user.has_perm(f"{ApiKey._meta.app_label}.mint_apikey")

    def save_model(self, request, obj, form, change):
        if change:  # every field of a saved key is read-only
            return
        key, raw = services.apikey_create(tenant=obj.tenant, name=obj.name, actor=actor(request))
        adopt(obj, key)
        messages.warning(request, f"The new key (copy it now: it is shown only this once): {raw}")

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the audit trail keeps naming the key

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke_keys(self, request, queryset):
        keys = [key for key in queryset[:ACTION_LIMIT] if key.revoked_at is None]
        for key in keys:
            services.apikey_revoke(key, actor=actor(request))
        self.message_user(request, f"Revoked {len(keys)} key(s).")
