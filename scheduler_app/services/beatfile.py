"""`import_beat --to-file`: django-celery-beat's schedules written as a schedules-as-code
declaration (services/declared.py) instead of rows, read and translated as the import does
(services/importbeat.py)."""

from __future__ import annotations

from scheduler_app.models import Tenant, db_now
from scheduler_app.services import declared
from scheduler_app.services.importbeat import SCHEDULE_SOURCES, Report, differences, read_sources, schedule_text


def declaration_file(tenant: Tenant, owner: str, *, from_db: bool, from_settings: bool) -> tuple[str, Report]:
    """The sources as a schedules-as-code declaration (TOML, services/declared.py) of `owner`
    for `tenant`, instead of rows; with the report of what it holds and what it leaves out."""
    now = db_now()
    sources = read_sources(from_db=from_db, from_settings=from_settings, now=now)
    jobs, skipped = [], []
    for outcome, translation in sources:
        outcome.notes = translation.notes
        if translation.spec is None or translation.refusal:
            outcome.result, outcome.notes = "skipped", [translation.refusal, *translation.notes]
            outcome.missing_task = translation.missing_task
            skipped.append(f"{outcome.origin} {outcome.name}: {translation.refusal}")
            continue
        outcome.result, outcome.schedule, outcome.queue = (
            "declared",
            schedule_text(translation.spec),
            translation.spec.queue,
        )
        if translation.paused:
            outcome.notes = [
                *outcome.notes,
                "disabled in django-celery-beat: declared all the same (a declared "
                "job is enabled; leave it out to keep it off)",
            ]
        table = declared.spec_table(translation.spec)
        try:
            declared.toml_value(table)
        except ValueError as exc:
            outcome.result, outcome.notes = "skipped", [f"not writable as TOML: {exc}"]
            skipped.append(f"{outcome.origin} {outcome.name}: not writable as TOML: {exc}")
            continue
        jobs.append(table)
    header = [
        "Declared from django-celery-beat's schedules by `manage.py import_beat --to-file`.",
        "Apply with `manage.py schedules apply --file <this file>` (docs/schedules-as-code.md).",
        *(f"Not declared: {line}" for line in skipped),
    ]
    text = declared.to_toml({"owner": owner, "tenant": tenant.slug, "jobs": jobs}, comments=header)
    report = Report(
        outcomes=[outcome for outcome, _ in sources],
        differences=differences(sources),
        disabled=[],
        still_enabled=[],
        dry_run=True,
        read=(["PeriodicTask rows"] if from_db else []) + (list(SCHEDULE_SOURCES) if from_settings else []),
    )
    return text, report
