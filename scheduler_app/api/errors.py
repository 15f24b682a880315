"""API errors that name their field (handler.py turns every error into the API's shape).

Kept apart from the handler: the parser raises these, and DRF imports the parser while
rest_framework.views (which the handler needs) is still loading.
"""

from __future__ import annotations

from rest_framework import exceptions, status


class ApiError(exceptions.APIException):
    """An error naming its field, with any status."""

    def __init__(self, field: str, message: str, status_code: int = status.HTTP_400_BAD_REQUEST) -> None:
        super().__init__(message)
        self.field = field
        self.status_code = status_code


class PayloadTooLarge(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__("body", f"must be at most {limit} bytes", status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
