"""Delete the finished runs the retention policy lets go, now: `manage.py prune_runs
[--dry-run] [--tenant SLUG] [--batch-size N]`.

Beats do this in the background (scheduler_app/ledger/retention.py); this is for operators: after
shortening a policy, on a deployment that turns the beats' pruning off
(CRONFLEET_RETENTION_IN_BEAT=false), or to see what a policy would remove (--dry-run). It
walks every tenant and every job with a retention of its own once, in batches of its own
transaction each (safe beside running beats and workers: rows another transaction holds are
passed over, and looked at again by the beats' next walk), prints its progress every second, and then prunes old audit events about runs.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app import services
from scheduler_app.conf import app_settings
from scheduler_app.ledger import policy as retention_policy
from scheduler_app.ledger import retention
from scheduler_app.management.tables import OneLineErrors, format_table
from scheduler_app.models import JOB_RETENTION_SET, Job, Tenant


class Command(OneLineErrors, BaseCommand):
    help = "Delete finished runs older than the retention policy allows (--dry-run: only count them)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Count what would be deleted; delete nothing")
        parser.add_argument("--tenant", metavar="SLUG", default="", help="Only this tenant's runs and audit events")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=app_settings.RETENTION_BATCH_SIZE,
            metavar="N",
            help="Runs looked at per statement (default %(default)s)",
        )

    def handle(self, *args, dry_run: bool, tenant: str, batch_size: int, **options) -> None:
        if not 1 <= batch_size <= 100_000:
            raise CommandError("prune_runs: --batch-size must be between 1 and 100000", returncode=2)
        try:
            only = services.tenant_by_slug(tenant, field="tenant") if tenant else None
        except services.InvalidInput as exc:
            raise CommandError(f"prune_runs: {exc.field}: {exc.message}", returncode=2) from None
        self.stdout.write(self.policy_line(only))
        pruner = retention.once_through(batch_size=batch_size, tenant_id=only.id if only else None, dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        progress = retention.prune_everything(
            pruner,
            report=lambda p: self.stdout.write(
                f"  {p.examined:>12,} runs looked at, {verb} {p.doomed if dry_run else p.pruned:>12,} "
                f"({rate(p.doomed if dry_run else p.pruned, p.seconds)} runs/s)"
            ),
        )
        self.stdout.write(
            format_table(
                ["", "runs", "audit events"],
                [
                    ("looked at", f"{progress.examined:,}", "-"),
                    (verb, f"{(progress.doomed if dry_run else progress.pruned):,}", f"{progress.audit_pruned:,}"),
                ],
            )
        )
        if progress.calls_pruned:  # ledger/spentcalls.py
            self.stdout.write(
                f"spent django.tasks calls' jobs {'to delete' if dry_run else 'deleted'}: {progress.calls_pruned:,}"
            )
        self.stdout.write(
            f"prune_runs: {'dry run, nothing deleted' if dry_run else 'done'} in "
            f"{progress.seconds:.1f}s of statements, {progress.batches} batches"
        )

    def policy_line(self, only: Tenant | None) -> str:
        default = retention_policy.resolve()[0]
        tenants = Tenant.objects.filter(**({"id": only.id} if only else {}))
        own_tenants = sum(
            1
            for t in tenants.only(*retention_policy.FIELDS)
            if any(getattr(t, f) is not None for f in retention_policy.FIELDS)
        )
        own_jobs = Job.objects.filter(JOB_RETENTION_SET, **({"tenant": only} if only else {})).count()
        return (
            f"prune_runs: settings keep finished runs {days(default.days)}, failed and dead "
            f"{days(default.kept_days(failed=True) or 0)}, and each job's newest {default.keep_last}; "
            f"{own_tenants} tenant(s) and {own_jobs} job(s) set their own"
            + (f" (tenant {only.slug} only)" if only else "")
        )


def days(n: int) -> str:
    return "forever" if n == 0 else f"{n} days"


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}" if seconds > 0 else "-"
