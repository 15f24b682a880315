"""One tenant's queue name must never stop the fleet.

Names are checked where jobs are written (API, CLI, admin share services.validate_spec);
and a queue the broker refuses anyway (an old row, a broker policy) costs only its own
messages: the beat's turn goes on for every other queue, and the refused runs stay queued
in the ledger for the republish sweep. Here against the real PostgreSQL and Redis; real
beats and workers on Redis and RabbitMQ: the system tier's test_queue_isolation.
"""

from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from scheduler_app import dispatch, services
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import Job, JobRun, RunState, db_now
from tests.conftest import take_broker_messages


@pytest.mark.parametrize(
    "name",
    [
        "_kombu.binding.cronfleet",
        "amq.direct",
        "amq.gen-abc",
        "celeryev.1234",
        "celery.pidbox",
        "w1@host.celery.pidbox",
        "abc.reply.celery.pidbox",
        "unacked",
        "unacked_index",
        "unacked_mutex",
        "Upper",
        "with space",
        "x" * 65,
        "-leading-dash",
        "colon:key",
        "tab\tname",
        "ümlaut",
    ],
)
def test_broker_internal_and_malformed_names_are_refused(tenant, name):
    with pytest.raises(services.InvalidInput) as refused:
        services.job_create(tenant, services.JobSpec(name="j", task_name="scheduler_app.echo", every=60, queue=name))

    assert refused.value.field == "queue"
    assert not Job.objects.exists()


@pytest.mark.parametrize("name", ["", "cronfleet", "reports", "emails.high", "tenant-7_batch", "0"])
def test_plain_names_are_accepted(tenant, name):
    job = services.job_create(tenant, services.JobSpec(name="j", task_name="scheduler_app.echo", every=60, queue=name))

    assert job.queue == name


@override_settings(CRONFLEET_QUEUES=["reports", "emails"])
def test_a_deployment_can_list_its_queues(tenant):
    services.job_create(tenant, services.JobSpec(name="ok", task_name="scheduler_app.echo", every=60, queue="emails"))
    services.job_create(tenant, services.JobSpec(name="default", task_name="scheduler_app.echo", every=60))

    with pytest.raises(services.InvalidInput, match="not one of this deployment's queues") as refused:
        services.job_create(
            tenant, services.JobSpec(name="no", task_name="scheduler_app.echo", every=60, queue="other")
        )
    assert refused.value.field == "queue"


def test_an_edit_to_a_broker_name_is_refused_and_changes_nothing(tenant):
    job = services.job_create(tenant, services.JobSpec(name="j", task_name="scheduler_app.echo", every=60))

    with pytest.raises(services.InvalidInput):
        services.job_update(job, {"queue": "amq.topic"})
    job.refresh_from_db()
    assert (job.queue, job.version) == ("", 1)


def test_the_api_names_the_field(tenant):
    from tests.integration.api.test_api import client_for, errors_of, job_body

    response = client_for(tenant).post(
        "/api/v1/jobs/",
        job_body(name="poison", schedule={"every": 1}, priority=9, queue="_kombu.binding.cronfleet"),
        format="json",
    )

    assert response.status_code == 400, response.content
    assert list(errors_of(response)) == ["queue"]
    assert not Job.objects.exists()


# --- a queue the broker refuses -------------------------------------------------------


def kombu_set(queue: str) -> str:
    """The name of kombu's Redis set of `queue`'s bindings (as a worker consuming `queue`
    makes it): a queue by that name is a key of the wrong type for a list push."""
    name = f"_kombu.binding.{queue}"
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.sadd(name, "binding")
    client.close()
    return name


@pytest.mark.django_db(transaction=True)
def test_a_refused_queue_costs_only_its_own_messages(queue_name):
    """On Redis a queue named after one of kombu's own keys (a set) is refused with
    WRONGTYPE; the other queue's messages still go out, in the same call."""
    poison = kombu_set(queue_name)

    sent = publish_runs([RunMessage(2, 1, poison, 60, 9), RunMessage(3, 1, queue_name, 60)])

    assert sent == 1
    assert [m["args"][0] for m in take_broker_messages(queue_name)] == [3]


@pytest.mark.django_db(transaction=True)
def test_a_beat_turn_goes_on_past_a_refused_queue(make_job, queue_name):
    """The refusal comes after commit: the poisoned fire stays recorded as queued (the
    republish sweep tries again), the healthy fire is published in the same turn."""
    now = db_now()
    poisoned, healthy = make_job(next_run_at=now), make_job(next_run_at=now, queue=queue_name)
    Job.objects.filter(id=poisoned.id).update(queue=kombu_set(queue_name))

    result = dispatch.run_turn(now, batch_size=10, grace=timedelta(seconds=60), sweep=False)

    assert (result.claimed, result.published) == (2, 1)
    assert JobRun.objects.get(job=poisoned).state == RunState.QUEUED
    assert [m["args"][0] for m in take_broker_messages(queue_name)] == [JobRun.objects.get(job=healthy).id]
