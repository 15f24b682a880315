"""Plain views: health checks for load balancers and orchestrators."""

from django.db import connection
from django.http import JsonResponse


def healthz(request):
    """200 when the database answers; 503 otherwise."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database error means "not healthy"; say which
        return JsonResponse({"status": "error", "database": type(exc).__name__}, status=503)
    return JsonResponse({"status": "ok"})
