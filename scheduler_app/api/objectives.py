"""Fleet objectives over the API, under /api/v1/objectives/{id}/, declared and removed through
services/objectives.py (docs/objectives.md); never changed in place.

A tenant key sees and declares its own tenant's objectives only: a fleet-wide one counts other
tenants' runs, so it is staff's alone. A staff caller names the tenant in X-Cronfleet-Tenant,
or names none to see and declare the fleet-wide objectives (`"fleet": true`). Another tenant's
objective is simply not there (404)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample
from rest_framework import status, viewsets
from rest_framework.response import Response

from scheduler_app.api import permissions as p
from scheduler_app.api.auth import actor
from scheduler_app.api.errors import ApiError
from scheduler_app.api.pagination import KeysetPagination
from scheduler_app.api.schema import extend_schema
from scheduler_app.api.serializers import ListQuerySerializer, validated
from scheduler_app.api.serializers.objectives import ObjectiveSerializer, ObjectiveWriteSerializer
from scheduler_app.api.views import NO_CONTENT, TENANT_HEADER, DeploymentScopedMixin
from scheduler_app.ledger.objectives import window_of
from scheduler_app.models import Objective, db_now
from scheduler_app.services.objectives import objective_create, objective_delete

VIEW_OBJECTIVE, ADD_OBJECTIVE, DELETE_OBJECTIVE = (p.perm(Objective, action) for action in ("view", "add", "delete"))
STAFF_ONLY = "only staff callers declare objectives over every tenant's jobs"

EXAMPLES = [
    OpenApiExample(
        "99% of the tenant's fires start within 60 s over 28 days",
        request_only=True,
        value={"name": "fires-on-time", "kind": "start", "threshold_seconds": 60, "target": "99%"},
    ),
    OpenApiExample(
        "99.5% of the billing jobs' runs succeed over 7 days",
        request_only=True,
        value={"name": "billing", "kind": "success", "tag": "billing", "target": 0.995, "window_days": 7},
    ),
]


class ObjectiveViewSet(DeploymentScopedMixin, viewsets.GenericViewSet):
    queryset = Objective.objects.select_related("tenant")
    serializer_class = ObjectiveSerializer
    pagination_class = KeysetPagination
    lookup_url_kwarg = "id"
    required_permissions = {
        "list": (VIEW_OBJECTIVE,),
        "retrieve": (VIEW_OBJECTIVE,),
        "create": (ADD_OBJECTIVE,),
        "destroy": (DELETE_OBJECTIVE,),
    }

    def get_queryset(self):
        # A staff caller naming no tenant: the fleet-wide objectives only.
        queryset = super().get_queryset()
        deployment = self.scoped(queryset)
        return deployment if deployment is not None else queryset.filter(tenant=self.tenant)

    def shown(self, objectives: list[Objective]) -> list[dict]:
        windows = window_of(objectives, db_now())
        return ObjectiveSerializer(objectives, many=True, context={"windows": windows}).data

    @extend_schema(summary="The tenant's objectives (a staff caller naming no tenant: the fleet's)")
    def list(self, request):
        validated(ListQuerySerializer, request.query_params)
        page = list(self.paginate_queryset(self.get_queryset()) or [])
        return self.get_paginated_response(self.shown(page))

    @extend_schema(summary="An objective, with its attainment and error budget left")
    def retrieve(self, request, id=None):
        return Response(self.shown([self.get_object()])[0])

    @extend_schema(
        summary="Declare an objective",
        request=ObjectiveWriteSerializer,
        responses={201: ObjectiveSerializer},
        examples=EXAMPLES,
    )
    def create(self, request):
        data = dict(validated(ObjectiveWriteSerializer, request.data))
        fleet = data.pop("fleet", False)
        if fleet and not self.staff:
            raise ApiError("fleet", STAFF_ONLY, status.HTTP_403_FORBIDDEN)
        if not fleet and self.tenant is None:
            raise ApiError(
                TENANT_HEADER,
                'name the tenant the objective is for (its slug) in this header, or give "fleet": true',
            )
        objective = objective_create(
            None if fleet else self.tenant, name=data.pop("name"), actor=actor(request), **data
        )
        return Response(self.shown([objective])[0], status=status.HTTP_201_CREATED)

    @extend_schema(summary="Remove an objective and its counts", responses={204: NO_CONTENT})
    def destroy(self, request, id=None):
        objective_delete(self.get_object(), actor=actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
