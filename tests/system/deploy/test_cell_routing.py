"""The routing proxy in front of two cells (issue 28, part 3; docs/scaling.md: Routing).

A real nginx runs deploy/nginx/cronfleet-cells.conf and cronfleet-cells-proxy.conf as written,
in front of two cells' gunicorn web servers: cell a on the test's database, cell b on a private
PostgreSQL cluster. Each request must reach the cell its API key, ping URL or host name names,
with no lookup. Then a tenant moves from a to b: its old keys and ping URLs, which still name a,
reach b once b has written its override maps (`cells routes`) and nginx has reloaded.
"""

from __future__ import annotations

import http.client
import io
import json
import shutil
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from scheduler_app import services
from scheduler_app.models import Job, JobRun, Monitor
from tests.conftest import wait_for
from tests.support import nginx, servers
from tests.support.observing import free_ports

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
DATABASE = "cronfleet"
HOSTS = {"a.cells.test": "a", "b.cells.test": "b"}


def nginx_program() -> str:
    if nginx.program() is None:
        pytest.skip("needs nginx (Debian's nginx package)")
    return nginx.program()


def request(port: int, path: str, *, key: str = "", host: str = "localhost", method: str = "GET"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Host": host, **({"Authorization": f"Bearer {key}"} if key else {})}
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheader("X-Cronfleet-Cell"), response.read()
    finally:
        conn.close()


def tenant_of(port: int, key: str) -> tuple[int, str | None, str]:
    """(status, the cell that answered, the tenant's slug or "") for GET /api/v1/me with `key`."""
    status, cell, body = request(port, "/api/v1/me", key=key)
    return status, cell, json.loads(body)["tenant"]["slug"] if status == 200 else ""


def make_tenant(slug: str) -> tuple[str, Monitor]:
    """A tenant of this cell with an API key and a monitored job: (the key, its job's monitor)."""
    tenant = services.tenant_create(slug=slug, name=slug.title())
    _, raw = services.apikey_create(tenant=tenant, name="deploy")
    job = services.job_create(
        tenant, services.JobSpec(name="backup", cron="0 3 * * *", target_kind="monitor", monitor={"grace_seconds": 60})
    )
    return raw, job.monitor


def start_web(processes, name: str, cell: str, port: int):
    env = {
        "CRONFLEET_CELL": cell,
        "CRONFLEET_WEB_BIND": f"127.0.0.1:{port}",
        "CRONFLEET_WEB_WORKERS": "1",
        "CRONFLEET_WEB_THREADS": "2",
        "DJANGO_DEBUG": "true",
        "CRONFLEET_TRUSTED_PROXIES": "1",
        "DJANGO_ALLOWED_HOSTS": ",".join(["localhost", *HOSTS]),
    }
    return processes.start(name, [sys.executable, "-m", "gunicorn", "-c", "project/gunicorn.conf.py"], **env)


def ping_path(monitor: Monitor) -> str:
    return urlsplit(services.ping_url(monitor)).path


def pinged(monitor: Monitor) -> int:
    return JobRun.objects.filter(job_id=monitor.job_id).count()


def test_the_shipped_routing_files_and_examples_pass_nginx_own_check(tmp_path):
    shutil.copytree(nginx.SHIPPED / "cronfleet-cells", tmp_path / "cronfleet-cells")
    nginx.write_conf(tmp_path, free_ports(1)[0], {}, includes=("cronfleet-cells/upstreams.conf",))

    check = subprocess.run(
        [nginx_program(), "-t", "-q", *nginx.argv(tmp_path)[1:]], capture_output=True, text=True, timeout=60
    )

    assert check.returncode == 0, check.stderr


def test_the_proxy_sends_each_request_to_its_cell_and_a_moved_tenant_follows_its_overrides(
    processes, tmp_path, settings
):
    if servers.postgres_bindir() is None:
        pytest.skip("needs PostgreSQL's initdb, pg_ctl and postgres (CRONFLEET_TEST_PG_BINDIR)")
    nginx_program()
    web_a, web_b, proxy = free_ports(3)
    routes = tmp_path / "cronfleet-cells"
    routes.mkdir()
    (routes / "hosts.map").write_text("".join(f"{host} {cell};\n" for host, cell in HOSTS.items()))
    nginx.write_conf(tmp_path, proxy, {"a": web_a, "b": web_b, "default": web_a})
    with servers.private_postgres() as cluster:
        cluster.create_database(DATABASE)
        settings.CRONFLEET_CELL = "a"
        acme_key, acme_ping = make_tenant("acme")
        start_web(processes, "web-a", "a", web_a)
        with servers.database_on(cluster.host, cluster.port, DATABASE):
            settings.CRONFLEET_CELL = "b"
            globex_key, globex_ping = make_tenant("globex")
            start_web(processes, "web-b", "b", web_b)
        server = processes.start("nginx", nginx.argv(tmp_path))
        for port, what in ((web_a, "cell a's web"), (web_b, "cell b's web"), (proxy, "nginx")):
            wait_for(
                lambda port=port: server.poll() is not None or servers_answer(port),
                timeout=60,
                what=f"{what} to answer",
            )
        assert server.poll() is None, (tmp_path / "error.log").read_text()

        # Each key reaches the cell it names; each tenant exists only there.
        assert tenant_of(proxy, acme_key) == (200, "a", "acme")
        assert tenant_of(proxy, globex_key) == (200, "b", "globex")
        # Each ping URL reaches the cell it names, and is recorded there.
        assert request(proxy, ping_path(acme_ping))[:2] == (200, "a")
        assert request(proxy, ping_path(globex_ping), method="POST")[:2] == (200, "b")
        assert pinged(acme_ping) == 1
        with servers.database_on(cluster.host, cluster.port, DATABASE, migrate=False):
            assert pinged(globex_ping) == 1
        # What carries no key goes by its host name: each cell's own admin.
        assert request(proxy, "/admin/login/", host="b.cells.test")[:2] == (200, "b")
        assert request(proxy, "/admin/login/", host="a.cells.test")[:2] == (200, "a")

        # acme moves to cell b.
        document = tmp_path / "acme.json"
        settings.CRONFLEET_CELL = "a"
        call_command("tenants", "export", "acme", "--cut", "+60", "--file", str(document), stdout=io.StringIO())
        with servers.database_on(cluster.host, cluster.port, DATABASE, migrate=False):
            settings.CRONFLEET_CELL = "b"
            call_command("tenants", "import", str(document), stdout=io.StringIO())
            # Without b's overrides its key still names a, where the tenant is no longer active.
            assert tenant_of(proxy, acme_key) == (401, "a", "")
            call_command("cells", "routes", "--out", str(routes), stdout=io.StringIO())
        settings.CRONFLEET_CELL = "a"
        call_command("cells", "routes", "--out", str(routes), stdout=io.StringIO())
        nginx.reload(server.pid)

        wait_for(
            lambda: tenant_of(proxy, acme_key) == (200, "b", "acme"),
            timeout=30,
            what="acme's old key to reach cell b after the reload",
        )
        assert request(proxy, ping_path(acme_ping) + "/start")[:2] == (200, "b")
        with servers.database_on(cluster.host, cluster.port, DATABASE, migrate=False):
            moved = Job.objects.get(tenant__slug="acme", name="backup")
            assert JobRun.objects.filter(job=moved, state="running").count() == 1  # the ping landed in b
        assert pinged(acme_ping) == 1  # and not in a
        assert tenant_of(proxy, globex_key) == (200, "b", "globex")
        settings.CRONFLEET_CELL = "a"
        stays_key, _ = make_tenant("initech")
        assert tenant_of(proxy, stays_key) == (200, "a", "initech")  # keys made in a still go to a


def servers_answer(port: int) -> bool:
    try:
        return request(port, "/healthz")[0] == 200
    except OSError:
        return False
