"""Strict fields (no "300" for 300, no true for 1, no time without a UTC offset) and the
base serializers that refuse unknown keys."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from scheduler_app import validation

INT32_MAX = 2**31 - 1  # PositiveIntegerField's column


INT64_MAX = 2**63 - 1  # ids


MAX_PREVIEW = 100


class StrictCharField(serializers.CharField):
    """Text only: DRF's CharField would take 300 or 1.5 and store "300" / "1.5"."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: not "300", not 300.0, not true. Bounded by the column."""

    default_error_messages: ClassVar[dict[str, str]] = {"invalid": "must be a whole number"}

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", INT32_MAX)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


class StrictBooleanField(serializers.BooleanField):
    default_error_messages: ClassVar[dict[str, str]] = {"invalid": "must be true or false"}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 instant with a UTC offset ("Z" or "+01:00"), returned in UTC.

    A local time without an offset is refused, never guessed: it may not exist (spring
    forward) or happen twice (autumn). So are digits other than ASCII 0-9, which
    parse_datetime would read as if they were.
    """

    default_error_messages: ClassVar[dict[str, str]] = {
        "invalid": "must be an ISO 8601 date and time with a UTC offset, e.g. 2030-01-31T09:00:00+01:00",
        "naive": "has no UTC offset; add Z or +HH:MM (a local time is never guessed)",
        "range": "must be between 1970 and 9999",
    }
    # Nothing a scheduler does happens before 1970; instants near datetime.min would
    # overflow the arithmetic the services do on them.
    EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)

    def to_internal_value(self, value):
        if not isinstance(value, str) or len(value) > 64:
            self.fail("invalid")
        try:
            validation.check_instant_text(self.field_name, value)
        except validation.InvalidInput as exc:
            raise serializers.ValidationError(exc.message) from None
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:  # well formed but impossible, such as month 13
            parsed = None
        if parsed is None:
            self.fail("invalid")
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            self.fail("naive")
        try:
            instant = parsed.astimezone(UTC)
        except OverflowError:
            self.fail("range")
        if instant < self.EARLIEST:
            self.fail("range")
        return instant


class StrictSerializer(serializers.Serializer):
    # Refuses keys it does not know, naming them: a misspelt field is a mistake to report,
    # not to ignore. (A comment, not a docstring: the schema would show it on every body.)

    read_only_names: tuple[str, ...] = ()  # fields of the response that cannot be written

    def to_internal_value(self, data):
        if isinstance(data, dict):
            errors = {
                key: "is read-only" if key in self.read_only_names else "is not a known field"
                for key in data
                if key not in self.fields
            }
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class QuerySerializer(serializers.Serializer):
    # Query parameters, refusing names it does not know: a misspelt filter (?stat=dead)
    # would otherwise list everything. `also_allowed` are read elsewhere (pagination).

    also_allowed: tuple[str, ...] = ()

    def to_internal_value(self, data):
        unknown = {
            key: "is not a known query parameter"
            for key in data
            if key not in self.fields and key not in self.also_allowed
        }
        if unknown:
            raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)


class ListQuerySerializer(QuerySerializer):
    also_allowed = ("cursor", "limit")


def validated(serializer_class, data, **kwargs) -> dict:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
