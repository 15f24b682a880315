"""API views of callers, tenants and keys: who am I, the tenants (staff) and a tenant's API keys."""

from __future__ import annotations

from django.db import transaction
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from scheduler_app import services
from scheduler_app.api import permissions as p
from scheduler_app.api import serializers as s
from scheduler_app.api.auth import IsStaffCaller, actor, api_key
from scheduler_app.api.pagination import KeysetPagination
from scheduler_app.api.schema import extend_schema
from scheduler_app.api.throttling import limit_for, rate_limit_enabled
from scheduler_app.api.views import NO_CONTENT, ApiViewMixin, TenantScopedMixin, page_of
from scheduler_app.models import ApiKey, Tenant

# --- me -------------------------------------------------------------------------------


class MeView(ApiViewMixin, GenericAPIView):
    serializer_class = s.MeSerializer
    required_permissions = {"get": ()}  # any caller may ask who it is

    @extend_schema(summary="Who am I: the key, its tenant and quotas, the rate limit", responses=s.MeSerializer)
    def get(self, request):
        key = api_key(request)
        limit = limit_for(request)
        return Response(
            s.MeSerializer(
                {
                    "key": {"prefix": key.prefix, "name": key.name, "staff": key.is_staff} if key else None,
                    "user": None if key else request.user.get_username(),
                    "tenant": key.tenant if key else None,
                    "rate_limit": {
                        "enabled": rate_limit_enabled(),
                        "requests_per_minute": limit.per_minute if limit else None,
                    },
                }
            ).data
        )


# --- tenants (staff) --------------------------------------------------------------------


def require_quota_permission(request, fields) -> None:
    """A staff session changing a tenant's quotas or weight also needs change_tenant_quotas."""
    if set(fields) & set(services.TENANT_LIMITS):
        p.require(request, p.CHANGE_TENANT_QUOTAS)


class TenantViewSet(ApiViewMixin, viewsets.GenericViewSet):
    permission_classes = (IsStaffCaller,)
    queryset = Tenant.objects.all()
    serializer_class = s.TenantSerializer
    pagination_class = KeysetPagination
    lookup_field = "slug"
    required_permissions = {
        "list": (p.VIEW_TENANT,),
        "retrieve": (p.VIEW_TENANT,),
        "create": (p.ADD_TENANT,),
        "partial_update": (p.CHANGE_TENANT,),
        "keys": p.MINT,
    }

    @extend_schema(summary="List tenants (staff)")
    def list(self, request):
        s.validated(s.ListQuerySerializer, request.query_params)
        return page_of(self, self.get_queryset(), s.TenantSerializer)

    @extend_schema(summary="A tenant (staff)")
    def retrieve(self, request, slug=None):
        return Response(s.TenantSerializer(self.get_object()).data)

    @extend_schema(
        summary="Create a tenant (staff)", request=s.TenantCreateSerializer, responses={201: s.TenantSerializer}
    )
    def create(self, request):
        data = dict(s.validated(s.TenantCreateSerializer, request.data))
        fields = {key: data.pop(key) for key in ("slug", "name", "timezone") if key in data}
        require_quota_permission(request, data)
        with transaction.atomic():  # a quota refused by tenant_update leaves no tenant behind
            tenant = services.tenant_create(**fields, actor=actor(request))
            if data:
                tenant = services.tenant_update(tenant, data, actor=actor(request))
        return Response(s.TenantSerializer(tenant).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a tenant's name, zone, active flag, quotas or weight (staff)",
        request=s.TenantChangeSerializer,
        responses=s.TenantSerializer,
    )
    def partial_update(self, request, slug=None):
        tenant = self.get_object()
        changes = s.validated(s.TenantChangeSerializer, request.data, partial=True)
        require_quota_permission(request, changes)
        return Response(s.TenantSerializer(services.tenant_update(tenant, dict(changes), actor=actor(request))).data)

    @extend_schema(
        summary="Make an API key for the tenant (staff); the key is in this response only",
        request=s.ApiKeyCreateSerializer,
        responses={201: s.ApiKeyCreatedSerializer},
    )
    @action(detail=True, methods=["post"])
    def keys(self, request, slug=None):
        tenant = self.get_object()
        return created_key(request, tenant)


def created_key(request, tenant: Tenant | None) -> Response:
    data = s.validated(s.ApiKeyCreateSerializer, request.data)
    key, raw = services.apikey_create(tenant=tenant, name=data["name"], actor=actor(request))
    key.key = raw
    return Response(s.ApiKeyCreatedSerializer(key).data, status=status.HTTP_201_CREATED)


# --- keys -------------------------------------------------------------------------------


class ApiKeyViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    queryset = ApiKey.objects.select_related("tenant")
    serializer_class = s.ApiKeySerializer
    pagination_class = KeysetPagination
    lookup_url_kwarg = "id"
    required_permissions = {
        "list": (p.VIEW_APIKEY,),
        "retrieve": (p.VIEW_APIKEY,),
        "create": p.MINT,
        "destroy": (p.CHANGE_APIKEY,),
    }  # revoking: the admin's revoke action

    @extend_schema(summary="The tenant's API keys, revoked ones included")
    def list(self, request):
        s.validated(s.ListQuerySerializer, request.query_params)
        return page_of(self, self.get_queryset(), s.ApiKeySerializer)

    @extend_schema(summary="An API key (never the key itself)")
    def retrieve(self, request, id=None):
        return Response(s.ApiKeySerializer(self.get_object()).data)

    @extend_schema(
        summary="Make an API key for the tenant; the key is in this response only",
        request=s.ApiKeyCreateSerializer,
        responses={201: s.ApiKeyCreatedSerializer},
    )
    def create(self, request):
        return created_key(request, self.tenant)

    @extend_schema(summary="Revoke an API key (at once; the key stays listed as revoked)", responses={204: NO_CONTENT})
    def destroy(self, request, id=None):
        services.apikey_revoke(self.get_object(), actor=actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
