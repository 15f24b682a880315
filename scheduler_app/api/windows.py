"""Maintenance windows over the API, under /api/v1/windows/{id}/, written through
services/windows.py (docs/maintenance-windows.md).

Scoping is this view's own, not TenantScopedMixin's: besides the caller's tenant's windows a
tenant key sees the deployment-wide ones (tenant null), read-only. A tenant key acts for its
own tenant only; a staff caller names the tenant in X-Cronfleet-Tenant, or names none to see
and manage the deployment-wide windows alone. Making or changing a deployment-wide window
(`"deployment": true`) is for staff callers; a tenant key gets 403. Another tenant's window
is simply not there (404)."""

from __future__ import annotations

from django.db.models import Q
from drf_spectacular.utils import OpenApiExample
from rest_framework import status, viewsets
from rest_framework.response import Response

from scheduler_app.api import permissions as p
from scheduler_app.api.auth import actor
from scheduler_app.api.errors import ApiError
from scheduler_app.api.pagination import KeysetPagination
from scheduler_app.api.schema import extend_schema
from scheduler_app.api.serializers import ListQuerySerializer, validated
from scheduler_app.api.serializers.windows import WindowSerializer, WindowWriteSerializer
from scheduler_app.api.views import NO_CONTENT, TENANT_HEADER, DeploymentScopedMixin
from scheduler_app.models import MaintenanceWindow, db_now
from scheduler_app.services.windows import window_create, window_delete, window_update
from scheduler_app.validation import InvalidInput

VIEW_WINDOW, ADD_WINDOW, CHANGE_WINDOW, DELETE_WINDOW = (
    p.perm(MaintenanceWindow, action) for action in ("view", "add", "change", "delete")
)
STAFF_ONLY = "only staff callers make or change the deployment's windows"

EXAMPLES = [
    OpenApiExample(
        "Tonight's database upgrade: the db jobs' fires skipped",
        request_only=True,
        value={
            "name": "db-upgrade",
            "starts_at": "2026-12-02T22:00:00+01:00",
            "ends_at": "2026-12-02T23:30:00+01:00",
            "action": "skip",
            "running_policy": "cancel",
            "tags": ["db"],
        },
    ),
    OpenApiExample(
        "Every Sunday 02:00-04:00 in Paris, webhooks deferred",
        request_only=True,
        value={
            "name": "sunday-freeze",
            "cron": "0 2 * * 0",
            "zone": "Europe/Paris",
            "duration_minutes": 120,
            "action": "defer",
            "target_kinds": ["http"],
        },
    ),
]


class WindowViewSet(DeploymentScopedMixin, viewsets.GenericViewSet):
    queryset = MaintenanceWindow.objects.select_related("tenant")
    serializer_class = WindowSerializer
    pagination_class = KeysetPagination
    lookup_url_kwarg = "id"
    required_permissions = {
        "list": (VIEW_WINDOW,),
        "retrieve": (VIEW_WINDOW,),
        "create": (ADD_WINDOW,),
        "partial_update": (CHANGE_WINDOW,),
        "destroy": (DELETE_WINDOW,),
    }

    def get_queryset(self):
        # A staff caller naming no tenant: the deployment's windows; a tenant's caller: its own and those.
        queryset = super().get_queryset()
        deployment = self.scoped(queryset)
        return deployment if deployment is not None else queryset.filter(Q(tenant=self.tenant) | Q(tenant__isnull=True))

    def writable(self) -> MaintenanceWindow:
        window = self.get_object()
        if window.tenant_id is None and not self.staff:
            raise ApiError("deployment", STAFF_ONLY, status.HTTP_403_FORBIDDEN)
        return window

    def shown(self, window, **kwargs) -> dict:
        return WindowSerializer(window, context={"now": db_now()}, **kwargs).data

    @extend_schema(summary="The tenant's maintenance windows and the deployment's")
    def list(self, request):
        validated(ListQuerySerializer, request.query_params)
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.shown(page, many=True))

    @extend_schema(summary="A maintenance window")
    def retrieve(self, request, id=None):
        return Response(self.shown(self.get_object()))

    @extend_schema(
        summary="Make a maintenance window",
        request=WindowWriteSerializer,
        responses={201: WindowSerializer},
        examples=EXAMPLES,
    )
    def create(self, request):
        data = dict(validated(WindowWriteSerializer, request.data))
        deployment = data.pop("deployment", False)
        if deployment and not self.staff:
            raise ApiError("deployment", STAFF_ONLY, status.HTTP_403_FORBIDDEN)
        if not deployment and self.tenant is None:
            raise ApiError(
                TENANT_HEADER,
                "name the tenant the window is for (its slug) in this header, or give "
                '"deployment": true for a window of the whole deployment',
            )
        window = window_create(
            None if deployment else self.tenant, name=data.pop("name"), actor=actor(request), refuse_over=True, **data
        )
        return Response(self.shown(window), status=status.HTTP_201_CREATED)

    @extend_schema(summary="Change a maintenance window", request=WindowWriteSerializer, responses=WindowSerializer)
    def partial_update(self, request, id=None):
        window = self.writable()
        data = dict(validated(WindowWriteSerializer, request.data, partial=True))
        if "deployment" in data and data.pop("deployment") != (window.tenant_id is None):
            raise InvalidInput("deployment", "a window keeps its owner; make a new one instead")
        if "name" in data and data.pop("name") != window.name:
            raise InvalidInput("name", "a window keeps its name; make a new one instead")
        return Response(self.shown(window_update(window, actor=actor(request), **data)))

    @extend_schema(summary="Delete a maintenance window", responses={204: NO_CONTENT})
    def destroy(self, request, id=None):
        window_delete(self.writable(), actor=actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
