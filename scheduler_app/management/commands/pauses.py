"""Pauses from the command line (docs/pauses.md): `manage.py pauses ACTION ...`.

- list: the paused jobs, why, who, for how long, until when and what then;
- tag TENANT TAG / tenant TENANT: pause a tag's jobs or every job of a tenant; over
  CRONFLEET_BULK_PAUSE_APPROVAL_OVER jobs this records a request instead, and prints its id
  and fingerprint for a second person;
- requests: the requests waiting; approve ID --fingerprint F / refuse ID.

Who acts is cli:<--by>, else cli:<the operating system's user>: the person who asked for a
bulk pause cannot approve it.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from scheduler_app import services
from scheduler_app.management.pausing import add_pause_options, cli_actor, pause_end, paused_table
from scheduler_app.management.tables import OneLineErrors, format_table, plural, shorten
from scheduler_app.models import Job, PauseRequest, db_now
from scheduler_app.services import pauses

ACTIONS = "{list,tag,tenant,requests,approve,refuse}"


class Command(OneLineErrors, BaseCommand):
    help = "Paused jobs and bulk pauses. Subcommands: list, tag, tenant, requests, approve, refuse."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar=ACTIONS)
        lst = sub.add_parser("list", help="The paused jobs: why, who, for how long, until when")
        lst.add_argument("--tenant", metavar="SLUG", default="")
        for name, what in (("tag", "every job of TENANT tagged TAG"), ("tenant", "every job of TENANT")):
            bulk = sub.add_parser(name, help=f"Pause {what} (a request, over the threshold)")
            bulk.add_argument("tenant", metavar="TENANT")
            if name == "tag":
                bulk.add_argument("tag", metavar="TAG")
            add_pause_options(bulk)
            bulk.add_argument("--by", metavar="NAME", help="Who asks (default: the system user)")
        sub.add_parser("requests", help="The bulk pauses waiting for a second person")
        approve = sub.add_parser("approve", help="Approve another person's bulk pause: its jobs are paused")
        approve.add_argument("request", metavar="ID", type=int)
        approve.add_argument("--fingerprint", required=True, help="The request's fingerprint, as its requester saw it")
        approve.add_argument("--by", metavar="NAME", help="Who approves (default: the system user)")
        refuse = sub.add_parser("refuse", help="Refuse (or withdraw) a bulk pause request")
        refuse.add_argument("request", metavar="ID", type=int)
        refuse.add_argument("--by", metavar="NAME", help="Who refuses (default: the system user)")

    def handle(self, *args, action: str, **options) -> None:
        self.run_action("pauses", action, **options)

    def do_list(self, *, tenant: str, **options) -> None:
        jobs = Job.objects.select_related("tenant")
        if tenant:
            jobs = jobs.filter(tenant=services.tenant_by_slug(tenant, field="tenant"))
        paused = list(pauses.paused_jobs(jobs)[:1000])
        self.stdout.write(paused_table(paused, db_now()) if paused else "No job is paused.")

    def do_tag(self, *, tenant: str, tag: str | None = None, **options) -> None:
        owner = services.tenant_by_slug(tenant, field="tenant")
        until = pause_end(options.get("until"), options.get("for_"), db_now())
        done = pauses.pause_bulk(
            owner,
            scope=pauses.scope_of(tag=tag),
            note=options["note"],
            actor=cli_actor(options.get("by")),
            until=until,
            on_expiry=options["on_expiry"],
        )
        what = f" tagged {tag!r}" if tag else " (every job of the tenant)"
        if done.request is None:
            self.stdout.write(f"Paused {plural(done.count, 'job')} of {owner.slug}{what}.")
            return
        request = done.request
        self.stdout.write(
            f"Pausing {plural(len(request.job_ids), 'job')} of {owner.slug}{what} needs a second person "
            f"(more than {pauses.approval_over()}): request {request.id}, fingerprint {request.fingerprint}.\n"
            "Another person approves it with:\n"
            f"./manage.py pauses approve {request.id} --fingerprint {request.fingerprint}"
        )

    def do_tenant(self, *, tenant: str, **options) -> None:
        self.do_tag(tenant=tenant, tag=None, **options)

    def do_requests(self, **options) -> None:
        waiting = list(pauses.pending_requests().select_related("tenant")[:1000])
        if not waiting:
            self.stdout.write("No bulk pause is waiting.")
            return
        rows = [
            (r.id, r.tenant.slug if r.tenant else "-", r.scope, len(r.job_ids), r.fingerprint, r.requested_by,
             r.requested_at, r.paused_until, shorten(r.note or "(no reason given)", 40))
            for r in waiting
        ]  # fmt: skip
        headers = ("id", "tenant", "scope", "jobs", "fingerprint", "asked by", "asked at", "until", "why")
        self.stdout.write(format_table(headers, rows))

    def do_approve(self, *, request: int, fingerprint: str, **options) -> None:
        done = pauses.pause_request_approve(
            find_request(request), fingerprint=fingerprint, actor=cli_actor(options.get("by"))
        )
        self.stdout.write(f"Approved request {request}: paused {plural(done.count, 'job')}.")

    def do_refuse(self, *, request: int, **options) -> None:
        pauses.pause_request_refuse(find_request(request), actor=cli_actor(options.get("by")))
        self.stdout.write(f"Refused request {request}.")


def find_request(request_id: int) -> PauseRequest:
    found = PauseRequest.objects.filter(id=request_id).first()
    if found is None:
        raise services.InvalidInput("request", f"there is no pause request {request_id}")
    return found
