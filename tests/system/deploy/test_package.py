"""Cronfleet as a distribution: the sdist and wheel pyproject.toml builds hold the app
scheduler_app (its code, migrations, templates and static files) and nothing of the
repository around it; the wheel names its version from scheduler_app.__version__ and its
dependencies as ranges that admit the Django releases Cronfleet supports; requirements.txt, the standalone deployment's pins,
falls inside those ranges; the version is read without importing Django. `manage.py
cronfleet` and `manage.py status` name the version: tests/unit/deploy/test_package.py and
tests/integration/deploy/test_package.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import scheduler_app
from tests.conftest import ROOT
from tests.support.package import NOT_SOURCES


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """What `python -m build` makes (with build isolation, as a release would): the sdist, and
    the wheel built from that sdist, so a file the sdist leaves out is missing from the wheel
    too. From a copy of the checkout: setuptools writes build/ and *.egg-info into the source
    tree, and a build/ left there by an earlier build would put modules deleted since into
    this wheel."""
    tmp = tmp_path_factory.mktemp("package")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(tmp / "dist"), str(source)],
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
    )
    return tmp / "dist"


@pytest.fixture(scope="module")
def wheel(dist) -> zipfile.ZipFile:
    [built] = dist.glob("cronfleet-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def metadata(wheel: zipfile.ZipFile):
    [name] = [n for n in wheel.namelist() if re.fullmatch(r"cronfleet-[^/]+\.dist-info/METADATA", n)]
    return Parser().parsestr(wheel.read(name).decode())


def runtime_requirements(wheel: zipfile.ZipFile) -> dict[str, Requirement]:
    """Requires-Dist without the extras' entries, by normalized name."""
    found = [Requirement(line) for line in metadata(wheel).get_all("Requires-Dist")]
    return {norm(r.name): r for r in found if r.marker is None}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.slow
def test_the_wheel_holds_the_app_and_nothing_else(wheel):
    names = set(wheel.namelist())
    files = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "scheduler_app").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    # Every file of the app's folder: modules, migrations, formats/, templates, static files.
    assert files - names == set()
    assert "scheduler_app/migrations/0001_initial.py" in names
    assert "scheduler_app/formats/en/formats.py" in names
    assert "scheduler_app/templates/admin/cronfleet_index.html" in names
    assert "scheduler_app/static/scheduler_app/console.css" in names
    assert "scheduler_app/management/commands/cronfleet.py" in names
    # Of the repository around it, nothing: the standalone project, the benchmarks, the tests,
    # the deployment files and the scripts.
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"scheduler_app", f"cronfleet-{scheduler_app.__version__}.dist-info"}


@pytest.mark.slow
def test_the_sdist_holds_the_app_and_nothing_else(dist):
    [built] = dist.glob("cronfleet-*.tar.gz")
    with tarfile.open(built) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "scheduler_app/templates/admin/cronfleet_index.html",
        "scheduler_app/static/scheduler_app/console.css",
    } <= names
    top = {name.split("/", 1)[0] for name in names}
    assert top <= {
        "scheduler_app",
        "cronfleet.egg-info",
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "MANIFEST.in",
        "PKG-INFO",
        "setup.cfg",
    }


@pytest.mark.slow
def test_the_wheel_names_its_version_and_dependency_ranges(wheel):
    found = metadata(wheel)
    assert found["Name"] == "cronfleet"
    assert found["Version"] == scheduler_app.__version__
    assert found["Requires-Python"] == ">=3.11"
    requires = runtime_requirements(wheel)
    # The Django releases a host may run: 5.2 LTS and 6.0, not beyond what was tried.
    django = requires["django"].specifier
    assert all(django.contains(v) for v in ("5.2", "5.2.19", "6.0", "6.0.3"))
    assert not any(django.contains(v) for v in ("5.1.9", "6.1"))
    # The app's imports, not the standalone deployment's: no web server, no URL parser.
    assert {"gunicorn", "whitenoise", "dj-database-url", "flower", "mysqlclient"}.isdisjoint(requires)
    # A host's own libpq binding is its business: psycopg[binary] only through the extra.
    assert not requires["psycopg"].extras
    extras = set(found.get_all("Provides-Extra"))
    assert {"binary", "pool", "mariadb", "celery-beat", "flower"} <= extras


@pytest.mark.slow
def test_requirements_txt_pins_fall_inside_the_ranges(wheel):
    """The standalone deployment runs the versions requirements.txt pins: each must be one the
    distribution admits, or the two tell different stories about what Cronfleet runs on."""
    requires = runtime_requirements(wheel)
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            pin = Requirement(line)
            [spec] = pin.specifier
            assert spec.operator == "==", f"requirements.txt pins exactly: {line}"
            pins[norm(pin.name)] = Version(spec.version)
    outside = {
        name: str(pins[name])
        for name, req in requires.items()
        if name in pins and not req.specifier.contains(pins[name], prereleases=True)
    }
    assert outside == {}
    assert set(requires) - set(pins) <= {"tzdata"}  # tzdata comes to the deployment with django-celery-beat
    assert {"pytest", "pytest-django", "hypothesis"}.isdisjoint(pins)  # test tools: requirements-dev.txt


def test_the_version_is_read_without_importing_django():
    """setuptools reads __version__ from the module's source; importing scheduler_app itself
    must not need Django either (a host's tooling may ask before Django is set up)."""
    code = "import sys, scheduler_app; print(scheduler_app.__version__, 'django' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.split() == [scheduler_app.__version__, "False"]
    assert Version(scheduler_app.__version__)  # a version pip can order
