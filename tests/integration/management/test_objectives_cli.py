"""`manage.py objectives add/list/remove` (docs/objectives.md): declared, listed with the
budget left, removed; bad input refused naming the field."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scheduler_app import services
from scheduler_app.ledger.objectives import floor_hour
from scheduler_app.models import Objective, ObjectiveHour, db_now

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("objectives", *args, stdout=out)
    return out.getvalue()


def test_objectives_are_declared_listed_and_removed():
    services.tenant_create(slug="acme", name="Acme")

    said = run("add", "--tenant", "acme", "--name", "fires", "--kind", "start", "--within", "60", "--target", "99%")
    run("add", "--fleet", "--name", "billing", "--kind", "success", "--tag", "billing", "--target", "0.999")
    fires = Objective.objects.get(name="fires")
    ObjectiveHour.objects.create(objective=fires, hour=floor_hour(db_now()), good=995, total=1000)
    listed = run("list", "--tenant", "acme")
    removed = run("remove", "acme/fires")

    assert said == "Declared objective acme/fires: 99% of fires start within 60 s over 28 days\n"
    assert "acme/fires" in listed and "995/1000" in listed and "99.500%" in listed and "50.000%" in listed
    assert "billing" in listed and "99.9% of runs succeed (jobs tagged billing) over 28 days" in listed
    assert removed == "Removed objective acme/fires\n"
    assert list(Objective.objects.values_list("name", flat=True)) == ["billing"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "--tenant", "nobody", "--name", "x", "--kind", "success", "--target", "99%"], "tenant"),
        (["add", "--fleet", "--name", "x", "--kind", "start", "--target", "99%"], "threshold_seconds"),
        (["add", "--fleet", "--name", "x", "--kind", "success", "--target", "101%"], "target"),
        (["remove", "acme/none"], "objective"),
    ],
)
def test_bad_input_is_refused_naming_the_field(args, message):
    services.tenant_create(slug="acme", name="Acme")

    with pytest.raises(CommandError) as refused:
        run(*args)

    assert str(refused.value).startswith(f"objectives {args[0]}: {message}")


def test_a_name_is_declared_once_per_tenant():
    services.tenant_create(slug="acme", name="Acme")
    run("add", "--tenant", "acme", "--name", "runs", "--kind", "success", "--target", "99%")

    with pytest.raises(CommandError, match="name: tenant 'acme' already has an objective 'runs'"):
        run("add", "--tenant", "acme", "--name", "runs", "--kind", "success", "--target", "99%")
