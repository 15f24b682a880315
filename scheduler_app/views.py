"""Plain views: health checks for load balancers and orchestrators."""

from django.db import DatabaseError, connection
from django.http import JsonResponse


def healthz(request):
    """200 when the database answers; 503 otherwise."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:  # the database is down or refusing us: say which error
        return JsonResponse({"status": "error", "database": type(exc).__name__}, status=503)
    return JsonResponse({"status": "ok"})
