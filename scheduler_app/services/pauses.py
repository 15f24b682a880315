"""Pauses of many jobs at once, and the list of paused jobs (docs/pauses.md).

A set of jobs (a tag's, a whole tenant's, or a staff selection) is paused at once when it has
at most CRONFLEET_BULK_PAUSE_APPROVAL_OVER jobs. A larger one is recorded as a PauseRequest
with the fingerprint of its exact set (schedules.set_fingerprint, as schedules as code binds
an apply to its plan's fingerprint) and happens only when another person approves that
fingerprint (the permission approve_pauserequest, checked at the door) while the set is still
the same: a job made, tagged, paused or resumed meanwhile changes the set, and the approval
is refused. Every pause keeps who, why, when and until when (models/lifecycle.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import F, Q, QuerySet

from scheduler_app import schedules
from scheduler_app.conf import app_settings
from scheduler_app.models import AuditEvent, Job, PauseRequest, PauseRequestState, Tenant, db_now
from scheduler_app.models.lifecycle import pause_detail, pause_fields, skip_due_fires
from scheduler_app.validation import InvalidInput, check_line, check_name

SELECTION = "selection"
TENANT = "tenant"


@dataclass
class BulkPause:
    count: int  # jobs paused now (0 while the request waits)
    request: PauseRequest | None = None  # the request waiting for a second person


def approval_over() -> int:
    return int(app_settings.BULK_PAUSE_APPROVAL_OVER)


def scope_of(*, tag: str | None) -> str:
    return f"tag:{check_name('tag', tag, max_length=64)}" if tag else TENANT


def scope_jobs(tenant: Tenant | None, scope: str, job_ids: list[int] | None = None) -> QuerySet:
    """The running (enabled) jobs a scope names now."""
    jobs = Job.objects.filter(enabled=True)
    if tenant is not None:
        jobs = jobs.filter(tenant=tenant)
    if scope == SELECTION:
        return jobs.filter(id__in=job_ids or [])
    if scope.startswith("tag:"):
        return jobs.tagged(scope[4:])
    return jobs


def pause_bulk(
    tenant: Tenant | None,
    *,
    scope: str,
    job_ids: list[int] | None = None,
    note: str = "",
    actor: str = "",
    until: datetime | None = None,
    on_expiry: str = "",
) -> BulkPause:
    """Pause the running jobs of `scope` ("tag:<tag>", "tenant", or "selection" of `job_ids`)
    now, or, over the threshold, record a request for a second person's approval."""
    note, now = check_line("note", note), db_now()
    pause_fields(note=note, actor=actor, now=now, until=until, on_expiry=on_expiry)  # refuse a bad end now
    ids = sorted(scope_jobs(tenant, scope, job_ids).values_list("id", flat=True))
    if len(ids) <= approval_over():
        with transaction.atomic():
            count = pause_jobs(ids, scope=scope, note=note, actor=actor, until=until, on_expiry=on_expiry)
        return BulkPause(count)
    with transaction.atomic():
        request = PauseRequest.objects.create(
            tenant=tenant,
            scope=scope,
            job_ids=ids,
            fingerprint=schedules.set_fingerprint(scope, ids),
            note=note[:500],
            paused_until=until,
            pause_expiry=(on_expiry or schedules.DEFAULT_EXPIRY) if until else "",
            requested_by=actor[:200],
            requested_at=now,
        )
        if tenant is not None:
            AuditEvent.objects.create(
                tenant=tenant,
                action="pause.requested",
                actor=actor,
                detail={"request": request.id, "scope": scope, "jobs": len(ids), "fingerprint": request.fingerprint},
            )
    return BulkPause(0, request)


def pause_jobs(ids: list[int], *, scope: str, note: str, actor: str, until: datetime | None, on_expiry: str) -> int:
    """Pause these jobs (those still running), one audit row each. Call in a transaction."""
    fields = pause_fields(note=note, actor=actor, now=db_now(), until=until, on_expiry=on_expiry)
    changed = list(
        Job.objects.filter(id__in=ids, enabled=True).select_for_update().values_list("id", "tenant_id", "name")
    )
    changed_ids = [job_id for job_id, _, _ in changed]
    skip_due_fires(changed_ids)
    Job.objects.filter(id__in=changed_ids).update(**fields, version=F("version") + 1)
    detail = {**pause_detail(fields), "scope": scope}
    AuditEvent.objects.bulk_create(
        AuditEvent(tenant_id=tenant_id, job_id=job_id, job_name=name, action="job.paused", actor=actor, detail=detail)
        for job_id, tenant_id, name in changed
    )
    return len(changed)


