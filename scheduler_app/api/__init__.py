"""The REST API under /api/v1/ (Django REST Framework).

Thin views over scheduler_app.services: the serializers check the shape and types of a
request, the services decide what it means and write. Tenant scoping lives in one place
(views.TenantScopedMixin), errors take one shape (errors.py).
"""
