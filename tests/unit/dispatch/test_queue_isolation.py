"""One tenant's queue name must never stop the fleet: the check of a queue name
(queues.check_queue) needs nothing but the name.
"""

import pytest

from scheduler_app import queues


def test_the_check_is_pure():
    assert queues.check_queue("reports") == "reports"
    with pytest.raises(queues.InvalidQueue):
        queues.check_queue("amq.fanout")