def pause_request_approve(
    request: PauseRequest, *, fingerprint: str, actor: str, tenant: Tenant | None = None
) -> BulkPause:
    """Approve a waiting bulk pause and pause its jobs, refused (InvalidInput, nothing
    written) when `actor` asked for it, when `fingerprint` is not the request's, or when the
    jobs its scope names now are not the set it was asked for. `tenant`: the caller's (a
    tenant's caller approves its own tenant's requests only)."""
    with transaction.atomic():
        request = locked_request(request.id, tenant)
        if not actor or actor == request.requested_by:
            raise InvalidInput("actor", f"{request.requested_by!r} asked for this pause: another person approves it")
        if fingerprint != request.fingerprint:
            raise InvalidInput("fingerprint", f"is not this request's ({request.fingerprint})")
        # Lock the scope's jobs, running or not: no pause or resume changes the set until commit.
        locking = Job.objects.filter(id__in=request.job_ids)
        if request.scope != SELECTION:
            locking = Job.objects.filter(tenant_id=request.tenant_id)
            locking = locking.tagged(request.scope[4:]) if request.scope.startswith("tag:") else locking
        list(locking.select_for_update().values_list("id", flat=True))
        now_ids = scope_jobs(request.tenant, request.scope, request.job_ids).values_list("id", flat=True)
        now_print = schedules.set_fingerprint(request.scope, now_ids)
        if now_print != request.fingerprint:
            raise InvalidInput(
                "fingerprint",
                f"the set of jobs changed since the request ({request.fingerprint}, now {now_print}): "
                "ask again for the jobs as they are now",
            )
        count = pause_jobs(
            request.job_ids,
            scope=request.scope,
            note=request.note,
            actor=f"{request.requested_by}, approved by {actor}"[:200],
            until=request.paused_until,
            on_expiry=request.pause_expiry,
        )
        decide(request, PauseRequestState.APPROVED, actor, jobs=count)
    return BulkPause(count, request)


def pause_request_refuse(request: PauseRequest, *, actor: str, tenant: Tenant | None = None) -> PauseRequest:
    """Refuse (or, by the person who asked, withdraw) a waiting bulk pause."""
    with transaction.atomic():
        request = locked_request(request.id, tenant)
        decide(request, PauseRequestState.REFUSED, actor)
    return request


def locked_request(request_id: int, tenant: Tenant | None) -> PauseRequest:
    requests = PauseRequest.objects.select_for_update().filter(id=request_id)
    if tenant is not None:
        requests = requests.filter(tenant=tenant)
    request = requests.first()
    if request is None:
        raise InvalidInput("request", f"there is no pause request {request_id}")
    if request.state != PauseRequestState.PENDING:
        raise InvalidInput("request", f"was {request.state} by {request.decided_by} already")
    return request


def decide(request: PauseRequest, state: str, actor: str, **detail) -> None:
    request.state, request.decided_by, request.decided_at = state, actor[:200], db_now()
    request.save(update_fields=["state", "decided_by", "decided_at"])
    if request.tenant_id is not None:
        AuditEvent.objects.create(
            tenant_id=request.tenant_id,
            action=f"pause.{state}",
            actor=actor,
            detail={"request": request.id, "fingerprint": request.fingerprint, **detail},
        )


def paused_jobs(jobs: QuerySet | None = None) -> QuerySet:
    """The paused jobs (of `jobs`, else all), the longest paused first (pauses from before
    their time was kept first of all)."""
    jobs = Job.objects.all() if jobs is None else jobs
    return jobs.filter(enabled=False).order_by(F("paused_at").asc(nulls_first=True), "id")


def pending_requests(tenant: Tenant | None = None) -> QuerySet:
    requests = PauseRequest.objects.filter(state=PauseRequestState.PENDING)
    return requests.filter(Q(tenant=tenant)) if tenant is not None else requests
