"""Chains in the admin (docs/chains.md): the job page's panel of the job's parent and its
children, and a run's parent run, each a link."""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html, format_html_join

from scheduler_app.models import Job, JobRun


def limit_parents(form, tenant_id: int | None, job_id: int | None = None) -> None:
    """Offer only the jobs of the job's tenant (not the job itself) as its parent; every
    tenant's, named with it, while a new job's tenant is not chosen (staff see all)."""
    if "after_job" not in form.fields:
        return
    field = form.fields["after_job"]
    jobs = Job.objects.select_related("tenant").order_by("tenant__slug", "name")
    if tenant_id is not None:
        field.queryset = jobs.filter(tenant_id=tenant_id).exclude(id=job_id)
        field.label_from_instance = lambda job: job.name
        return
    field.queryset = jobs
    field.label_from_instance = lambda job: f"{job.tenant.slug}/{job.name}"


def clean_after_states(form) -> list:
    """The form's after_states, [] when left blank (the services default a chained job's)."""
    return form.cleaned_data.get("after_states") or []


def job_href(job_id: int) -> str:
    return reverse("admin:scheduler_app_job_change", args=[job_id])


def run_href(run_id: int) -> str:
    return reverse("admin:scheduler_app_jobrun_change", args=[run_id])


def chain_context(job: Job) -> dict:
    """The job page's chain: its parent (with the states that start it) and its children."""
    parent = Job.objects.filter(id=job.after_job_id).values("id", "name").first() if job.after_job_id else None
    children = list(Job.objects.filter(after_job_id=job.id).order_by("name").values("id", "name", "after_states"))
    return {
        "cf_chain_parent": {**parent, "href": job_href(parent["id"]), "states": ", ".join(job.after_states)}
        if parent
        else None,
        "cf_chain_children": [
            {**child, "href": job_href(child["id"]), "states": ", ".join(child["after_states"])} for child in children
        ],
    }


def parent_run_html(run: JobRun) -> str:
    """A chained run's parent run as a link (its id alone once pruned); "-" for others."""
    if run.parent_run_id is None:
        return "-"
    parent = JobRun.objects.filter(id=run.parent_run_id).values("job__name", "state").first()
    if parent is None:
        return format_html("run {} (pruned)", run.parent_run_id)
    return format_html(
        '<a href="{}">run {}</a> of {} ({})',
        run_href(run.parent_run_id),
        run.parent_run_id,
        parent["job__name"],
        parent["state"],
    )


def child_runs_html(run: JobRun) -> str:
    """The runs a run's end started (chains), as links; "-" for none."""
    child_runs = list(JobRun.objects.filter(parent_run_id=run.id).values_list("id", "job__name"))
    if not child_runs:
        return "-"
    return format_html_join(
        ", ", '<a href="{}">run {}</a> of {}', ((run_href(run_id), run_id, name) for run_id, name in child_runs)
    )
