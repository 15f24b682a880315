"""Keyset ("cursor") pagination for lists that grow to millions of rows.

A page is `ORDER BY <ordering> LIMIT limit + 1` after the last row of the previous page,
so page 10,000 costs what page 1 costs, rows inserted meanwhile neither repeat nor skip
rows, and nothing is ever counted. The cursor is the last row's ordering values, opaque to
clients (base64 of JSON); the response is {"results": [...], "next": url | null}.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime

from django.db.models import DateTimeField, Q
from rest_framework.pagination import BasePagination
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from scheduler_app.api.errors import ApiError

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class KeysetPagination(BasePagination):
    # Unique together, each "field" (ascending) or "-field" (descending); the ORDER BY a
    # list's index serves.
    ordering: tuple[str, ...] = ("id",)

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        limit = parse_limit(request.query_params.get("limit"))
        queryset = queryset.order_by(*self.ordering)
        token = request.query_params.get("cursor")
        if token is not None:
            queryset = queryset.filter(self.after(self.decode(token, queryset.model)))
        rows = list(queryset[: limit + 1])
        page = rows[:limit]
        self.next_values = [self.value_of(page[-1], name) for name in self.fields()] if len(rows) > limit else None
        return page

    def get_paginated_response(self, data):
        return Response({"results": data, "next": self.next_link()})

    def next_link(self) -> str | None:
        if self.next_values is None:
            return None
        token = base64.urlsafe_b64encode(json.dumps(self.next_values).encode()).decode().rstrip("=")
        return replace_query_param(self.request.build_absolute_uri(), "cursor", token)

    def fields(self) -> list[str]:
        return [name.lstrip("-") for name in self.ordering]

    @staticmethod
    def value_of(row, name: str):
        value = getattr(row, name)
        return value.isoformat() if isinstance(value, datetime) else value

    def decode(self, token: str, model) -> list:
        """The cursor's values, each checked against the type its field holds."""
        invalid = ApiError("cursor", "is not a cursor this list gave out")
        try:
            values = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        except (binascii.Error, ValueError, RecursionError):
            raise invalid from None
        if not isinstance(values, list) or len(values) != len(self.ordering):
            raise invalid
        decoded = []
        for name, value in zip(self.fields(), values):
            if isinstance(model._meta.get_field(name), DateTimeField):
                try:
                    value = datetime.fromisoformat(value) if isinstance(value, str) else None
                except ValueError:
                    value = None
                if value is None or value.tzinfo is None:
                    raise invalid
            elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise invalid
            decoded.append(value)
        return decoded

    def after(self, values: list) -> Q:
        """Rows strictly after `values` in the ordering: (a, b) > (x, y) spelled out as
        a > x OR (a = x AND b > y), with < for descending fields."""
        condition = None
        for field, value in reversed(list(zip(self.ordering, values))):
            name = field.lstrip("-")
            beyond = Q(**{f"{name}__{'lt' if field.startswith('-') else 'gt'}": value})
            condition = beyond if condition is None else beyond | (Q(**{name: value}) & condition)
        # The bound on the first column alone lets the index range scan start at the cursor.
        first = self.ordering[0]
        return Q(**{f"{first.lstrip('-')}__{'lte' if first.startswith('-') else 'gte'}": values[0]}) & condition

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["results", "next"],
            "properties": {
                "results": schema,
                "next": {
                    "type": "string",
                    "format": "uri",
                    "nullable": True,
                    "description": "The next page, or null on the last page",
                },
            },
        }

    def get_schema_operation_parameters(self, view):
        return [
            {
                "name": "cursor",
                "in": "query",
                "required": False,
                "schema": {"type": "string"},
                "description": "Where to continue: the cursor in the previous page's `next` link",
            },
            {
                "name": "limit",
                "in": "query",
                "required": False,
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
                "description": f"Rows per page (1-{MAX_LIMIT})",
            },
        ]


class RunPagination(KeysetPagination):
    # jobrun_tenant_recent_idx is (tenant, -scheduled_at); id breaks ties between runs
    # of one fire time.
    ordering = ("-scheduled_at", "-id")


def parse_limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_LIMIT
    if not (text.isascii() and text.isdigit() and len(text) <= 3 and 1 <= int(text) <= MAX_LIMIT):
        raise ApiError("limit", f"must be a whole number from 1 to {MAX_LIMIT}")
    return int(text)
