import pytest

from tests.faults.harness import Cluster, flush_broker
from tests.faults.receiver import Receiver


@pytest.fixture
def cluster(processes, queue_name, tenant):
    """A running cluster's parts: beats and workers are started by each scenario."""
    with Receiver() as receiver:
        yield Cluster(processes, receiver, queue_name, tenant)
    flush_broker()
