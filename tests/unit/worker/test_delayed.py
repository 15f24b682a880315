"""The worker's consumer (worker/events.py) runs Cronfleet's delayed delivery step in the
place of Celery's, which must still be where Celery puts it."""

from celery.worker.consumer import Consumer as CeleryConsumer

from scheduler_app.worker.events import CELERY_DELAYED_DELIVERY, Consumer


def test_the_consumer_swaps_celery_s_step_for_cronfleet_s_in_its_place():
    celery_steps = list(CeleryConsumer.Blueprint.default_steps)
    assert CELERY_DELAYED_DELIVERY in celery_steps  # else the swap below would do nothing
    steps = list(Consumer.Blueprint.default_steps)
    assert steps.index("scheduler_app.worker.delayed:DelayedDelivery") == celery_steps.index(CELERY_DELAYED_DELIVERY)
    assert CELERY_DELAYED_DELIVERY not in steps
    assert len(steps) == len(celery_steps)
