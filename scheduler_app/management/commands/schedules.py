"""`manage.py schedules plan|apply`: jobs declared as code (a TOML file, each app's
schedules.py) kept in step with the database. The work is scheduler_app.services.declared's;
this command parses the options and prints the plan, with the time-data impact on the jobs it
covers. `manage.py schedules impact`: every job's held fires checked against the zone and
holiday data installed (services/impact.py, docs/time-data.md), `--apply` re-plans them.

Exit codes (as `terraform plan -detailed-exitcode`, with drift apart):
0 nothing to do; 1 an error (bad declarations, nothing declared at all, a refused apply:
nothing written);
2 plan: changes to apply; 3 plan: drift, a managed job edited outside its declaration.
impact: 0 no change, 2 changes found (0 once --apply re-planned them), 1 an error.
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app.management.tables import OneLineErrors, plural, utc_text
from scheduler_app.services import declared, impact, tenant_by_slug
from scheduler_app.validation import InvalidInput

NOTHING, ERROR, CHANGES, DRIFT = 0, 1, 2, 3
SIGNS = {"create": "+", "change": "~", "remove": "-"}


class Command(OneLineErrors, BaseCommand):
    help = (
        "Keep the jobs declared as code (CRONFLEET_SCHEDULES_FILE or --file, and each app's schedules.py) "
        "in step with the database: plan says what would change, apply does it in one transaction. "
        "plan exits 0 (nothing to do), 2 (changes) or 3 (drift); errors exit 1."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        for name, text in (
            ("plan", "Say what apply would create, change and remove"),
            ("apply", "Create, change and remove jobs as the declarations say, in one transaction"),
        ):
            sub = actions.add_parser(name, help=text)
            sub.add_argument(
                "--owner",
                help="Only this owner's declarations and its managed jobs in the tenants they name "
                "(default: every owner declared)",
            )
            sub.add_argument("--file", help="The TOML file of declarations (default: CRONFLEET_SCHEDULES_FILE)")
            sub.add_argument(
                "--prune",
                choices=["pause", "delete"],
                default="pause",
                help="What becomes of a managed job no longer declared (default: pause)",
            )
            if name == "apply":
                sub.add_argument(
                    "--fingerprint",
                    help="Refuse unless the plan is still the one with this fingerprint (as printed by plan)",
                )
        sub = actions.add_parser(
            "impact",
            help="Check every enabled job's held fires (next_run_at, runs not yet started) against the zone "
            "and holiday data installed; report fires moved, appeared or vanished, per tenant",
        )
        sub.add_argument(
            "--horizon", default=None, help="How far ahead: 30d, 12h (default: CRONFLEET_TIME_DATA_HORIZON_DAYS)"
        )
        sub.add_argument("--tenant", help="Only this tenant's jobs (slug)")
        sub.add_argument("--json", action="store_true", help="Print the report as JSON")
        sub.add_argument("--apply", action="store_true", help="Re-plan the changed jobs' next_run_at (audited)")
        sub.add_argument("--alert", action="store_true", help="Raise an alert per change (once per change)")

    def handle(self, *args, action: str, **options) -> None:
        if action == "impact":
            return self.run_impact(**options)
        self.run_declared(action, **options)

    def run_declared(self, action: str, owner: str | None, file: str | None, prune: str, **options) -> None:
        try:
            declared.check_something_declared(file)
            found = declared.read_all(file)
            if action == "plan":
                plan = declared.make_plan(found, owner=owner, prune=prune)
                code = self.print_plan(plan, prune)
                self.print_plan_impact(plan)
            else:
                done = declared.apply_plan(found, owner=owner, prune=prune, expected=options.get("fingerprint"))
                code = self.print_applied(done, prune)
        except declared.DeclarationError as exc:
            raise CommandError(
                "schedules: bad declarations, nothing "
                + ("applied" if action == "apply" else "planned")
                + ":\n"
                + "\n".join(f"  {problem}" for problem in exc.problems),
                returncode=ERROR,
            ) from None
        except InvalidInput as exc:
            raise CommandError(f"schedules {action}: {exc.field}: {exc.message}", returncode=ERROR) from None
        if code:
            self.stdout.flush()
            sys.exit(code)

    def print_plan(self, plan: declared.Plan, prune: str) -> int:
        owners = ", ".join(plan.owners) or "(none declared)"
        self.stdout.write(f"Plan for owner{'s' if len(plan.owners) != 1 else ''} {owners}:")
        for step in plan.to_do:
            self.print_step(step, prune)
        if not plan.to_do:
            self.stdout.write(f"No changes: {plural(len(plan.of('unchanged')), 'job')} up to date.")
        self.stdout.write("")
        self.stdout.write(summary(plan, prune))
        self.print_warnings(plan)
        self.stdout.write(f"Fingerprint: {plan.fingerprint}")
        if plan.drifted:
            return DRIFT
        return CHANGES if plan.to_do else NOTHING

    def print_plan_impact(self, plan: declared.Plan) -> None:
        """The time-data impact on the jobs the plan covers that exist (apply leaves their
        next_run_at as it is unless it changes their schedule)."""
        ids = [step.job.id for step in plan.steps if step.job is not None and step.action in ("change", "unchanged")]
        if not ids:
            return
        found = impact.impact_report(job_ids=ids)
        if found.jobs:
            self.stdout.write("")
            self.stdout.write("Time-data impact on these jobs (`schedules impact --apply` re-plans them):")
            self.print_impact_jobs(found)

    def run_impact(self, *, horizon, tenant, json: bool, apply: bool, alert: bool, **options) -> None:
        try:
            span = impact.check_horizon(horizon) if horizon is not None else impact.default_horizon()
            scope = tenant_by_slug(tenant) if tenant else None
        except InvalidInput as exc:
            raise CommandError(f"schedules impact: {exc.field}: {exc.message}", returncode=ERROR) from None
        found = impact.impact_report(horizon=span, tenant=scope)
        replanned = impact.impact_apply(found, actor="cli") if apply else 0
        raised = impact.raise_alerts(found) if alert else 0
        if json:
            self.stdout.write(dumps({**impact.report_json(found), "replanned": replanned, "alerts_raised": raised}))
        else:
            self.print_impact(found, replanned if apply else None, raised if alert else None)
        if found.jobs and not apply:
            self.stdout.flush()
            sys.exit(CHANGES)

    def print_impact(self, found: impact.Report, replanned: int | None, raised: int | None) -> None:
        data = impact.data_sources()
        zones = ", ".join(data["zoneinfo_path"]) or "none"
        package = f"; then the tzdata package {data['tzdata_package']}" if data["tzdata_package"] else ""
        self.stdout.write(f"Time data: zoneinfo {zones}{package}; holidays {data['holidays']}.")
        days = found.horizon.total_seconds() / 86400
        horizon = f"{days:g} days" if days >= 1 else f"{found.horizon.total_seconds() / 3600:g} h"
        self.stdout.write(
            f"Checked {plural(found.checked, 'enabled job')} over the next {horizon} ({utc_text(found.now)})."
        )
        if not found.jobs:
            self.stdout.write("No fire moved, appeared or vanished.")
            return
        self.print_impact_jobs(found)
        self.stdout.write("")
        counts = found.counts()
        self.stdout.write(
            f"Impact: {counts['moved']} moved, {counts['appeared']} appeared, {counts['vanished']} vanished, "
            f"in {plural(len(found.jobs), 'job')} of {plural(len(found.by_tenant()), 'tenant')}."
        )
        if replanned is not None:
            self.stdout.write(f"Re-planned {plural(replanned, 'job')}: next_run_at set to the fire the data says now.")
        elif any(item.replan for item in found.jobs):
            self.stdout.write("Fix: `manage.py schedules impact --apply` sets their next_run_at as the data says now.")
        if raised is not None:
            self.stdout.write(f"Alerts raised: {raised} (changes alerted before are not raised again).")

    def print_impact_jobs(self, found: impact.Report) -> None:
        for tenant, items in found.by_tenant().items():
            self.stdout.write("")
            self.stdout.write(f"Tenant {tenant}: {impact.tenant_summary(items)}")
            for item in items:
                replan = f"; next_run_at {utc_text(item.next_run_at)} -> {utc_text(item.replan)}" if item.replan else ""
                done = " (re-planned)" if item.replanned else ""
                self.stdout.write(f"  {item.name}{replan}{done}")
                for change in item.changes:
                    self.stdout.write(f"    {impact.change_text(change)}")

    def print_step(self, step: declared.Step, prune: str) -> None:
        what = {"create": "create", "change": "change", "remove": f"remove ({prune})"}[step.action]
        self.stdout.write("")
        self.stdout.write(f"{SIGNS[step.action]} {what} {step.label}")
        if step.action == "create":
            assert step.declared is not None  # a create step has its declaration
            spec = step.declared.spec
            self.stdout.write(f"    {schedule_text(spec)}; {target_text(spec)} (from {step.declared.source})")
        if step.adopted:
            self.stdout.write(f"    {step.adopted}")
        width = max((len(key) for key in step.diff), default=0)
        for key, (old, new) in sorted(step.diff.items()):
            self.stdout.write(f"    {key.ljust(width)}  {value_text(old)} → {value_text(new)}")
        if step.fires_before != step.fires_after:
            self.stdout.write(f"    next fires before: {fires_text(step.fires_before)}")
            self.stdout.write(f"    next fires after:  {fires_text(step.fires_after)}")
        if step.drift:
            fixed = "apply overwrites it" if step.action == "change" else "removed all the same"
            self.stdout.write(f"    ! drift: edited outside the declaration: {', '.join(step.drift)} ({fixed})")
        if step.digest_only:
            self.stdout.write("    (the fields match the declaration again; apply records them as applied)")

    def print_warnings(self, plan: declared.Plan) -> None:
        for warning in plan.warnings:
            self.stdout.write(f"Warning: {warning}.")

    def print_applied(self, done: declared.Applied, prune: str) -> int:
        if not done.plan.to_do:
            self.stdout.write(
                f"Nothing to do: {plural(len(done.plan.of('unchanged')), 'job')} already as declared "
                f"(owners {', '.join(done.plan.owners) or '-'}); nothing changed."
            )
            self.print_warnings(done.plan)
            return NOTHING
        removed = f"{done.paused} paused" if prune == "pause" else f"{done.deleted} deleted"
        self.stdout.write(
            f"Applied plan {done.plan.fingerprint}: {done.created} created, {done.changed} changed, "
            f"{removed} (owners {', '.join(done.plan.owners)})."
        )
        if done.overwritten:
            self.stdout.write(
                f"Drift overwritten (edited outside the declaration, set back): {', '.join(done.overwritten)}."
            )
        self.print_warnings(done.plan)
        return NOTHING


def dumps(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


def summary(plan: declared.Plan, prune: str) -> str:
    removed = len(plan.of("remove"))
    text = (
        f"Plan: {len(plan.of('create'))} to create, {len(plan.of('change'))} to change, {removed} to remove "
        f"({'paused' if prune == 'pause' else 'deleted'}), {len(plan.of('unchanged'))} unchanged"
    )
    return text + (f"; {plural(len(plan.drifted), 'job')} drifted." if plan.drifted else ".")


def value_text(value) -> str:
    return "''" if value == "" else repr(value) if isinstance(value, str) else str(value)


def fires_text(fires) -> str:
    return ", ".join(utc_text(fire) for fire in fires) or "none"


def schedule_text(spec) -> str:
    zone = f" ({spec.timezone})" if spec.timezone else " (the tenant's zone)"
    if spec.flex_window:  # placed when applied, at the least loaded minute then
        return f"window {spec.flex_window}{zone}"
    if spec.cron:
        return f"cron {spec.cron}{zone}"
    if spec.every is not None:
        return f"every {spec.every}s"
    return f"once at {utc_text(spec.at)}"


def target_text(spec) -> str:
    if spec.target_kind == "task":
        return f"task {spec.task_name}"
    config = spec.http or spec.command or spec.sql or {}
    return f"{spec.target_kind} {config.get('url') or config.get('name') or ''}".rstrip()
