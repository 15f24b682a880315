"""Business-day calendars over the API, under /api/v1/calendars/{id}/: the caller's tenant's
only (TenantScopedMixin), written through services/calendars.py. A job names one by
`calendar` (and `calendar_policy`) in its own body; docs/calendars.md."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample
from rest_framework import status, viewsets
from rest_framework.response import Response

from scheduler_app import services
from scheduler_app.api import permissions as p
from scheduler_app.api.auth import actor
from scheduler_app.api.pagination import KeysetPagination
from scheduler_app.api.schema import extend_schema
from scheduler_app.api.serializers import ListQuerySerializer, validated
from scheduler_app.api.serializers.calendars import CalendarSerializer, CalendarWriteSerializer
from scheduler_app.api.views import NO_CONTENT, TenantScopedMixin
from scheduler_app.models import Calendar

VIEW_CALENDAR, ADD_CALENDAR, CHANGE_CALENDAR, DELETE_CALENDAR = (
    p.perm(Calendar, action) for action in ("view", "add", "change", "delete")
)

EXAMPLES = [
    OpenApiExample(
        "England's bank holidays, Monday to Friday",
        request_only=True,
        value={
            "name": "uk-bank",
            "country": "GB",
            "subdivision": "ENG",
            "extra_holidays": {"2026-12-24": "Office closed"},
        },
    ),
    OpenApiExample(
        "A six-day week",
        request_only=True,
        value={"name": "shop", "country": "DE", "weekdays": ["mon", "tue", "wed", "thu", "fri", "sat"]},
    ),
]


class CalendarViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    queryset = Calendar.objects.all()
    serializer_class = CalendarSerializer
    pagination_class = KeysetPagination
    lookup_url_kwarg = "id"
    required_permissions = {
        "list": (VIEW_CALENDAR,),
        "retrieve": (VIEW_CALENDAR,),
        "create": (ADD_CALENDAR,),
        "partial_update": (CHANGE_CALENDAR,),
        "destroy": (DELETE_CALENDAR,),
    }

    @extend_schema(summary="The tenant's business-day calendars")
    def list(self, request):
        validated(ListQuerySerializer, request.query_params)
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(CalendarSerializer(page, many=True).data)

    @extend_schema(summary="A calendar")
    def retrieve(self, request, id=None):
        return Response(CalendarSerializer(self.get_object()).data)

    @extend_schema(
        summary="Make a calendar",
        request=CalendarWriteSerializer,
        responses={201: CalendarSerializer},
        examples=EXAMPLES,
    )
    def create(self, request):
        data = dict(validated(CalendarWriteSerializer, request.data))
        calendar = services.calendar_create(self.tenant, name=data.pop("name"), actor=actor(request), **data)
        return Response(CalendarSerializer(calendar).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a calendar (its jobs' next fires move with it)",
        request=CalendarWriteSerializer,
        responses=CalendarSerializer,
    )
    def partial_update(self, request, id=None):
        calendar = self.get_object()
        data = dict(validated(CalendarWriteSerializer, request.data, partial=True))
        if "name" in data and data.pop("name") != calendar.name:
            raise services.InvalidInput("name", "a calendar keeps its name; make a new one instead")
        return Response(CalendarSerializer(services.calendar_update(calendar, actor=actor(request), **data)).data)

    @extend_schema(summary="Delete a calendar no job uses (400 naming the jobs that do)", responses={204: NO_CONTENT})
    def destroy(self, request, id=None):
        services.calendar_delete(self.get_object(), actor=actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
